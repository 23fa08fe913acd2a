"""The self-contained HTML report of `irqlab reproduce`: a table of figures,
matplotlib plots embedded as base64 PNG (so the page can be mailed or archived
as one file), and links to the Perfetto traces written beside it. Numbers,
axes and the page itself come from plotting.py; the per-mechanism plots from
report_mechanisms.py."""

from __future__ import annotations

import math
from collections.abc import Sequence
from decimal import Decimal
from html import escape
from typing import Any
from urllib.parse import quote

from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, FuncFormatter, MaxNLocator, NullFormatter

from .cli.summary import unit_of
from .plotting import COLORS, axis_in, img, log_ticks, metric_unit, number, page, table, value_text
from .report_mechanisms import figure_runs, mechanism_section
from .reproduce import FigureRun, published_range, verdict
from .sensitivity import shown, tornado

MAX_SERIES_PER_RUN = 12  # a page of 50 panels helps nobody; `irqlab run --json` has them all
#: A study with more variants than this gets its latency tail as bars, not one
#: percentile line per variant (twenty overlapping lines read as one).
MAX_PERCENTILE_LINES = 8
#: Bar panels of a study without `[variants.plot]`: at most this many metrics.
MAX_STUDY_PANELS = 3
#: Latency percentiles of a histogram, and their place on a "nines" axis (-log10(1 - p)).
PERCENTILES = (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("p99.9", 0.999), ("p99.99", 0.9999))


# -- figures -----------------------------------------------------------------


def figure_plot(row: dict[str, Any]) -> str:
    """Published vs simulated for one figure, the tolerance band shaded, each
    bar labelled with its value in the figure's unit (a time in s with its
    prefix, a ratio as a plain number)."""
    fig = Figure(figsize=(5.0, 1.5))
    ax = fig.add_subplot()
    pub, sim, tol = row["published"], row["simulated"], row["tolerance"]
    unit = row["unit"] or ""
    scale = axis_in(ax, unit, "x", [pub, sim])
    band = tol * abs(pub) if pub != 0 else tol
    ax.axvspan((pub - band) * scale, (pub + band) * scale, color="#cde4f7")
    rng = published_range(row)
    if rng is not None:
        # A published range or bound (as the table shows it): the band, not a bar at its middle.
        lo, hi = rng
        ax.barh([1], [(hi - lo) * scale], left=lo * scale, color="#1f77b4", height=0.2)
        ax.text(hi * scale, 1, " " + range_text(rng, unit), va="center", fontsize=7)
    else:
        ax.barh([1], [pub * scale], color="#1f77b4", height=0.6)
        ax.text(pub * scale, 1, " " + value_text(pub, unit), va="center", fontsize=7)
    if sim is not None:
        ax.barh([0], [sim * scale], color="#2ca02c" if row["within_tolerance"] else "#d62728", height=0.6)
        ax.text(sim * scale, 0, " " + value_text(sim, unit), va="center", fontsize=7)
    ax.set_yticks([0, 1], ["simulated", "published"])
    # A time's ticks carry their unit (12 ms); anything else is named below the axis.
    timed = unit in ("ns", "us", "µs", "ms", "s")
    ax.set_xlabel("ratio" if row.get("relative_to") is not None else "" if timed else unit or "value")
    ax.xaxis.set_major_locator(MaxNLocator(6))
    ax.margins(x=0.25)
    # The band's meaning in the title: a legend sat on the bars' value labels.
    ax.set_title(f"{row['name']} ({row['kind']}; shaded: tolerance ±{100 * tol:.3g}%)", fontsize=9)
    verdict_text = "within tolerance" if row["within_tolerance"] else "outside tolerance"
    shown = value_text(pub, unit) if rng is None else range_text(rng, unit)
    return img(
        fig, f"{row['name']} ({row['kind']}): published {shown}, simulated {value_text(sim, unit)}, " + verdict_text
    )


def range_text(rng: tuple[float, float], unit: str) -> str:
    """A published range or bound as text: "≤ 500 ms", "0.99 MHz to 5.01 MHz", with an en dash."""
    lo, hi = rng
    return f"≤ {value_text(hi, unit)}" if lo <= 0 else f"{value_text(lo, unit)} \u2013 {value_text(hi, unit)}"


