"""`irqlab sweep`: a scenario over a grid of overrides, one Parquet row per run,
written as runs end so that a killed sweep resumes (`--resume`)."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from .._util import UserError, check_overrides, progress, read_scenario, signals_deferred
from . import (
    ForceOpt,
    ScenarioArg,
    SeedOpt,
    SetOpt,
    Terminated,
    app,
    check_seed,
    check_workers,
    output_any,
    summary,
    user_errors,
)
from .render import err, fmt, out

if TYPE_CHECKING:
    import pyarrow as pa

    from ..sweep import Point, Sweep

#: The metrics the summary table shows, when the results have them.
#: What the table shows when the results have none of the headline metrics.
FALLBACK = ("interrupts_per_s", "interrupts")


@app.command()
@user_errors
def sweep(
    scenario: ScenarioArg,
    grid: Annotated[
        list[str] | None, typer.Option("--grid", help="KEY=V1,V2,... (repeatable; the cartesian product is run).")
    ] = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    replications: Annotated[
        int,
        typer.Option(
            "--replications",
            help="Runs per grid point, seeded from (seed, replication) only: every grid value sees the same arrivals.",
        ),
    ] = 1,
    backend: Annotated[str, typer.Option("--backend", help="local, dask or ray.")] = "local",
    workers: Annotated[int | None, typer.Option("--workers", help="Parallel runs (default: CPU count).")] = None,
    address: Annotated[str | None, typer.Option("--address", help="Dask scheduler or Ray cluster address.")] = None,
    out_file: Annotated[
        Path | None,
        typer.Option(
            "--out",
            help="A directory: a Parquet dataset written as runs end. NAME.parquet: one file, merged at the end.",
            callback=output_any,
        ),
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue the sweep in --out: run only the points it does not have.")
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress output.")] = False,
    force: ForceOpt = False,
) -> None:
    """Run a scenario over a grid of overrides."""
    from .. import sweep as sweeps  # pyarrow: imported only by the command that needs it
    from ..sweep_store import Store

    if backend not in sweeps.BACKENDS:
        raise UserError(f"--backend {backend!r}: unknown backend, expected one of {', '.join(sweeps.BACKENDS)}")
    if address is not None and backend == "local":
        raise UserError(f"--address {address}: applies to --backend dask or ray, not local")
    check_workers(workers)
    axes = sweeps.parse_grid(grid)
    overrides = check_overrides(set_)
    text, origin = read_scenario(scenario)
    plan = sweeps.plan(text, origin, axes, overrides, check_seed(seed), force, replications)
    if plan.short:
        # As `run` warns for one run: before the sweep, once, naming the first.
        npoints = len(plan.points) // plan.replications
        many = f"{len(plan.short)} of {npoints} grid points may not settle; the first: " if npoints > 1 else ""
        warn = f"warning: {many}{plan.short[0]}: its runs may not settle; lengthen duration"
        err.print(warn, markup=False, soft_wrap=True)
    store = Store(plan, out_file, resume)
    if store.nothing_to_resume:
        note = f"note: --resume: nothing to resume at {out_file}; running the whole sweep"
        err.print(note, markup=False, soft_wrap=True)
    try:
        todo = [p for p in plan.points if p.key not in store.done]
        failed: list[tuple[sweeps.Point, str, str]] = []
        nworkers = workers or max(1, min(os.cpu_count() or 1, len(todo)))
        runs = f"{len(todo)} run" + ("" if len(todo) == 1 else "s")
        label = f"sweep ({runs}" + (f", {len(store.done)} done before" if store.done else "") + ")"
        with progress(label, len(todo), unit="runs", lines=True, quiet=quiet) as advance:

            def on_done(point: sweeps.Point, status: str, payload: str) -> None:
                if status == "ok":
                    store.add(sweeps.to_row(plan, point, json.loads(payload)))
                else:
                    failed.append((point, status, payload))
                advance()

            try:
                sweeps.execute(plan, todo, backend, nworkers, address, on_done)
            finally:
                with signals_deferred():
                    store.close()  # what ended is kept, whatever stopped the sweep
        if failed:
            _fail(failed, len(todo), store.kept())
        with signals_deferred():
            table = store.finish()
    except (KeyboardInterrupt, Terminated) as e:
        if (kept := store.kept()) is None:
            raise
        # As a failed sweep says: where its runs are, and how to go on (SIGTERM
        # said only "terminated").
        what, code = ("terminated", int(e.code or 143)) if isinstance(e, Terminated) else ("interrupted", 130)
        line = f"error: {what}; the runs that ended are kept in {kept}: rerun with --resume to finish"
        err.print(line, markup=False, soft_wrap=True)
        raise typer.Exit(code) from None
    finally:
        store.release()
    _summary(plan, table, origin, out_file, len(store.done))


def _fail(failed: list[tuple[Point, str, str]], ran: int, kept: Path | None) -> None:
    """One `error:` line for the runs that failed: exit 2 when each failed on bad
    input, 1 when a worker crashed (twice)."""
    failed.sort(key=lambda f: (f[0].index, f[0].replication))
    point, status, msg = failed[0]
    what = "crashed twice" if status == "crash" else "failed"
    line = f"{len(failed)} of {ran} runs failed; the first {what}: {msg} (grid point {point.describe()})"
    if kept is not None:
        line += f"; the others are kept in {kept}: rerun with --resume to retry the failed ones"
    err.print(f"error: {line}", markup=False, soft_wrap=True)
    raise typer.Exit(1 if any(s == "crash" for _, s, _ in failed) else 2)


def _summary(plan: Sweep, table: pa.Table, origin: str, out_file: Path | None, before: int) -> None:
    import pyarrow as pa

    from .. import sweep as sweeps
    from ..sweep_report import headline
    from .summary import column_unit

    keys = plan.keys
    floats = [f.name for f in table.schema if pa.types.is_floating(f.type) and f.name not in keys]
    # The metrics `irqlab report` plots by default (`irqlab query` has every column).
    shown = headline(floats, table) or [m for m in FALLBACK if m in table.column_names]
    npoints = len(plan.points) // plan.replications
    title = f"sweep of {origin}: {npoints} point" + ("" if npoints == 1 else "s")
    if plan.replications > 1:
        title += f" x {plan.replications} replications"
    if before:
        title += f" ({before} runs resumed)"
    if out_file is not None:
        title += f" -> {out_file}"
    # Plain-text columns (as `run`'s tables): wrapped into groups, never cut, at any width.
    headers: list[str] = []
    rows: list[list[str]] = []
    # A latency in its unit (a histogram's ns: 539 ns, 1.45 ms); counts and rates as exact numbers.
    timed = {m for m in shown if column_unit(m) in ("ns", "us", "s")}

    def cell(m: str, v: Any) -> str:
        # No value: a histogram with nothing in it (no completions), or a mean of none.
        if v is None or (isinstance(v, float) and math.isnan(v)):
            return "n/a"
        return summary.human(v, column_unit(m)) if m in timed else fmt(v)

    seed_axis = any(k == "seed" for k, _ in plan.axes)
    # Each wrapped group repeats the columns that name a row: the grid keys and the seed.
    if plan.replications == 1:
        lead = len(keys) + 1
        headers = [*keys, "seed", *shown]
        cols = {c: table.column(c).to_pylist() for c in headers}
        rows = [[cell(c, cols[c][i]) for c in headers] for i in range(table.num_rows)]
    else:
        # Mean and 95 % confidence interval (Student t) over each point's replications.
        # A seed axis is a key here: each of its values is a point's base seed.
        ids = [*keys, "seed"] if seed_axis else list(keys)
        lead = len(ids)
        headers = [*ids, "n"]
        for m in shown:
            headers += [f"{m} mean", f"{m} ±95% CI"]
        for entry in sweeps.summarize(table, keys, shown, seed_axis):
            cells = [fmt(entry[k]) for k in ids] + [fmt(entry["n"])]
            for m in shown:
                mean, half = entry[m]
                ci = "-" if half is None else "±" + cell(m, half)
                # The mean and its interval are over the runs with a value: say
                # how many where that is fewer than the point's n.
                if 0 < entry["counts"][m] < entry["n"]:
                    ci += f" (n {entry['counts'][m]})"
                cells += [cell(m, mean), ci]
            rows.append(cells)
    right = [h not in keys and h != "seed" for h in headers]
    lines = summary.table_lines(title, headers, rows, right, out.width, lead=lead)
    out.file.write("\n".join(lines) + "\n")
