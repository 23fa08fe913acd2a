"""The self-contained HTML report of `irqlab reproduce`: a table of figures and
matplotlib plots embedded as base64 PNG, so the page can be mailed or archived
as one file."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence
from html import escape
from typing import Any

# The object-oriented API with no pyplot: no GUI backend, no global state,
# so this is safe in CI and from threads.
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, MaxNLocator

from .reproduce import FigureRun, verdict
from .sensitivity import tornado

MAX_SERIES_PER_RUN = 12  # a page of 50 plots helps nobody; the JSON has the rest

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th { background: #f0f0f0; }
td.l, th.l { text-align: left; }
tr.fail td { background: #fde8e8; }
tr.pass td.v { color: #1a7f37; font-weight: bold; }
tr.fail td.v { color: #c62828; font-weight: bold; }
.plots img { max-width: 100%; margin: 0.5em 0; border: 1px solid #eee; }
.note { color: #666; }
"""


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    # Fixed metadata keeps the PNG bytes (and so the page) reproducible.
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _img(fig: Figure, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{_png(fig)}">'


def _fmt(x: Any) -> str:
    if x is None:
        return "n/a"
    if isinstance(x, float):
        return f"{x:,.6g}"
    return escape(str(x))


def figure_plot(row: dict[str, Any]) -> str:
    """Published vs simulated for one figure, the tolerance band shaded."""
    fig = Figure(figsize=(5.0, 1.5))
    ax = fig.add_subplot()
    pub, sim, tol = row["published"], row["simulated"], row["tolerance"]
    band = tol * abs(pub) if pub != 0 else tol
    ax.axvspan(pub - band, pub + band, color="#cde4f7", label="tolerance")
    ax.barh([1], [pub], color="#1f77b4", height=0.6, label="published")
    if sim is not None:
        ax.barh([0], [sim], color="#2ca02c" if row["within_tolerance"] else "#d62728", height=0.6, label="simulated")
    ax.set_yticks([0, 1], ["simulated", "published"])
    ax.set_xlabel(row["unit"] or "value")
    ax.xaxis.set_major_formatter(EngFormatter())
    ax.xaxis.set_major_locator(MaxNLocator(6))
    ax.set_title(row["name"], fontsize=9)
    return _img(fig, f"{row['name']}: published vs simulated")


def error_overview(rows: Sequence[dict[str, Any]]) -> str:
    """Every figure's error against its tolerance on one chart."""
    fig = Figure(figsize=(7.0, 0.35 * len(rows) + 1.2))
    ax = fig.add_subplot()
    ys = list(range(len(rows)))[::-1]
    for y, r in zip(ys, rows):
        ax.plot([-r["tolerance"], r["tolerance"]], [y, y], color="#9ecae1", linewidth=6, solid_capstyle="butt")
        if r["error"] is not None:
            ax.plot([r["error"]], [y], "o", color="#2ca02c" if r["within_tolerance"] else "#d62728")
    ax.axvline(0, color="#888", linewidth=0.8)
    ax.set_ylim(-0.7, len(rows) - 0.3)
    ax.set_yticks(ys, [r["name"] for r in rows], fontsize=8)
    ax.set_xlabel("error (relative to published; band = tolerance)")
    return _img(fig, "errors of all figures against their tolerance")


def series_plots(run: FigureRun) -> list[str]:
    series = (run.result or {}).get("series", {})
    imgs = []
    for name in sorted(series)[:MAX_SERIES_PER_RUN]:
        s = series[name]
        t, v = s.get("t", []), s.get("v", [])
        if not t or len(t) != len(v):
            continue
        fig = Figure(figsize=(7.0, 2.2))
        ax = fig.add_subplot()
        ax.plot(t, v, linewidth=1.0)
        ax.set_xlabel("simulated time")
        ax.xaxis.set_major_formatter(EngFormatter(unit="s"))
        finite = [abs(x) for x in v if isinstance(x, (int, float)) and math.isfinite(x)]
        if finite and max(finite) >= 1e4:  # rates read better as 200 k; shares stay plain
            ax.yaxis.set_major_formatter(EngFormatter())
        ax.set_title(f"{run.label}: {name}", fontsize=9)
        ax.grid(True, alpha=0.3)
        imgs.append(_img(fig, f"{run.label} series {name}"))
    return imgs


def _kind(r: dict[str, Any]) -> str:
    k = str(r["kind"])
    if r.get("fitted"):
        k += ": " + ", ".join(r["fitted"])
    if r.get("relative_to") is not None:
        k += " (ratio to [" + ", ".join(r["relative_to"]) + "])"
    return k


def study_plot(st: dict[str, Any]) -> str:
    """A study's `y` against `x`, one line per group of runs (its `[variants.plot]`)."""
    pl = st["plot"]
    fig = Figure(figsize=(6.4, 3.8))
    ax = fig.add_subplot()
    groups: dict[str, list[tuple[float, float]]] = {}
    for r in st["runs"]:
        x, y = r["values"][pl["x"]], r["values"][pl["y"]]
        if x is not None and y is not None:
            groups.setdefault(r.get("group") or r["name"], []).append((x, y))
    # Single runs (a lone per-CPU or switch-rate point) are in the table; lines need two points.
    for g, pts in groups.items():
        if len(pts) < 2:
            continue
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=g)
    if pl.get("log_x"):
        ax.set_xscale("log")
    if pl.get("log_y"):
        ax.set_yscale("log")
    ax.set_xlabel(pl["x"])
    ax.set_ylabel(pl["y"])
    ax.set_title(st["scenario"])
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    return _img(fig, f"{st['scenario']}: {pl['y']} against {pl['x']}")


