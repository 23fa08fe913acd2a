"""`irqlab run`, `validate` and `schema`: one scenario, its check, and the format's JSON Schema."""

from __future__ import annotations

import json
import sys
from contextlib import nullcontext
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from .. import _core, provenance
from .._util import (
    UserError,
    atomic_write,
    check_measured,
    check_overrides,
    duration_s,
    in_worker,
    measured_keys,
    read_scenario,
    refuse_input_outputs,
    refuse_set_and_set_from,
    same_file,
    set_from,
    staged_file,
    streams_to_file,
    write_all,
)
from ..reproduce import variant_overrides
from . import (
    AllOpt,
    ForceOpt,
    JsonOpt,
    PerCpuOpt,
    ScenarioArg,
    SeedOpt,
    SetFromOpt,
    SetOpt,
    app,
    check_seed,
    output_file,
    summary,
    user_errors,
)
from .render import dump, err, out, to_stdout


class Format(StrEnum):
    table = "table"
    csv = "csv"
    json = "json"


@app.command()
@user_errors
def run(
    scenario: ScenarioArg,
    set_: SetOpt = None,
    set_from_: SetFromOpt = None,
    seed: SeedOpt = None,
    variant: Annotated[
        str | None,
        typer.Option(
            "--variant",
            help="Run the scenario's variant of this name: a variants.run entry, or an expect entry's run "
            "(its set). An unknown name is an error listing them.",
        ),
    ] = None,
    json_out: JsonOpt = None,
    trace_out: Annotated[
        Path | None, typer.Option("--trace", help="Write a Perfetto trace here ('-' = stdout).", callback=output_file)
    ] = None,
    output: Annotated[
        Format | None,
        typer.Option(
            "--format",
            help="What goes to stdout: table (for people, the default); csv (a header row `metric,value,unit`, "
            "then one row per metric and per histogram statistic as HISTOGRAM.STAT; units: IOPS, Gbit/s, /s, "
            "ns/s, ns, us, s, MB, MHz, fraction (0-1), empty for a count or plain number); json (the result, "
            "as --json -).",
            show_default=False,
        ),
    ] = None,
    per_cpu: PerCpuOpt = False,
    all_: AllOpt = False,
    force: ForceOpt = False,
) -> None:
    """Run a scenario and print a summary of its metrics.

    The table starts with the headline metrics in human units (throughput,
    ops/s, interrupts/s, CPU shares, latency percentiles, and the metrics the
    scenario's figures name), then the aggregate metrics and the histograms;
    --per-cpu adds the per-CPU and per-source rows, --all prints everything.
    Tables fit the terminal (or $COLUMNS, else 80 columns, when piped), wrapped
    into groups of columns rather than cut.

    A run with a warm-up gets a one-line warning on stderr when it was too
    short to settle: its measured window (duration - warmup) is shorter than
    half the warm-up, its headline (the throughput's latency histogram, else
    op_latency, else irq_latency) counted fewer than 100 completions, or the
    first half of the window disagrees with the whole (throughput, or the
    headline's p99)."""
    fmt_given = output is not None
    fmt = output or Format.table
    json_stdout = to_stdout(json_out) or fmt is Format.json
    if json_stdout and to_stdout(trace_out):
        what = "--json -" if to_stdout(json_out) else "--format json"
        raise UserError(f"{what} and --trace -: only one output can go to stdout")
    if fmt_given and fmt is not Format.json and (to_stdout(json_out) or to_stdout(trace_out)):
        taken = "--json -" if to_stdout(json_out) else "--trace -"
        raise UserError(f"{taken} and --format {fmt.value}: only one output can go to stdout")
    if json_out is not None and trace_out is not None and same_file(json_out, trace_out):
        raise UserError(f"--json {json_out} and --trace {trace_out} name the same file: expected two files")
    text, origin = read_scenario(scenario)
    refuse_set_and_set_from(set_, set_from_)
    measured = set_from(set_from_)  # reads (and notes) the --set-from files
    refuse_input_outputs(json=json_out, trace=trace_out)
    sets = variant_overrides(scenario, variant) if variant is not None else []
    user = check_overrides(set_)
    check_measured(text, origin, sets, measured, user, set_from_)
    overrides = sets + measured + user
    s = check_seed(seed)
    # A trace for a file streams into a temp file beside it (memory stays bounded
    # whatever trace.max_events is); for stdout, a FIFO or a device it comes back as bytes.
    stream = trace_out is not None and not to_stdout(trace_out) and streams_to_file(trace_out)
    with staged_file(trace_out) if stream and trace_out is not None else nullcontext(None) as trace_tmp:
        _run_and_show(
            text, origin, overrides, s, force, set_from_, variant, json_out, trace_out, trace_tmp, fmt, per_cpu, all_
        )