def error_overview(rows: Sequence[dict[str, Any]]) -> str:
    """Every figure's error in units of its own tolerance (the band is ±1 for
    all, so a 2 % band is as wide as a 67 % one); predictions filled, fits
    hollow: a fit within its band confirms nothing, a prediction does."""
    fig = Figure(figsize=(7.0, 0.35 * len(rows) + 1.4))
    ax = fig.add_subplot()
    ys = list(range(len(rows)))[::-1]
    ax.axvspan(-1, 1, color="#deebf7")
    limit = 3.0
    for y, r in zip(ys, rows):
        if r["error"] is None or not r["tolerance"]:
            continue
        x = r["error"] / r["tolerance"]
        color = "#2ca02c" if r["within_tolerance"] else "#d62728"
        fill = color if r["kind"] == "prediction" else "none"
        ax.plot([max(-limit, min(limit, x))], [y], "o", color=color, markerfacecolor=fill, markersize=7)
        if abs(x) > limit:  # off the chart: say by how much
            ax.text(limit if x > 0 else -limit, y + 0.25, f"{x:+.1f}x", fontsize=7, ha="center")
    ax.axvline(0, color="#888", linewidth=0.8)
    ax.set_xlim(-limit - 0.3, limit + 0.3)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_yticks(ys, [r["name"] for r in rows], fontsize=8)
    ax.set_xlabel("error in tolerances (band: within tolerance; filled: prediction, hollow: fit)")
    return img(fig, "errors of all figures in units of their tolerance; predictions filled, fits hollow")


def _kind(r: dict[str, Any]) -> str:
    """The kind as a badge: what was fitted, what a ratio is relative to (escaped)."""
    k = str(r["kind"])
    if r.get("fitted"):
        k += ": " + ", ".join(r["fitted"])
    if r.get("relative_to") is not None:
        k += " (ratio to [" + ", ".join(r["relative_to"]) + "])"
    return f'<span class="kind {escape(str(r["kind"]))}">{escape(k)}</span>'


def figure_table(rows: Sequence[dict[str, Any]], traces: dict[str, tuple[str, str]]) -> str:
    """Every figure: its kind, where it comes from, published and simulated in
    their unit, the error against the tolerance and the status."""
    heads = ["figure", "kind", "scenario", "metric", "published", "simulated", "error", "tolerance", "status"]
    cells = "".join(f'<th class="l">{h}</th>' if i < 4 else f"<th>{h}</th>" for i, h in enumerate(heads))
    out = [f'<div class="wide"><table id="figures"><tr>{cells}<th class="l">source</th></tr>']
    for r in rows:
        ok = r["within_tolerance"]
        # A range or bound has no error against its middle (it read -60.5 % within "≤ 500 ms").
        err = "n/a" if r["error"] is None else f"{r['error']:+.2%}"
        if published_range(r) is not None and r["simulated"] is not None:
            err = "in range" if ok else "out of range"
        # Against a published zero the tolerance is absolute, in the figure's unit.
        tol = f"{100 * r['tolerance']:.3g}%" if r["published"] != 0 else number(r["tolerance"], r["unit"])
        scen = escape(r["scenario"])
        if r["scenario"] in traces:
            # One run per file is traced (the file as is, else its first run): a
            # row read from another run says whose trace it links to.
            file, traced = traces[r["scenario"]]
            own = r["scenario"] + (f" [{', '.join(r['overrides'])}]" if r["overrides"] else "")
            label = "trace" if own == traced else "trace of another run"
            # URL-quoted: a file named `my#fig` linked to `trace-my` and a fragment.
            scen += f' <a href="{escape(quote(file))}" title="Perfetto trace of {escape(traced)}">{label}</a>'
        if r["overrides"]:
            scen += f'<br><span class="note">{escape(", ".join(r["overrides"]))}</span>'
        name = escape(r["name"])
        if r.get("doc"):
            what = "why it misses" if not ok else "what it rests on"
            name += f'<br><span class="note">{what}: {escape(r["doc"])}</span>'
        out.append(
            # A miss is a result (a prediction out of tolerance), not a failure: its own colour.
            f'<tr class="{verdict(r).lower()}">'
            f'<td class="l">{name}</td><td class="l">{_kind(r)}</td>'
            f'<td class="l">{scen}</td><td class="l"><code>{_breakable(r["metric"])}</code></td>'
            f"<td>{_as_published(r)}</td>"
            f"<td>{number(r['simulated'], r['unit'])}</td>"
            f'<td>{err}</td><td>&plusmn;{tol}</td><td class="v">{verdict(r)}</td>'
            f'<td class="l src">{escape(r["source"])}</td></tr>'
        )
    out.append("</table></div>")
    return "\n".join(out)