def study_tables(studies: Sequence[dict[str, Any]]) -> list[str]:
    """One table per study: its variants down, its metrics across (and its plot, if it has one)."""
    out = []
    for st in studies:
        out.append(f"<h3>{escape(st['scenario'])}</h3>")
        if st.get("plot"):
            out.append(f'<div class="plots">{study_plot(st)}</div>')
        out.append('<table><tr><th class="l">variant</th>')
        out.append("".join(f"<th>{escape(m)}</th>" for m in st["metrics"]) + '<th class="l">overrides</th></tr>')
        for r in st["runs"]:
            cells = "".join(f"<td>{_fmt(r['values'][m])}</td>" for m in st["metrics"])
            sets = escape(", ".join(r["overrides"]))
            out.append(f'<tr><td class="l">{escape(r["name"])}</td>{cells}<td class="l">{sets}</td></tr>')
        out.append("</table>")
    return out


def _factor_label(f: float) -> str:
    return f"x {f:g}"


def tornado_plot(entry: dict[str, Any]) -> str:
    """A figure's metric's relative change with each parameter scaled by each
    factor: a row per parameter, the one that moves it most on top, a bar per
    factor side by side (both may push the same way)."""
    metric = entry["metric"]
    params = tornado(entry, metric)
    factors = entry["factors"]
    fig = Figure(figsize=(6.4, 0.55 * len(params) + 1.3))
    ax = fig.add_subplot()
    ys = list(range(len(params)))[::-1]
    height = 0.8 / max(1, len(factors))
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd"]
    for i, f in enumerate(factors):
        offset = (i - (len(factors) - 1) / 2) * height
        # A missing change (a zero base) is drawn as no bar; the table says n/a.
        widths = [100 * (changes.get(f) or 0.0) for _, changes in params]
        ax.barh([y - offset for y in ys], widths, height=height, color=colors[i % len(colors)], label=_factor_label(f))
    ax.axvline(0, color="#888", linewidth=0.8)
    ax.set_yticks(ys, [name for name, _ in params], fontsize=8)
    ax.set_xlabel(f"change of {metric} against the file as is (%)")
    ax.set_title(f"{entry['scenario']}: sensitivity of {metric}", fontsize=9)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=7, title="parameter scaled", title_fontsize=7)
    return _img(fig, f"{entry['scenario']}: tornado of {metric}")


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.1%}"


def _amount(x: float | None) -> str:
    # 5,328,733 IOPS reads at a glance where 5.32873e+06 does not.
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:#,.4g}"


