"""`irqlab run`, `validate` and `schema`: one scenario, its check, and the format's JSON Schema."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from .. import _core, provenance
from .._util import UserError, atomic_write, check_overrides, measured_keys, read_scenario, set_from
from . import JsonOpt, ScenarioArg, SeedOpt, SetFromOpt, SetOpt, app, check_seed, user_errors
from .render import dump, out, print_result, to_stdout, write_json


@app.command()
@user_errors
def run(
    scenario: ScenarioArg,
    set_: SetOpt = None,
    set_from_: SetFromOpt = None,
    seed: SeedOpt = None,
    json_out: JsonOpt = None,
    trace_out: Annotated[Path | None, typer.Option("--trace", help="Write a Perfetto trace here.")] = None,
) -> None:
    """Run a scenario and print its metrics."""
    text, origin = read_scenario(scenario)
    overrides = set_from(set_from_) + check_overrides(set_)
    raw, trace = _core.run(text, origin, overrides, check_seed(seed), trace_out is not None)
    result = json.loads(raw)
    result["provenance"] = provenance.build(
        text, origin, overrides, measured_keys(set_from_), [*result["metrics"], *result["histograms"]]
    )
    if trace_out is not None and trace is None:
        raise UserError(f"--trace {trace_out}: the core produced no trace")
    if json_out is not None:
        write_json(json_out, result)
    if trace_out is not None and trace is not None:
        atomic_write(trace_out, trace)
    if not to_stdout(json_out):
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
