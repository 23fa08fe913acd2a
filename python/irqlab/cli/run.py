"""`irqlab run`, `validate` and `schema`: one scenario, its check, and the format's JSON Schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from .. import _core, provenance
from .._util import (
    UserError,
    atomic_write,
    check_overrides,
    in_worker,
    measured_keys,
    read_scenario,
    set_from,
    write_all,
)
from . import ForceOpt, JsonOpt, ScenarioArg, SeedOpt, SetFromOpt, SetOpt, app, check_seed, user_errors
from .render import dump, err, out, print_result, to_stdout


@app.command()
@user_errors
def run(
    scenario: ScenarioArg,
    set_: SetOpt = None,
    set_from_: SetFromOpt = None,
    seed: SeedOpt = None,
    json_out: JsonOpt = None,
    trace_out: Annotated[
        Path | None, typer.Option("--trace", help="Write a Perfetto trace here ('-' = stdout).")
    ] = None,
    force: ForceOpt = False,
) -> None:
    """Run a scenario and print its metrics."""
    if to_stdout(json_out) and to_stdout(trace_out):
        raise UserError("--json - and --trace -: only one output can go to stdout")
    text, origin = read_scenario(scenario)
    overrides = set_from(set_from_) + check_overrides(set_)
    s = check_seed(seed)
    raw, trace = in_worker(lambda stop: _core.run(text, origin, overrides, s, trace_out is not None, stop, force))
    result = json.loads(raw)
    # The core's warnings: a run it can do, with a result a user would not expect.
    for w in result.get("warnings", []):
        err.print(f"warning: {w}", markup=False, soft_wrap=True)
    result["provenance"] = provenance.build(
        text, origin, overrides, measured_keys(set_from_), [*result["metrics"], *result["histograms"]]
    )
    if trace_out is not None and trace is None:
        raise UserError(f"--trace {trace_out}: the core produced no trace")
    # Both outputs or neither: a trace that cannot be written leaves no JSON behind.
    outputs: list[tuple[Path | None, bytes | str | None]] = [(json_out, dump(result)), (trace_out, trace)]
    write_all([(d, x) for d, x in outputs if d is not None and x is not None and not to_stdout(d)])
    if to_stdout(json_out):
        sys.stdout.write(dump(result))
    elif to_stdout(trace_out) and trace is not None:
        sys.stdout.buffer.write(trace)
        sys.stdout.flush()
    else:
        print_result(result)


@app.command()
@user_errors
def validate(scenario: ScenarioArg, set_: SetOpt = None) -> None:
    """Check a scenario (and overrides) without running it."""
    text, origin = read_scenario(scenario)
    scen = json.loads(_core.load(text, origin, check_overrides(set_)))
    n = len(scen.get("expect", []))
    out.print(f"OK {origin}: scenario {scen.get('name')!r}, {n} expectation(s)", markup=False)


@app.command()
@user_errors
def schema(
    out_file: Annotated[Path | None, typer.Option("--out", help="Write the schema here instead of stdout.")] = None,
) -> None:
    """Print the JSON Schema of the scenario format (for editors)."""
    doc = dump(json.loads(_core.schema()))
    if out_file is None:
        sys.stdout.write(doc)
    else:
        atomic_write(out_file, doc)
