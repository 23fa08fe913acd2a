"""`irqlab bench`: engine speed on the reference scenario or another one."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated

import typer

from .. import SCENARIOS_DIR, _core
from .._util import UserError, check_overrides, read_scenario, time_ns
from ..result import document
from . import JsonOpt, SetOpt, app, user_errors
from .render import emit


@app.command()
@user_errors
def bench(
    json_out: JsonOpt = None,
    repeat: Annotated[int, typer.Option("--repeat", help="Runs; the fastest is reported.")] = 1,
    scenario: Annotated[
        Path | None, typer.Option("--scenario", help="Time this scenario instead of the reference model.")
    ] = None,
    set_: SetOpt = None,
) -> None:
    """Measure engine speed on the reference scenario (bench/reference.toml) or another one."""
    if repeat < 1:
        raise UserError(f"--repeat {repeat}: expected at least 1")
    path = scenario if scenario is not None else SCENARIOS_DIR / "bench" / "reference.toml"
    text, origin = read_scenario(path)
    if scenario is None:
        origin = "bench/reference.toml"
    overrides = check_overrides(set_)
    wall = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        raw, _trace = _core.run(text, origin, overrides, None, False)
        wall = min(wall, time.perf_counter() - t0)
    res = json.loads(raw)
    m = res["metrics"]
    metrics = {
        "interrupts": m["interrupts"],
        "events": m["events"],
        "wall_s": wall,
        "interrupts_per_wall_s": m["interrupts"] / wall,
        "events_per_wall_s": m["events"] / wall,
        # Warm-up included: it is simulated too.
        "sim_s_per_wall_s": _duration_s(text, origin, overrides) / wall,
    }
    doc = document(res["scenario"], res["seed"], metrics)
    emit(doc, json_out)


def _duration_s(text: str, origin: str, overrides: list[str]) -> float:
    """A scenario's simulated duration (warm-up included), in seconds."""
    duration: str = json.loads(_core.load(text, origin, overrides))["duration"]
    return time_ns(duration) / 1e9
