"""`irqlab reproduce`: every published-figure scenario, checked, as an HTML report."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.markup import escape
from rich.table import Table

from .. import SCENARIOS_DIR, _core
from .._util import progress, write_all
from ..provenance import commit
from ..reproduce import published_range
from ..reproduce import verdict as figure_verdict
from . import app, check_workers, output_dir, user_errors
from .render import dump, err, out


@app.command()
@user_errors
def reproduce(
    only: Annotated[list[str] | None, typer.Option("--only", help="Only this figure (file stem; repeatable).")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Report directory.", callback=output_dir)] = Path(
        "irqlab-report"
    ),
    figures: Annotated[
        Path | None, typer.Option("--figures", help="Directory of figure scenarios (default: the bundled ones).")
    ] = None,
    workers: Annotated[int | None, typer.Option("--workers", help="Figures run in parallel.")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 1 when a prediction misses, too.")] = False,
) -> None:
    """Run every published-figure scenario, check it, and write an HTML report.

    Exit 1 when a fit does not reproduce (a fitted value no longer gives its own
    figure: the model or its inputs broke). A prediction that misses is a result,
    shown as "miss" and counted; `--strict` makes it fail the run too."""
    from .. import report  # matplotlib: imported only by the command that plots
    from .. import reproduce as repro

    figdir = figures if figures is not None else SCENARIOS_DIR / "figures"
    check_workers(workers)
    # A missing bundled folder just means no figures yet; a folder the user named must exist.
    files = [] if figures is None and not figdir.is_dir() and not only else repro.figure_files(figdir, only)
    runs = repro.prepare(files)
    repro.probe(runs)
    plans = repro.sensitivity_plans(runs)
    # One pool and one bar for figures and the M5 sensitivity runs: the bar
    # counts every run, and sensitivity runs fill workers the figures leave idle.
    extra = repro.sensitivity_runs(plans, runs)
    # After the plans: their runs are copies of the figures' and must not inherit the mark.
    repro.trace_runs(runs)
    with progress("reproducing figures", len(runs) + len(extra)) as advance:
        repro.execute(runs + extra, workers or os.cpu_count() or 1, advance)
    rows = [row for r in runs for row in repro.check(r, runs)]
    studies = repro.studies(runs)
    sensitivity = repro.sensitivities(plans)
    traces: list[dict[str, Any]] = [
        {
            "figure": r.stem,
            "file": f"trace-{r.stem}.pftrace",
            "run": r.label,
            "bytes": len(r.trace),
            "max_events": repro.trace_limit(r),
            "data": r.trace,
        }
        for r in runs
        if r.trace is not None
    ]
    made_by = {"irqlab": _core.__version__, "commit": commit()}
    # The page names the commit too, as figures.json does: a report pasted alone says what made it.
    version = f"{_core.__version__} (commit {made_by['commit']})"
    parts = ([f"--figures {figdir}"] if figures is not None else []) + ([f"--only {', '.join(only)}"] if only else [])
    scope = "; ".join(parts) or None
    page = report.render(rows, runs, version, studies, sensitivity, traces, scope)
    earlier = _earlier_traces(out_dir / "figures.json")
    doc = dump(
        {
            # Each row's verdict as the page and the terminal give it, so a reader of
            # the JSON need not recompute it.
            "figures": [{**r, "status": repro.verdict(r)} for r in rows],
            "counts": repro.counts(rows),
            "studies": studies,
            "sensitivity": sensitivity,
            "traces": [t["file"] for t in traces],
            "provenance": {**made_by, "scope": scope},
        }
    )
    outputs: list[tuple[Path, bytes | str]] = [(out_dir / t["file"], t["data"]) for t in traces]
    write_all([*outputs, (out_dir / "figures.json", doc), (out_dir / "index.html", page)])
    # An earlier report's traces of figures this one does not have would sit
    # beside it, linked from nothing and read as this run's (a review). Only
    # those its figures.json lists: `--out .` took a user's own trace-foo.pftrace.
    ours = {t["file"] for t in traces}
    for name in earlier - ours:
        (out_dir / name).unlink(missing_ok=True)

    if not rows and not studies:
        err.print(
            f"warning: no figures to reproduce in {figdir} (no [[expect]] entries); wrote an empty report to {out_dir}",
            markup=False,
            soft_wrap=True,
        )
        return
    if rows:
        out.print(_table(rows, out_dir))
    if studies:
        n = sum(len(s["runs"]) for s in studies)
        out.print(f"{len(studies)} studies ({n} runs without expectations) in {out_dir / 'index.html'}", markup=False)
    if traces:
        out.print(f"{len(traces)} Perfetto traces (trace-FIGURE.pftrace beside it: open in ui.perfetto.dev)")
    if sensitivity:
        names = ", ".join(s["scenario"] for s in sensitivity)
        out.print(
            f"sensitivity of {names} ({len(extra)} runs): tornado plots in {out_dir / 'index.html'}", markup=False
        )
    out.print(repro.summary(rows), markup=False)
    if any(not r["within_tolerance"] and (strict or r["kind"] == "fit") for r in rows):
        raise typer.Exit(1)


def _earlier_traces(figures_json: Path) -> set[str]:
    """The trace files an earlier report in this directory wrote (its figures.json
    lists them), as bare names of the trace-*.pftrace form; none if there is no
    such report or it cannot be read."""
    try:
        listed = json.loads(figures_json.read_text()).get("traces", [])
    except (OSError, ValueError, AttributeError):
        return set()
    return {
        n
        for n in listed
        if isinstance(n, str) and n == Path(n).name and n.startswith("trace-") and n.endswith(".pftrace")
    }


def _table(rows: list[dict[str, Any]], out_dir: Path) -> Table:
    """The figures, verdict first, numbers in readable units (the simulated one
    in the published one's): it fits a piped console's 80 columns, and if a
    narrower one cuts the last columns the verdict, what a CI log needs, stays."""
    # Names and paths are the user's: `[fio]` in them is text, not rich markup (it
    # vanished, and `[/fio]` raised MarkupError after the report was written).
    t = Table(
        title=escape(f"figures ({out_dir / 'index.html'})"), title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False
    )
    name_width = min(14, max(len(r["name"]) for r in rows))
    for c in ("figure", "verdict", "error", "tol.", "kind", "published", "simulated"):
        t.add_column(
            c,
            justify="left" if c in ("figure", "kind", "verdict") else "right",
            # The simulated value may wrap its unit onto a second line: cut at 80
            # columns it read "29.76 m" for 29.76 ms (an audit).
            no_wrap=c not in ("figure", "kind", "simulated"),
            min_width=name_width if c == "figure" else None,
        )
    for r in rows:
        e = "n/a" if r["error"] is None else f"{r['error']:+.1%}"
        verdict = figure_verdict(r)
        verdict = f"[green]{verdict}[/green]" if r["within_tolerance"] else f"[red]{verdict}[/red]"
        # A ratio to another variant says so in its published value ("0.59 ratio").
        kind = "pred" if r["kind"] == "prediction" else r["kind"]
        # A figure relative to another variant is a ratio, whatever its metric's unit.
        scale, unit = (1.0, "ratio") if r["relative_to"] is not None else _readable(r["published"], r["unit"])
        # The unit goes last: a console too narrow for it cuts the unit, not a number.
        simulated = "n/a" if r["simulated"] is None else f"{_figures4(r['simulated'] / scale)} {unit}".rstrip()
        tol = f"±{r['tolerance']:.0%}" if round(r["tolerance"] * 100, 6).is_integer() else f"±{r['tolerance']:.1%}"
        published = _figures4(r["published"] / scale)
        if (rng := published_range(r)) is not None:
            # A published range or bound, as the page shows it; no error against its middle.
            lo, hi = (_figures4(v / scale) for v in rng)
            published = f"≤ {hi}" if rng[0] <= 0 else f"{lo}\u2013{hi}"
            e = e if r["simulated"] is None else "in range" if r["within_tolerance"] else "out"
        t.add_row(escape(r["name"]), verdict, e, tol, kind, published, escape(simulated))
    return t


def _figures4(v: float) -> str:
    """Four significant figures, never in e-notation: 14,755, 3.864, 0.59."""
    return f"{v:,.0f}" if abs(v) >= 1e4 else f"{v:,.4g}"


def _readable(published: float, unit: str) -> tuple[float, str]:
    """A scale and unit for a figure's numbers that a person reads at a glance:
    17,000,000 ns as 17 ms, 5,330,000 IOPS as 5.33 M IOPS."""
    a = abs(published)
    if unit == "ns":
        for scale, name in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
            if a >= scale:
                return scale, name
    elif unit and a >= 1e6:
        return 1e6, f"M {unit}"
    return 1.0, unit