def _run_and_show(
    text: str,
    origin: str,
    overrides: list[str],
    s: int | None,
    force: bool,
    set_from_: list[str] | None,
    variant: str | None,
    json_out: Path | None,
    trace_out: Path | None,
    trace_tmp: Path | None,
    fmt: Format,
    per_cpu: bool,
    all_: bool,
) -> None:
    json_stdout = to_stdout(json_out) or fmt is Format.json
    sim_s = duration_s(text, origin, overrides)
    try:
        raw, trace = in_worker(
            lambda stop: _core.run(text, origin, overrides, s, trace_out is not None, stop, force, trace_tmp), sim_s
        )
    except OSError as e:
        raise UserError(f"--trace {trace_out}: {e}") from None
    result = json.loads(raw)
    # The core's warnings: a run it can do, with a result a user would not expect.
    for w in result.get("warnings", []):
        err.print(f"warning: {w}", markup=False, soft_wrap=True)
    result["provenance"] = provenance.build(
        text, origin, overrides, measured_keys(set_from_), [*result["metrics"], *result["histograms"]]
    )
    if trace_out is not None and trace is None and trace_tmp is None:
        raise UserError(f"--trace {trace_out}: the core produced no trace")
    # The short-run warning goes into the result too, as the core's do: `--json`
    # held every warning line but this one (an audit).
    short = summary.short_run(result, result["provenance"]["scenario"])
    if short is not None:
        result.setdefault("warnings", []).append(short)
    # Both outputs or neither: a trace that cannot be written leaves no JSON behind.
    outputs: list[tuple[Path | None, bytes | str | None]] = [(json_out, dump(result)), (trace_out, trace)]
    streamed = [(trace_out, trace_tmp)] if trace_out is not None and trace_tmp is not None else []
    write_all([(d, x) for d, x in outputs if d is not None and x is not None and not to_stdout(d)], streamed)
    if short is not None:
        err.print(f"warning: {short}", markup=False, soft_wrap=True)
    if json_stdout:
        sys.stdout.write(dump(result))
    elif to_stdout(trace_out) and trace is not None:
        sys.stdout.buffer.write(trace)
        sys.stdout.flush()
    elif fmt is Format.csv:
        sys.stdout.write(summary.to_csv(result))
    else:
        summary.print_summary(result, variant, "all" if all_ else "per-cpu" if per_cpu else "summary")


@app.command()
@user_errors
def validate(
    scenario: ScenarioArg,
    set_: SetOpt = None,
    force: Annotated[
        bool, typer.Option("--force", help="Check it as `run --force` would run it: without the run budget.")
    ] = False,
) -> None:
    """Check a scenario (and overrides) with the run budget `run` applies, and the metrics its
    `\\[\\[expect]]` entries and study compare, from a 100 µs run (not the whole run)."""
    text, origin = read_scenario(scenario)
    overrides = check_overrides(set_)
    scen = json.loads(_core.load(text, origin, overrides))
    # What `run` would refuse, `validate` refuses too: the run budget, which the
    # refusal says `--force` lifts (a review: validate had no --force to pass).
    if not force:
        _core.check_budget(text, origin, overrides)
    # And what `run --variant` and `reproduce` would: each [[expect]] and
    # [[variants.run]] entry's overrides, named by their entry, and the
    # metrics they compare (a 100 µs run of each).
    from ..reproduce import prepare, probe

    probe(prepare([scenario], overrides))
    n = len(scen.get("expect", []))
    v = len((scen.get("variants") or {}).get("run", []))
    ok = f"OK {origin}: scenario {scen.get('name')!r}, {n} expectation(s), {v} variant(s)"
    if force:
        ok += " (run budget not checked: --force)"
    out.print(ok, markup=False, soft_wrap=True)  # one line, whatever the width: scripts grep it


@app.command()
@user_errors
def schema(
    out_file: Annotated[
        Path | None, typer.Option("--out", help="Write the schema here instead of stdout.", callback=output_file)
    ] = None,
) -> None:
    """Print the JSON Schema of the scenario format (for editors)."""
    doc = dump(json.loads(_core.schema()))
    if out_file is None:
        sys.stdout.write(doc)
    else:
        atomic_write(out_file, doc)
