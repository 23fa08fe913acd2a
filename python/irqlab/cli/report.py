"""`irqlab report`: a sweep's results as one self-contained HTML page of plots and a table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from .._util import write_all
from . import app, output_dir, user_errors
from .render import err, out


@app.command()
@user_errors
def report(
    results: Annotated[
        Path,
        typer.Argument(
            help="A sweep's --out: its NAME.parquet or dataset directory (a running sweep's too).",
            show_default=False,
        ),
    ],
    out_dir: Annotated[Path, typer.Option("--out", help="Report directory (index.html).", callback=output_dir)] = Path(
        "irqlab-sweep-report"
    ),
    metric: Annotated[
        list[str] | None,
        typer.Option(
            "--metric",
            help="A column to plot (repeatable; default: the headline ones the results have: IOPS, goodput, "
            "interrupts_per_s, latency p99s).",
        ),
    ] = None,
) -> None:
    """Plot a sweep's results: one self-contained HTML page.

    Per metric, the metric against the grid's first key, a line per combination
    of the other keys; with replications (or a seed axis), the mean and its
    95 % confidence band. Then a table of the same numbers."""
    from .. import sweep_report  # pyarrow and matplotlib: imported only by the command that needs them
    from ..sweep_store import unfinished_note

    res = sweep_report.read(results)
    if (note := unfinished_note(results)) is not None:
        err.print(f"note: {note}", markup=False, soft_wrap=True)
    metrics = sweep_report.pick_metrics(res, metric)
    page = sweep_report.render(res, metrics)
    dest = out_dir / "index.html"
    write_all([(dest, page)])
    x = res.keys[0]
    out.print(f"{len(metrics)} plot(s) against {x} ({', '.join(metrics)}): {dest}", markup=False, soft_wrap=True)
