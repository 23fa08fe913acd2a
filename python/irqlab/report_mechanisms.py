"""The plots a reviewer of each mechanism asks for, drawn from the runs
`irqlab reproduce` makes anyway (no run of their own): M1's pseudo-NMI tax
against exception density, M4's cancelled VM-enters by cause, M5's GSIM
against its target interrupt rate. Each finds its runs by what they override
and what they produce, not by file name, and draws nothing when they are not
there."""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape
from typing import Any

from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, PercentFormatter

from .cli.summary import human_time, measured_ns, unit_of
from .plotting import COLORS, axis_in, img, number, table, value_text
from .reproduce import FigureRun


def figure_runs(runs: Sequence[FigureRun]) -> dict[str, list[FigureRun]]:
    """The runs of figures (not of study variants) that ran, per figure file."""
    out: dict[str, list[FigureRun]] = {}
    for r in runs:
        if r.variant is None and r.result is not None:
            out.setdefault(r.stem, []).append(r)
    return out


def _metric(r: FigureRun, name: str) -> float | None:
    v = (r.result or {}).get("metrics", {}).get(name)
    return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None


def _base(runs: Sequence[FigureRun]) -> FigureRun | None:
    return next((r for r in runs if not r.overrides), None)


def masking_tax(runs: Sequence[FigureRun]) -> list[dict[str, Any]]:
    """M1: per figure that runs its loop under DAIF (the file as is) and under
    pseudo-NMI (`cpu.masking=pmr`): the exception density (exceptions/s under
    DAIF: one per loop pass), the throughput lost, the extra ns per pass, and
    the published pair's loss where its expectations give both."""
    out = []
    for stem, rs in figure_runs(runs).items():
        daif = _base(rs)
        pmr = next((r for r in rs if r.overrides == ["cpu.masking=pmr"]), None)
        if daif is None or pmr is None or daif.scenario.get("cpu", {}).get("masking") != "daif":
            continue
        d, p = _metric(daif, "ops_per_s"), _metric(pmr, "ops_per_s")
        if not d or p is None:
            continue
        taxes = [v for k, v in pmr.result["metrics"].items() if k.endswith(".pmr_tax_ns_per_op")] if pmr.result else []
        entry: dict[str, Any] = {"figure": stem, "density": d, "loss": 1 - p / d, "tax_ns": max(taxes, default=None)}
        exp_d = daif.expects[0] if daif.expects else None
        exp_p = next((e for e in pmr.expects if exp_d is not None and e["metric"] == exp_d["metric"]), None)
        if exp_d is not None and exp_p is not None and exp_d["published"] and exp_p["published"]:
            a, b = float(exp_d["published"]), float(exp_p["published"])
            if exp_d["metric"].endswith("ns_per_op"):  # time per pass: the density is its inverse
                entry["published"] = (1e9 / a, 1 - a / b)
            elif exp_d["metric"].endswith("ops_per_s"):
                entry["published"] = (a, 1 - b / a)
        out.append(entry)
    return out