def sensitivity_section(entries: Sequence[dict[str, Any]]) -> list[str]:
    """Per M5 figure: its tornado plot and the numbers behind it."""
    out = [
        "<h2>Sensitivity</h2>",
        '<p class="note">How each M5 figure\'s headline metric moves when one parameter is scaled '
        "(the others as in the file, no expectation's <code>set</code> applied): which inputs the "
        "figure rests on.</p>",
    ]
    for e in entries:
        if e["metric"] is None:
            continue
        metric = e["metric"]
        base = e["base"]["metrics"][metric]
        out.append(f"<h3>{escape(e['scenario'])}: {escape(metric)} = {_amount(base)} as is</h3>")
        out.append(f'<div class="plots">{tornado_plot(e)}</div>')
        heads = "".join(f"<th>{escape(_factor_label(f))}</th><th>change</th>" for f in e["factors"])
        out.append(f'<table><tr><th class="l">parameter</th><th>as is</th>{heads}</tr>')
        for name, _ in tornado(e, metric):
            cells = ""
            for f in e["factors"]:
                r = next((r for r in e["runs"] if r["param"] == name and r["factor"] == f), None)
                value, change = (None, None) if r is None else (r["metrics"][metric], r["change"][metric])
                cells += f"<td>{_amount(value)}</td><td>{_pct(change)}</td>"
            original = escape(str(e["base"]["values"][name]))
            out.append(f'<tr><td class="l">{escape(name)}</td><td>{original}</td>{cells}</tr>')
        out.append("</table>")
    return out


def render(
    rows: Sequence[dict[str, Any]],
    runs: Sequence[FigureRun],
    version: str,
    studies: Sequence[dict[str, Any]] = (),
    sensitivity: Sequence[dict[str, Any]] = (),
) -> str:
    """The whole page as a string."""
    from .reproduce import summary

    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>irqlab: published-figure reproductions</title>",
        f"<style>{CSS}</style></head><body>",
        "<h1>irqlab: published-figure reproductions</h1>",
        f'<p class="note">irqlab {escape(version)} &middot; {len(runs)} scenario(s) &middot; '
        f"{escape(summary(rows))}</p>",
        '<p class="note">A <em>prediction</em> comes out of the mechanism with nothing tuned on it; '
        "a <em>fit</em> only shows that a parameter tuned on the figure (or an input copied from a "
        "published number) was tuned: it confirms nothing.</p>",
    ]
    if not rows:
        out.append(
            "<p><strong>No figures to reproduce:</strong> no figure scenario with "
            "<code>[[expect]]</code> entries was found.</p>"
        )
    else:
        out.append("<h2>Figures</h2><table><tr>")
        heads = [
            "figure",
            "kind",
            "scenario",
            "metric",
            "published",
            "simulated",
            "unit",
            "error",
            "tolerance",
            "verdict",
            "source",
        ]
        out.append(
            "".join(
                f'<th class="l">{h}</th>'
                if h in ("figure", "kind", "scenario", "metric", "source")
                else f"<th>{h}</th>"
                for h in heads
            )
            + "</tr>"
        )
        for r in rows:
            ok = r["within_tolerance"]
            err = "n/a" if r["error"] is None else f"{r['error']:+.2%}"
            out.append(
                f'<tr class="{"pass" if ok else "fail"}">'
                f'<td class="l">{escape(r["name"])}</td><td class="l">{escape(_kind(r))}</td>'
                f'<td class="l">{escape(r["scenario"])}</td>'
                f'<td class="l">{escape(r["metric"])}</td>'
                f"<td>{_fmt(r['published'])}</td><td>{_fmt(r['simulated'])}</td><td>{escape(r['unit'])}</td>"
                f"<td>{err}</td><td>&plusmn;{r['tolerance']:.2%}</td>"
                f'<td class="v">{verdict(r)}</td><td class="l">{escape(r["source"])}</td></tr>'
            )
        out.append("</table>")
        out.append('<h2>Published vs simulated</h2><div class="plots">')
        out.append(error_overview(rows))
        out.extend(figure_plot(r) for r in rows)
        out.append("</div>")
    if studies:
        out.append(
            '<h2>Studies</h2><p class="note">Runs with no published figure: what the model says '
            "under each variant, with nothing to compare against.</p>"
        )
        out.extend(study_tables(studies))
    if any(e["metric"] is not None for e in sensitivity):
        out.extend(sensitivity_section(sensitivity))
    with_series = [(r, series_plots(r)) for r in runs if r.variant is None]
    with_series = [(r, imgs) for r, imgs in with_series if imgs]
    if with_series:
        out.append("<h2>Time series</h2>")
        for run, imgs in with_series:
            out.append(f'<h3>{escape(run.label)}</h3><div class="plots">')
            out.extend(imgs)
            out.append("</div>")
    out.append("</body></html>\n")
    return "\n".join(out)
