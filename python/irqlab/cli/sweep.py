"""`irqlab sweep`: a scenario over a grid of overrides, one Parquet row per point."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .._util import UserError, atomic_write, check_overrides, progress, read_scenario
from . import ForceOpt, ScenarioArg, SeedOpt, SetOpt, app, check_seed, check_workers, user_errors
from .render import fmt, out


@app.command()
@user_errors
def sweep(
    scenario: ScenarioArg,
    grid: Annotated[
        list[str] | None, typer.Option("--grid", help="KEY=V1,V2,... (repeatable; the cartesian product is run).")
    ] = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    backend: Annotated[str, typer.Option("--backend", help="local, dask or ray.")] = "local",
    workers: Annotated[int | None, typer.Option("--workers", help="Parallel runs (default: CPU count).")] = None,
    address: Annotated[str | None, typer.Option("--address", help="Dask scheduler or Ray cluster address.")] = None,
    out_file: Annotated[Path | None, typer.Option("--out", help="Write one Parquet row per grid point.")] = None,
    force: ForceOpt = False,
) -> None:
    """Run a scenario over a grid of overrides."""
    from .. import sweep as sweeps  # pyarrow: imported only by the command that needs it

    if backend not in sweeps.BACKENDS:
        raise UserError(f"--backend {backend!r}: unknown backend, expected one of {', '.join(sweeps.BACKENDS)}")
    check_workers(workers)
    axes = sweeps.parse_grid(grid)
    overrides = check_overrides(set_)
    text, origin = read_scenario(scenario)
    plan = sweeps.plan(text, origin, axes, overrides, check_seed(seed), force)
    n = len(plan.points)
    nworkers = workers or min(os.cpu_count() or 1, n)
    with progress(f"sweep ({n} points)", n) as advance:
        results = sweeps.execute(plan, backend, nworkers, address, advance)
    table = sweeps.to_table(plan, results)
    if out_file is not None:
        atomic_write(out_file, sweeps.parquet_bytes(table))

    keys = [k for k, _ in axes if k != "seed"]
    shown = [m for m in ("interrupts_per_s", "interrupts", "events") if m in table.column_names]
    t = Table(title=f"sweep of {origin}: {n} points" + (f" -> {out_file}" if out_file else ""), title_justify="left")
    for c in [*keys, "seed", *shown]:
        t.add_column(c, justify="left" if c in keys else "right")
    cols = {c: table.column(c).to_pylist() for c in [*keys, "seed", *shown]}
    for i in range(n):
        t.add_row(*(fmt(cols[c][i]) for c in cols))
    out.print(t)