def masking_tax_plot(points: Sequence[dict[str, Any]]) -> str:
    fig = Figure(figsize=(6.8, 3.6))
    ax = fig.add_subplot()
    lo = min(1e4, *(p["density"] / 10 for p in points))
    hi = max(2e7, *(p["density"] * 2 for p in points))
    xs = [lo * (hi / lo) ** (i / 60) for i in range(61)]
    for i, p in enumerate(points):
        c = COLORS[i % len(COLORS)]
        if p["tax_ns"]:
            tau = p["tax_ns"] * 1e-9
            ax.plot(xs, [tau * x / (1 + tau * x) for x in xs], "--", color=c, linewidth=1, alpha=0.7)
        label = f"{p['figure']}" + (f" (+{value_text(p['tax_ns'], 'ns')}/pass)" if p["tax_ns"] else "")
        ax.plot([p["density"]], [p["loss"]], "o", color=c, label=f"{label}: simulated")
        if "published" in p:
            ax.plot([p["published"][0]], [p["published"][1]], "x", color=c, markersize=9, mew=2, label="published")
    ax.set_xscale("log")
    ax.xaxis.set_major_formatter(EngFormatter(unit="/s"))
    ax.yaxis.set_major_formatter(PercentFormatter(1.0))
    ax.set_xlabel("exception density under DAIF (exceptions per second of the task)")
    ax.set_ylabel("throughput lost to pseudo-NMI")
    ax.set_title("M1: the pseudo-NMI tax against exception density", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    return img(fig, "M1: pseudo-NMI tax against exception density")


def cancel_causes(runs: Sequence[FigureRun]) -> list[dict[str, Any]]:
    """M4: per figure run with a `cancel_causes` table, its request order and the
    cancelled VM-enters per second by cause."""
    out = []
    for stem, rs in figure_runs(runs).items():
        for r in rs:
            t = (r.result or {}).get("tables", {}).get("cancel_causes")
            if not t or not t.get("rows"):
                continue
            cols = t["columns"]
            order = next((o.split("=", 1)[1] for o in r.overrides if o.startswith("kvm.order=")), None)
            if order is None:
                kvm_order = r.scenario.get("kvm", {}).get("order", "?")
                order = kvm_order if isinstance(kvm_order, str) else " > ".join(map(str, kvm_order))
            causes = []
            for row in t["rows"]:
                v = dict(zip(cols, row))
                what = "raised by servicing" if v["kind"] == "raised_by" else "from a source:"
                causes.append((f"{v['request']} {what} {v['cause']}", float(v["cancels_per_s"])))
            out.append({"figure": stem, "order": order.strip('"'), "label": r.label, "causes": causes})
    return out


def cancel_causes_plot(entries: Sequence[dict[str, Any]]) -> str:
    fig = Figure(figsize=(7.0, 0.6 * len(entries) + 1.8))
    ax = fig.add_subplot()
    names = list(dict.fromkeys(c for e in entries for c, _ in e["causes"]))
    ys = list(range(len(entries)))[::-1]
    left = [0.0] * len(entries)
    for i, name in enumerate(names):
        widths = [dict(e["causes"]).get(name, 0.0) for e in entries]
        ax.barh(ys, widths, left=left, height=0.6, color=COLORS[i % len(COLORS)], label=name)
        left = [a + b for a, b in zip(left, widths)]
    for y, total in zip(ys, left):
        ax.annotate(f" {value_text(total, '/s')}", (total, y), va="center", fontsize=8)
    ax.set_yticks(ys, [f"{e['figure']}\norder {e['order']}" for e in entries], fontsize=8)
    ax.xaxis.set_major_formatter(EngFormatter(unit="/s"))
    ax.set_xlim(0, max(left) * 1.25 if max(left) > 0 else 1)
    ax.set_xlabel("cancelled VM-enters per second (all vCPUs)")
    ax.set_title("M4: cancelled VM-enters by cause", fontsize=10)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    return img(fig, "M4: cancelled VM-enters by cause, per request order")


_TARGET = "gsim.target_intr_rate="


def gsim_targets(runs: Sequence[FigureRun]) -> list[dict[str, Any]]:
    """M5: per figure, its runs that differ only in GSIM's target interrupt rate
    (the largest such family, at least two targets), with the metric their
    expectations are about, the published values, and the run without GSIM."""
    from . import _core

    out = []
    for stem, rs in figure_runs(runs).items():
        fams: dict[tuple[str, ...], list[tuple[float, FigureRun]]] = {}
        for r in rs:
            t = [o for o in r.overrides if o.startswith(_TARGET)]
            if len(t) != 1:
                continue
            try:
                rate = _core.parse_rate(t[0][len(_TARGET) :])
            except (ValueError, _core.ScenarioError):
                continue
            fams.setdefault(tuple(o for o in r.overrides if o != t[0]), []).append((rate, r))
        if not fams:
            continue
        largest: list[tuple[float, FigureRun]] = max(fams.values(), key=len)
        fam = sorted(largest, key=lambda p: p[0])
        if len(fam) < 2:
            continue
        metrics = [e["metric"] for _, r in fam for e in r.expects]
        if not metrics:
            continue
        metric = max(dict.fromkeys(metrics), key=metrics.count)
        pts = []
        for rate, r in fam:
            res = r.result or {}
            exp = next((e for e in r.expects if e["metric"] == metric), None)
            pts.append(
                {
                    "target": rate,
                    "value": _metric(r, metric),
                    "published": None if exp is None else float(exp["published"]),
                    "kind": None if exp is None else exp["kind"],
                    "interrupts": _metric(r, "interrupts_per_s"),
                    "device": {
                        k[len("source.") : -len(".interrupts_per_s")]: float(v)
                        for k, v in res.get("metrics", {}).items()
                        if k.startswith("source.") and k.endswith(".interrupts_per_s")
                    },
                    "p99": _p99_of(res, metric),
                }
            )
        base = _base(rs)
        out.append(
            {
                "figure": stem,
                "metric": metric,
                "fixed": [o for o in fam[0][1].overrides if not o.startswith(_TARGET)],
                "points": pts,
                "base": _metric(base, metric) if base is not None else None,
                "base_p99": _p99_of(base.result or {}, metric) if base is not None else None,
                # The p99s are read in these windows, which a figure may keep
                # shorter than its tails take to settle (its p99 rows run longer).
                "window_ns": measured_ns(fam[0][1].scenario),
                "base_window_ns": measured_ns(base.scenario) if base is not None else None,
            }
        )
    return out


def _p99_of(result: dict[str, Any], metric: str) -> float | None:
    """The p99 of the latency histogram of the device a throughput metric is
    about (`nvme.ssd.iops` -> `nvme.ssd.latency`), if the run has one."""
    prefix = metric.rsplit(".", 1)[0]
    for name, h in result.get("histograms", {}).items():
        if name.startswith(prefix + ".") and name.endswith(("latency", "clat")) and h.get("count"):
            return float(h["p99"]) if isinstance(h.get("p99"), (int, float)) else None
    return None


def gsim_target_plot(entry: dict[str, Any]) -> str:
    pts = entry["points"]
    xs = [p["target"] for p in pts]
    unit = unit_of(entry["metric"])
    has_p99 = any(p["p99"] is not None for p in pts)
    fig = Figure(figsize=(11.0 if has_p99 else 8.0, 3.4))
    axes = fig.subplots(1, 3 if has_p99 else 2)
    ax = axes[0]
    ax.plot(xs, [p["value"] for p in pts], "o-", color=COLORS[0], label="simulated")
    # A published value the run was fitted on confirms nothing: drawn apart from a prediction.
    for kind, marker, label in (("prediction", "x", "published (prediction)"), ("fit", "+", "published (a fit)")):
        pub = [(x, p["published"]) for x, p in zip(xs, pts) if p["published"] is not None and p.get("kind") == kind]
        if pub:
            ax.plot([a for a, _ in pub], [b for _, b in pub], marker, color="#000", markersize=9, mew=2, label=label)
    if entry["base"] is not None:
        ax.axhline(entry["base"], color="#888", linestyle="--", linewidth=1, label="without GSIM")
    axis_in(ax, unit)
    ax.set_ylim(bottom=0)
    ax.set_ylabel(f"{entry['metric']} ({unit})" if unit else entry["metric"])
    ax.set_title("throughput", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[1]
    ax.plot(xs, xs, ":", color="#888", label="the target")
    ax.plot(xs, [p["interrupts"] for p in pts], "o-", color=COLORS[1], label="all (devices, GSIM's timer)")
    for i, dev in enumerate(sorted({d for p in pts for d in p["device"]})):
        ys = [p["device"].get(dev) for p in pts]
        # GSIM's target counts device interrupts; its own hrtimer interrupts are not MSIs.
        label = "GSIM's own hrtimer interrupts" if dev == "gsim" else f"device {dev} (what the target bounds)"
        ax.plot(xs, ys, "s-", color=COLORS[(i + 2) % len(COLORS)], label=label)
    ax.yaxis.set_major_formatter(EngFormatter(unit="/s"))
    ax.set_ylabel("interrupts per second")
    ax.set_title("interrupt rate", fontsize=9)
    ax.legend(fontsize=7)
    if has_p99:
        ax = axes[2]
        window = human_time(entry["window_ns"], trim=True)
        ax.plot(xs, [None if p["p99"] is None else p["p99"] * 1e-9 for p in pts], "o-", color=COLORS[4], label="p99")
        if entry["base_p99"] is not None:
            base_window = human_time(entry["base_window_ns"], trim=True)
            label = f"without GSIM ({base_window} window)"
            ax.axhline(entry["base_p99"] * 1e-9, color="#888", linestyle="--", linewidth=1, label=label)
        ax.yaxis.set_major_formatter(EngFormatter(unit="s"))
        ax.set_ylim(bottom=0)
        ax.set_ylabel("completion latency, p99")
        ax.set_title(f"latency, p99 in a {window} window (see note)", fontsize=9)
        ax.legend(fontsize=7)
    for a in axes:
        a.xaxis.set_major_formatter(EngFormatter(unit="/s"))
        a.set_xlabel("GSIM target interrupt rate")
        a.grid(True, alpha=0.3)
    fig.suptitle(f"M5 {entry['figure']}: GSIM against its target rate ({', '.join(entry['fixed'])})", fontsize=10)
    fig.tight_layout()
    return img(fig, f"{entry['figure']}: GSIM against its target interrupt rate")


def relative_tails(runs: Sequence[FigureRun]) -> list[dict[str, Any]]:
    """For each figure that is a ratio of two runs (`relative_to`), both runs'
    latency percentiles: a ratio alone hides whether either tail is plausible."""
    out = []
    for r in runs:
        for exp in r.expects:
            other_sets = exp.get("relative_to")
            if other_sets is None or r.result is None:
                continue
            other = next((o for o in runs if o.stem == r.stem and o.overrides == list(other_sets)), None)
            # The histogram the statistic is read from ("vblk.clat" of "vblk.clat.p99.9").
            hist = next((h for h in r.result.get("histograms", {}) if exp["metric"].startswith(h + ".")), None)
            if other is None or other.result is None or hist is None:
                continue
            out.append(
                {
                    "figure": exp.get("name") or r.stem,
                    "histogram": hist,
                    "runs": [
                        (", ".join(other.overrides), other.result["histograms"][hist]),
                        (", ".join(r.overrides), r.result["histograms"][hist]),
                    ],
                }
            )
    return out


def mechanism_section(runs: Sequence[FigureRun]) -> list[str]:
    """The plots a reviewer of each mechanism asks for, from the figures' own runs."""
    out: list[str] = []
    tax = masking_tax(runs)
    if tax:
        out.append("<h3>M1: pseudo-NMI's tax against exception density</h3>")
        out.append(
            '<p class="note">Each point is a figure run twice, under DAIF and under pseudo-NMI; the density is its '
            "exceptions per second under DAIF (one per loop pass). Dashed: the same extra time per exception "
            "(&tau;, the run's <code>pmr_tax_ns_per_op</code>) at other densities, &tau;&middot;d / (1 + "
            "&tau;&middot;d): an extrapolation, not a run.</p>"
        )
        out.append(f'<div class="plots">{masking_tax_plot(tax)}</div>')
        rows = []
        for p in tax:
            pub = p.get("published")
            rows.append(
                [
                    escape(p["figure"]),
                    number(p["density"], "/s"),
                    number(p["tax_ns"], "ns"),
                    f"{p['loss']:.1%}",
                    "n/a" if pub is None else f"{pub[1]:.1%}",
                ]
            )
        out.append(table(["figure", "exceptions (DAIF)", "extra per pass", "lost, simulated", "lost, published"], rows))
    for t in relative_tails(runs):
        out.append(f"<h3>{escape(t['figure'])}: both runs' tails</h3>")
        out.append(
            '<p class="note">The figure is the ratio of one percentile of these two runs; here is each run\'s '
            f"<code>{escape(t['histogram'])}</code> in full.</p>"
        )
        stats = ("count", "mean", "p50", "p90", "p99", "p99.9", "p99.99")
        rows = [
            [f"<code>{escape(name)}</code>"]
            + [number(h.get(k), "" if k == "count" else str(h.get("unit", "ns"))) for k in stats]
            for name, h in t["runs"]
        ]
        out.append(table(["run", *stats], rows, left=(0,)))
    causes = cancel_causes(runs)
    if causes:
        out.append("<h3>M4: cancelled VM-enters by cause</h3>")
        orders = sorted({e["order"] for e in causes})
        out.append(
            '<p class="note">From the figure runs\' <code>cancel_causes</code> tables: which request '
            "raised after its check in the request list cancels the VM-enter, and why. Request order(s) run "
            f"by the figures: {escape(', '.join(orders))}.</p>"
        )
        out.append(f'<div class="plots">{cancel_causes_plot(causes)}</div>')
        rows = [
            [escape(e["figure"]), escape(e["order"]), escape(c), number(v, "/s")]
            for e in causes
            for c, v in e["causes"]
        ]
        out.append(table(["figure", "order", "cause", "cancels"], rows, left=(0, 1, 2)))
    for g in gsim_targets(runs):
        out.append(f"<h3>M5 {escape(g['figure'])}: GSIM against its target interrupt rate</h3>")
        out.append(
            '<p class="note">The figure\'s runs that differ only in <code>gsim.target_intr_rate</code>: '
            "throughput (crosses: the published values), interrupts per second (all, and per interrupt source; "
            "dotted: the target itself) and the p99 completion latency. Dashed: the file as is, without GSIM. "
            f"The p99s are read in each run's measured window ({human_time(g['window_ns'], trim=True)}): "
            "a figure keeps it as short as its throughput needs, and a tail may take longer to settle "
            "(the figure's own p99 rows, in the Figures table, run longer for that), so compare them "
            "with each other, not with the published p99s.</p>"
        )
        out.append(f'<div class="plots">{gsim_target_plot(g)}</div>')
        unit = unit_of(g["metric"])
        rows = [
            [
                number(p["target"], "/s"),
                number(p["value"], unit),
                number(p["published"], unit),
                number(p["interrupts"], "/s"),
                number(p["p99"], "ns"),
            ]
            for p in g["points"]
        ]
        out.append(
            table(
                [
                    "target",
                    escape(g["metric"]),
                    "published",
                    "interrupts (devices and GSIM's timer)",
                    f"p99 latency ({human_time(g['window_ns'], trim=True)} window)",
                ],
                rows,
            )
        )
    if not out:
        return []
    return ["<h2>Mechanisms</h2>", *out]
