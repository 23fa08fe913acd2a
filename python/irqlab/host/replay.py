"""`irqlab replay`: recorded interrupt arrivals (an `irqlab record` Parquet
trace) drive the scenario's `replay` sources in the simulated machine, so a
modelled policy (moderation, masking, fabric) can be tried on real traffic."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .. import _core
from .._util import UserError, in_worker, one_line, time_ns
from .record import SCHEMA_TAG

REQUIRED = {"time": "int64", "cpu": "int32", "irq": "int32", "name": "string", "event": "string"}


def read_trace(path: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not path.is_file():
        raise UserError(f"{path}: no such trace file")
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable Parquet file ({one_line(str(e))})") from None
    got = {f.name: str(f.type) for f in table.schema}
    missing = [f"{k} ({t})" for k, t in REQUIRED.items() if got.get(k) != t]
    if missing or SCHEMA_TAG not in (table.schema.metadata or {}):
        raise UserError(
            f"{path}: not an irqlab trace (expected columns time, cpu, irq, name, event as written by "
            f"`irqlab record`; missing or mistyped: {', '.join(missing) or 'the irqlab.trace tag'})"
        )
    return table


#: The longest trace replay takes: simulated time is u64 picoseconds (213 days).
MAX_SPAN_NS = 10**16


def arrivals(table: Any, keys: Sequence[str]) -> tuple[dict[str, list[int]], list[str]]:
    """Entry times per replay key (a device IRQ's name or number), in ps from the trace's first event.
    Rows without a time or event are skipped; an IRQ without a name is known by its number."""
    times = table.column("time").to_pylist()
    rows = [
        (t, irq, name if name is not None else str(irq), ev)
        for t, irq, name, ev in zip(
            times, table.column("irq").to_pylist(), table.column("name").to_pylist(), table.column("event").to_pylist()
        )
        if t is not None and ev is not None
    ]
    if not rows:
        return {}, []
    t0 = min(r[0] for r in rows)
    span = max(r[0] for r in rows) - t0
    if span > MAX_SPAN_NS:
        raise UserError(f"trace spans {span / 1e9:.3g} s; replay takes traces up to {MAX_SPAN_NS / 1e9:.3g} s")
    out: dict[str, list[int]] = {k: [] for k in keys}
    seen: dict[str, int] = {}
    for t, irq, name, ev in rows:
        if ev != "entry":
            continue
        seen[name] = seen.get(name, 0) + 1
        for k in keys:
            if k == name or k == str(irq):
                out[k].append((t - t0) * 1000)
    for v in out.values():
        v.sort()
    busiest = sorted(seen, key=lambda n: -seen[n])
    return {k: v for k, v in out.items() if v}, busiest


def replay(
    trace: Path, text: str, origin: str, overrides: Sequence[str], seed: int | None, force: bool = False
) -> tuple[dict[str, Any], list[str]]:
    table = read_trace(trace)
    try:
        scen = json.loads(_core.load(text, origin, list(overrides)))
    except _core.ScenarioError as e:
        raise UserError(one_line(str(e))) from None
    keys = [s["replay"] for s in scen.get("source", []) if s.get("replay")]
    if not keys:
        raise UserError(f'{origin}: no [[source]] has replay = "IRQ name or number": nothing to replay')
    got, busiest = arrivals(table, keys)
    if not got:
        raise UserError(
            f"{trace}: no recorded interrupt matches the scenario's replay sources ({', '.join(keys)}); "
            f"the trace has: {', '.join(busiest[:8]) or 'no interrupts'}"
        )
    try:
        ov = list(overrides)
        raw = in_worker(
            lambda stop: _core.run_replay(text, origin, ov, seed, got, stop, force), time_ns(scen["duration"]) / 1e9
        )
    except _core.ScenarioError as e:
        raise UserError(one_line(str(e))) from None
    res = json.loads(raw)
    for k in keys:
        res["metrics"][f"replay.{k}.recorded"] = float(len(got.get(k, [])))
    res["trace"] = str(trace)
    return res, [k for k in keys if k not in got]