def _as_published(row: dict[str, Any]) -> str:
    """A published value with the digits it was published with (178.4, not
    178): the reader compares it with the paper. A loose tolerance stands for a
    published range or bound, and shows as one ("≤ 500 ms", not "250 ms")."""
    x, unit = row["published"], row["unit"]
    if (rng := published_range(row)) is not None:
        lo, hi = rng
        return f"&le; {number(hi, unit)}" if lo <= 0 else f"{number(lo, unit)} &ndash; {number(hi, unit)}"
    shown = number(x, unit)
    digits = len(Decimal(repr(float(x))).normalize().as_tuple().digits)
    if digits <= 3 or not math.isfinite(x):  # the shown value already has them all
        return shown
    return f'{shown} <span class="note">(published {float(x):,.{digits}g})</span>'


def _breakable(name: str) -> str:
    """A dotted metric name that may wrap after its dots, not inside a word."""
    return escape(name).replace(".", ".<wbr>")


def series_plot(stem: str, runs: Sequence[FigureRun]) -> str | None:
    """A figure file's time series, a panel per series (up to
    `MAX_SERIES_PER_RUN`), a line per run of the file (its expectations' `set`s)."""
    names = sorted({n for r in runs for n in (r.result or {}).get("series", {})})[:MAX_SERIES_PER_RUN]
    # A series that is zero throughout in every run (no interrupts in a syscall loop) shows nothing.
    names = [n for n in names if any(v for r in runs for v in (_series(r, n) or ([], []))[1])]
    if not names:
        return None
    fig = Figure(figsize=(7.5, 1.7 * len(names) + 0.9))
    axes = fig.subplots(len(names), 1, sharex=True, squeeze=False)[:, 0]
    for ax, name in zip(axes, names):
        values = [v for r in runs for v in (_series(r, name) or ([], []))[1]]
        scale = axis_in(ax, unit_of(name), values=values)
        if unit_of(name) == "fraction":
            # A share lies in 0-100 %: autoscaled around a constant 100 % it read 95-105 %.
            top = max((float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)), default=0.0)
            # (A hair above 100 %, so that a line at 100 % is not hidden under the frame.)
            ax.set_ylim(0.0, 1.02 if top <= 0 or top * 1.15 > 1.0 else top * 1.15)
        for i, r in enumerate(runs):
            tv = _series(r, name)
            if tv:
                label = ", ".join(r.overrides) or "the file as is"
                ys = [v * scale if isinstance(v, (int, float)) else math.nan for v in tv[1]]
                ax.plot(tv[0], ys, linewidth=1.0, color=COLORS[i % len(COLORS)], label=label)
        ax.set_ylabel(name, fontsize=8)
        ax.grid(True, alpha=0.3)
    axes[-1].set_xlabel("simulated time")
    axes[-1].xaxis.set_major_formatter(EngFormatter(unit="s"))
    if len(runs) > 1:
        axes[0].legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    axes[0].set_title(f"{stem}: time series", fontsize=9)
    return img(fig, f"{stem} time series")


def _series(r: FigureRun, name: str) -> tuple[list[float], list[float]] | None:
    s = (r.result or {}).get("series", {}).get(name) or {}
    t, v = s.get("t", []), s.get("v", [])
    return (t, v) if t and len(t) == len(v) else None


# -- studies -----------------------------------------------------------------


def study_plot(st: dict[str, Any], result: dict[str, Any] | None = None) -> str:
    """A study's `y` against `x`, one line per group of runs (its `[variants.plot]`);
    `result` is one of its runs', for the unit of a histogram statistic."""
    pl = st["plot"]
    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.add_subplot()
    # Each axis in its unit and scaled to it (a time in s, with its prefix): the
    # scale was dropped, so 5,000 ns read "5 ks" (a review).
    units = {w: metric_unit(pl[w], result) for w in ("x", "y")}
    vals = {w: [r["values"][pl[w]] for r in st["runs"] if r["values"][pl[w]] is not None] for w in ("x", "y")}
    scales = {w: axis_in(ax, units[w], w, vals[w]) for w in ("x", "y")}
    groups: dict[str, list[tuple[float, float]]] = {}
    for r in st["runs"]:
        x, y = r["values"][pl["x"]], r["values"][pl["y"]]
        if x is not None and y is not None:
            groups.setdefault(r.get("group") or r["name"], []).append((x * scales["x"], y * scales["y"]))
    # Single runs (a lone per-CPU or switch-rate point) are in the table; lines need two points.
    # Markers and dashes differ per line, so that one lying on another still shows.
    drawn = [(g, sorted(pts)) for g, pts in groups.items() if len(pts) >= 2]
    for i, (g, pts) in enumerate(drawn):
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            marker="osD^v<>"[i % 7],
            linestyle=("-", "--", ":", "-.")[i % 4],
            markersize=7 - (i % 3),
            label=g,
        )
    for which, key in (("x", pl["x"]), ("y", pl["y"])):
        unit = units[which]
        drawn_vals = [p[0 if which == "x" else 1] for _, pts in drawn for p in pts]
        if pl.get(f"log_{which}"):
            (ax.set_xscale if which == "x" else ax.set_yscale)("log")
            if drawn_vals and min(drawn_vals) > 0:
                log_ticks(ax, min(drawn_vals), max(drawn_vals), which)
        axis_in(ax, unit, which, vals[which])
        axis = ax.xaxis if which == "x" else ax.yaxis
        if pl.get(f"log_{which}") and unit in ("", "MB", "MHz"):
            # A log axis labels only its decades (10^1) unless told: 5, 10, 20, 50...
            axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
        # Times and shares carry their unit on the ticks (10 ms, 5 %); the rest on the label.
        label = key if unit in ("", "fraction", "ps", "ns", "us", "µs", "ms", "s") else f"{key} ({unit})"
        (ax.set_xlabel if which == "x" else ax.set_ylabel)(label)
    ax.set_title(f"{st['scenario']}: {pl['y']} against {pl['x']}", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return img(fig, f"{st['scenario']}: {pl['y']} against {pl['x']}")


def _latency_hist(metric: str, result: dict[str, Any]) -> str | None:
    for name in result.get("histograms", {}):
        if metric.startswith(name + ".") and name.endswith(("latency", "clat")):
            return str(name)
    return None


def policy_plots(st: dict[str, Any], runs: Sequence[FigureRun]) -> list[str]:
    """A study without `[variants.plot]`, its variants side by side: a bar per
    variant for its first metrics, and its latency histogram's percentiles as
    a line per variant (p50 to p99.99 on a "nines" axis) when there are few."""
    mine = {r.variant: r for r in runs if r.stem == st["scenario"] and r.variant is not None and r.result}
    if not mine or not st["runs"]:
        return []
    any_result = next(iter(mine.values())).result
    hist = next((h for m in st["metrics"] if (h := _latency_hist(m, any_result or {})) is not None), None)
    lines = hist is not None and len(st["runs"]) <= MAX_PERCENTILE_LINES
    bars = []
    for m in st["metrics"]:
        vals = [r["values"][m] for r in st["runs"]]
        if _latency_hist(m, any_result or {}) is not None or not any(vals):
            continue
        bars.append(m)
    bars = bars[:MAX_STUDY_PANELS]
    if hist is not None and not lines:
        tails = [m for m in st["metrics"] if m.startswith(hist + ".p")]
        if tails:
            bars.append(tails[-1])
    out = []
    names = [r["name"] for r in st["runs"]]
    if bars:
        fig = Figure(figsize=(2.9 * len(bars) + 2.8, 0.3 * len(names) + 1.3))
        axes = fig.subplots(1, len(bars), sharey=True, squeeze=False)[0]
        ys = list(range(len(names)))[::-1]
        for i, (ax, m) in enumerate(zip(axes, bars)):
            unit = metric_unit(m, any_result)
            vals = [r["values"][m] for r in st["runs"]]
            scale = axis_in(ax, unit, "x", vals)
            ax.barh(ys, [0 if v is None else v * scale for v in vals], color=COLORS[i % len(COLORS)], height=0.65)
            top = max((v * scale for v in vals if v is not None), default=0.0)
            for y, v in zip(ys, vals):
                if v is not None:
                    ax.annotate(f" {value_text(v, unit)}", (v * scale, y), va="center", fontsize=7)
            positive = [v * scale for v in vals if v is not None and v > 0]
            log = bool(positive) and max(positive) > 100 * min(positive)
            if log:
                # A 0 has no place on a log axis: its label goes at the axis' start.
                for y, v in zip(ys, vals):
                    if v is not None and v <= 0:
                        ax.annotate(f" {value_text(v, unit)}", (min(positive) / 2, y), va="center", fontsize=7)
            if log:
                # Over two decades (a 0.1 s run beside a 20-minute one) a linear axis hides the small ones.
                ax.set_xscale("log")
                axis_in(ax, unit, "x", vals)  # the log scale replaced the unit's tick labels
                ax.set_xlim(min(positive) / 2, max(positive) * 8)
                ax.xaxis.set_minor_formatter(NullFormatter())
                ax.set_title(f"{m} (log scale)", fontsize=8)
            else:
                ax.set_xlim(0, top * 1.45 if top > 0 else 1)
                ax.xaxis.set_major_locator(MaxNLocator(3))
                ax.set_title(m, fontsize=8)
            ax.grid(True, axis="x", alpha=0.3)
        axes[0].set_yticks(ys, names, fontsize=7)
        fig.suptitle(f"{st['scenario']}: the variants side by side", fontsize=10)
        fig.tight_layout()
        out.append(img(fig, f"{st['scenario']}: variants side by side"))
    if lines and hist is not None:
        out.append(percentile_plot(st["scenario"], hist, [(n, mine[n].result) for n in names if n in mine]))
    return out


def percentile_plot(scenario: str, hist: str, results: Sequence[tuple[str, dict[str, Any] | None]]) -> str:
    """A latency histogram's percentiles per variant, a CDF's tail on a nines axis."""
    fig = Figure(figsize=(7.0, 3.6))
    ax = fig.add_subplot()
    nines = [-math.log10(1 - p) for _, p in PERCENTILES]
    xs: list[float] = []
    for i, (name, res) in enumerate(results):
        h = (res or {}).get("histograms", {}).get(hist) or {}
        pts = [(float(h[k]), y) for (k, _), y in zip(PERCENTILES, nines) if isinstance(h.get(k), (int, float))]
        pts = [(x * 1e-9, y) for x, y in pts if x > 0]  # ns -> s
        if pts and h.get("count"):
            xs += [x for x, _ in pts]
            ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", color=COLORS[i % len(COLORS)], label=name)
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(EngFormatter(unit="s"))
    if xs:
        log_ticks(ax, min(xs), max(xs))
    ax.set_yticks(nines, [k for k, _ in PERCENTILES])
    ax.set_xlabel(f"{hist} (log scale)")
    ax.set_ylabel("percentile")
    ax.set_title(f"{scenario}: {hist} percentiles per variant", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return img(fig, f"{scenario}: {hist} percentiles per variant")


def study_tables(studies: Sequence[dict[str, Any]], runs: Sequence[FigureRun] = ()) -> list[str]:
    """One table per study: its variants down, its metrics across in their
    units; above it its `[variants.plot]`, or its variants side by side."""
    out = []
    for st in studies:
        out.append(f"<h3>{escape(st['scenario'])}</h3>")
        result = next((r.result for r in runs if r.stem == st["scenario"] and r.variant is not None), None)
        plots = [study_plot(st, result)] if st.get("plot") else policy_plots(st, runs)
        if plots:
            out.append('<div class="plots">' + "\n".join(plots) + "</div>")
        units = [metric_unit(m, result) for m in st["metrics"]]
        rows = []
        for r in st["runs"]:
            values = [number(r["values"][m], u) for m, u in zip(st["metrics"], units)]
            rows.append([escape(r["name"]), *values, escape(", ".join(r["overrides"]))])
        heads = ["variant", *(f"<code>{escape(m)}</code>" for m in st["metrics"]), "overrides"]
        out.append(table(heads, rows, left=(0, len(heads) - 1)))
    return out


# -- sensitivity -------------------------------------------------------------


def _factor_label(f: float) -> str:
    return f"x {f:g}"


def tornado_plot(entry: dict[str, Any], published: float | None = None) -> str:
    """A figure's metric's relative change with each parameter scaled by each
    factor: a row per parameter, the one that moves it most on top, a bar per
    factor side by side (both may push the same way). With `published` (the
    file's own figure for this metric), a line where the published value lies:
    which single change would reach it."""
    metric = entry["metric"]
    params = tornado(entry, metric)
    factors = entry["factors"]
    fig = Figure(figsize=(6.4, 0.55 * len(params) + 1.3))
    ax = fig.add_subplot()
    ys = list(range(len(params)))[::-1]
    height = 0.8 / max(1, len(factors))
    for i, f in enumerate(factors):
        offset = (i - (len(factors) - 1) / 2) * height
        # A missing change (a zero base) is drawn as no bar; the table says n/a.
        widths = [100 * (changes.get(f) or 0.0) for _, changes in params]
        ax.barh([y - offset for y in ys], widths, height=height, color=COLORS[i % len(COLORS)], label=_factor_label(f))
    ax.axvline(0, color="#888", linewidth=0.8)
    base = entry["base"]["metrics"].get(metric)
    if published is not None and base:
        ax.axvline(100 * (published / base - 1), color="#000", linestyle="--", linewidth=1, label="published")
    ax.set_yticks(ys, [name for name, _ in params], fontsize=8)
    ax.set_xlabel(f"change of {metric} against the file as is (%)")
    ax.set_title(f"{entry['scenario']}: sensitivity of {metric}", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=7, title="parameter scaled", title_fontsize=7)
    return img(fig, f"{entry['scenario']}: tornado of {metric}")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def sensitivity_section(entries: Sequence[dict[str, Any]], rows: Sequence[dict[str, Any]] = ()) -> list[str]:
    """Per M5 figure: its tornado plot and the numbers behind it; `rows`, the
    figures, give the published value of the file's own run where there is one."""
    out = [
        "<h2>Sensitivity</h2>",
        '<p class="note">How each M5 figure\'s headline metric moves when one parameter is scaled '
        "(the others as in the file, no expectation's <code>set</code> applied): which inputs the "
        "figure rests on. The dashed line is where the published value lies. Where the remapping path is "
        "saturated, slower interrupt handling (a longer handler, entry or MSI latency) can <em>raise</em> "
        "throughput: each interrupt then finds more completions, so fewer MSIs take the path from the data.</p>",
    ]
    for e in entries:
        if e["metric"] is None:
            continue
        metric = e["metric"]
        unit = unit_of(metric)
        base = e["base"]["metrics"][metric]
        own = next(
            (
                r
                for r in rows
                if r["scenario"] == e["scenario"]
                and r["metric"] == metric
                and not r["overrides"]
                and r.get("relative_to") is None
            ),
            None,
        )
        head = f"{escape(e['scenario'])}: {escape(metric)} = {number(base, unit)} as is"
        if own is not None:
            head += f" (published {number(own['published'], unit)}, {own['kind']}: {verdict(own)})"
        out.append(f"<h3>{head}</h3>")
        out.append(f'<div class="plots">{tornado_plot(e, None if own is None else own["published"])}</div>')
        heads = "".join(f"<th>{escape(_factor_label(f))}</th><th>change</th>" for f in e["factors"])
        out.append(f'<table><tr><th class="l">parameter</th><th>as is</th>{heads}</tr>')
        for name, _ in tornado(e, metric):
            cells = ""
            for f in e["factors"]:
                r = next((r for r in e["runs"] if r["param"] == name and r["factor"] == f), None)
                value, change = (None, None) if r is None else (r["metrics"][metric], r["change"][metric])
                # A count (or a time at the clock's ps) rounds: say the factor it ran
                # at and the value it was set to, as the command's own table does.
                ran = (
                    ""
                    if r is None or r.get("ran_factor") in (None, f)
                    else f" (ran x{r['ran_factor']:.3g}: {escape(shown(r['value'], name))})"
                )
                cells += f"<td>{number(value, unit)}{ran}</td><td>{_pct(change)}</td>"
            original = escape(shown(e["base"]["values"][name], name))
            out.append(f'<tr><td class="l">{escape(name)}</td><td>{original}</td>{cells}</tr>')
        out.append("</table>")
    return out


# -- traces ------------------------------------------------------------------


def trace_section(traces: Sequence[dict[str, Any]]) -> list[str]:
    """Links to the Perfetto traces written beside the page."""
    rows = []
    for t in traces:
        size = f"{t['bytes'] / 1e6:.1f} MB" if t["bytes"] >= 1e5 else f"{t['bytes'] / 1e3:.0f} kB"
        rows.append(
            [
                escape(t["figure"]),
                f'<a href="{escape(quote(t["file"]))}">{escape(t["file"])}</a>',
                escape(t["run"]),
                size,
                f"{t['max_events']:,}",
            ]
        )
    return [
        "<h2>Perfetto traces</h2>",
        '<p class="note">A trace of one run of each figure (the file as is if it runs so, else the first run '
        "it makes: the run column says which), at most "
        "the number of events shown. Download one and open it in ui.perfetto.dev (&ldquo;Open trace "
        "file&rdquo;): nothing is uploaded, the UI reads the file in the browser.</p>",
        table(["figure", "trace", "run", "size", "events at most"], rows, left=(0, 1, 2)),
    ]


# -- the page ----------------------------------------------------------------


def render(
    rows: Sequence[dict[str, Any]],
    runs: Sequence[FigureRun],
    version: str,
    studies: Sequence[dict[str, Any]] = (),
    sensitivity: Sequence[dict[str, Any]] = (),
    traces: Sequence[dict[str, Any]] = (),
    scope: str | None = None,
) -> str:
    """The whole page as a string. `scope` says what part of the figures ran
    (`--only`, `--figures`), None for all the bundled ones."""
    from .reproduce import summary

    out = [
        "<h1>irqlab: published-figure reproductions</h1>",
        f'<p class="note">irqlab {escape(version)} &middot; {len(runs)} scenario run(s) &middot; '
        f"{escape(summary(rows))}</p>",
        '<p class="note">A <em>prediction</em> comes out of the mechanism with nothing tuned on it; '
        "a <em>fit</em> only shows that a parameter tuned on the figure (or an input copied from a "
        "published number) was tuned: it confirms nothing. Status: pass (within tolerance), miss (a "
        "prediction out of tolerance: a result), FAIL (a fit that no longer reproduces).</p>",
    ]
    if scope is not None:
        # A partial report read as the whole reproduction ("2 of 2 fits reproduced"; a review).
        out.insert(1, f"<p><strong>Part of the figures only:</strong> {escape(scope)}.</p>")
    if not rows:
        out.append(
            "<p><strong>No figures to reproduce:</strong> no figure scenario with "
            "<code>[[expect]]</code> entries was found.</p>"
        )
    else:
        out.append("<h2>Figures</h2>")
        out.append(figure_table(rows, {t["figure"]: (t["file"], t["run"]) for t in traces}))
        out.append('<h2>Published vs simulated</h2><div class="plots">')
        out.append(error_overview(rows))
        out.extend(figure_plot(r) for r in rows)
        out.append("</div>")
    out.extend(mechanism_section(runs))
    if studies:
        out.append(
            '<h2>Studies</h2><p class="note">Runs with no published figure: what the model says '
            "under each variant, with nothing to compare against.</p>"
        )
        out.extend(study_tables(studies, runs))
    if any(e["metric"] is not None for e in sensitivity):
        out.extend(sensitivity_section(sensitivity, rows))
    if traces:
        out.extend(trace_section(traces))
    series = [(stem, rs, series_plot(stem, rs)) for stem, rs in figure_runs(runs).items()]
    if any(p for *_, p in series):
        out.append(
            "<h2>Time series</h2>"
            '<p class="note">Each point is a rate or share over one sample interval (a hundredth of the '
            "measured window unless a scenario sets <code>stats.series_interval</code>); time counts from the "
            "run's start, so the axis begins where the warm-up ends.</p>"
        )
        for stem, rs, plot in series:
            if plot:
                # The plot's legend names each line by its overrides; here, each run in full.
                names = "; ".join(r.label for r in rs)
                out.append(f'<h3>{escape(stem)}</h3><p class="note">Runs: {escape(names)}.</p>')
                out.append(f'<div class="plots">{plot}</div>')
    return page("irqlab: published-figure reproductions", out)
