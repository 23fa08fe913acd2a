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
from .record import SCHEMA_TAG, TRACE_FORMAT

REQUIRED = {"time": "int64", "cpu": "int32", "irq": "int32", "name": "string", "event": "string"}
#: The columns replay reads (with `kind`, when the trace has it).
ARRIVAL_COLUMNS = ("time", "irq", "name", "event")


def read_trace(path: Path) -> Any:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.is_dir():
        raise UserError(f"{path}: is a directory; expected a Parquet trace file (irqlab record --out)")
    if path.exists() and not path.is_file():
        raise UserError(f"{path}: not a regular file; expected a Parquet trace file (irqlab record --out)")
    if not path.is_file():
        raise UserError(f"{path}: no such trace file")
    try:
        schema = pq.read_schema(path)
        got = {f.name: str(f.type) for f in schema}
        missing = [f"{k} ({t})" for k, t in REQUIRED.items() if got.get(k) != t]
        if missing or SCHEMA_TAG not in (schema.metadata or {}):
            raise UserError(
                f"{path}: not an irqlab trace (expected columns time, cpu, irq, name, event as written by "
                f"`irqlab record`; missing or mistyped: {', '.join(missing) or 'the irqlab.trace tag'})"
            )
        # A format this version does not know was replayed without a word (a review).
        version = (schema.metadata or {})[SCHEMA_TAG]
        if version != TRACE_FORMAT:
            shown = version.decode("utf-8", "replace")[:20]
            raise UserError(
                f"{path}: irqlab trace format {shown!r}, expected {TRACE_FORMAT.decode()!r} "
                "(the format `irqlab record` of this version writes)"
            )
        # Only what `arrivals` reads: not `cpu` or `duration` (16 bytes a row).
        # Pages with checksums (`record` writes them) are verified.
        columns = [c for c in (*ARRIVAL_COLUMNS, "kind") if c in got]
        return pq.read_table(path, columns=columns, page_checksum_verification=True)
    except (pa.ArrowException, OSError, ValueError) as e:
        raise UserError(f"{path}: not a readable Parquet file ({one_line(str(e))})") from None


#: The longest trace replay takes: simulated time is u64 picoseconds (213 days).
MAX_SPAN_NS = 10**16


def arrivals(table: Any, keys: Sequence[str], where: Path | str = "trace") -> tuple[dict[str, list[int]], list[str]]:
    """Entry times per replay key (a device IRQ's name or number), in ps from the trace's first event.
    Rows without a time or event are skipped; an IRQ without a name is known by its number.
    Column-wise (pyarrow.compute): only the matched times become Python ints, so a
    trace of millions of events does not become millions of Python tuples."""
    import pyarrow as pa
    import pyarrow.compute as pc

    valid = pc.and_(pc.is_valid(table["time"]), pc.is_valid(table["event"]))
    times = pc.filter(table["time"], valid)
    if len(times) == 0:
        return {}, []
    t0, last = pc.min(times).as_py(), pc.max(times).as_py()
    if last - t0 > MAX_SPAN_NS:
        raise UserError(
            f"{where}: the trace spans {(last - t0) / 1e9:.3g} s (from its first event to its last); "
            f"replay takes traces up to {MAX_SPAN_NS / 1e9:.3g} s"
        )
    # Column by column, the entries only (filtering the whole table copies every column).
    entry = pc.and_(valid, pc.fill_null(pc.equal(table["event"], "entry"), False))

    def col(name: str) -> Any:
        return pc.filter(table[name], entry)

    irq = pc.cast(col("irq"), pa.string())
    # An empty name is no name: the entry goes by its IRQ number.
    named = col("name")
    names = pc.coalesce(pc.if_else(pc.equal(named, ""), pa.scalar(None, pa.string()), named), irq)
    # A device interrupt's number is its IRQ; a system vector's (local_timer 236, …) is
    # not, so a number matches only `kind = "irq"` rows (a trace without the column: all).
    is_irq = pc.fill_null(pc.equal(col("kind"), "irq"), True) if "kind" in table.column_names else None
    # ps from the first event, unsigned: a span up to MAX_SPAN_NS (1e16 ns) is 1e19 ps.
    ps = pc.multiply(pc.cast(pc.subtract(col("time"), t0), pa.uint64()), pa.scalar(1000, pa.uint64()))
    out: dict[str, list[int]] = {}
    for k in keys:
        by_number = pc.fill_null(pc.equal(irq, k), False)
        if is_irq is not None:
            by_number = pc.and_(by_number, is_irq)
        mine = pc.filter(ps, pc.or_(pc.fill_null(pc.equal(names, k), False), by_number))
        if len(mine):
            out[k] = pc.take(mine, pc.sort_indices(mine)).to_pylist()
    counts = pc.value_counts(names)
    seen = list(zip(counts.field("values").to_pylist(), counts.field("counts").to_pylist()))
    busiest = [n or "(entries with no name or IRQ number)" for n, _ in sorted(seen, key=lambda nc: -nc[1])]
    return out, busiest


def replay(
    trace: Path, text: str, origin: str, overrides: Sequence[str], seed: int | None, force: bool = False
) -> tuple[dict[str, Any], list[str]]:
    """The result, and warnings (one line each) for what the run left out."""
    table = read_trace(trace)
    try:
        scen = json.loads(_core.load(text, origin, list(overrides)))
    except _core.ScenarioError as e:
        raise UserError(one_line(str(e))) from None
    keys = [s["replay"] for s in scen.get("source", []) if s.get("replay")]
    if not keys:
        raise UserError(f'{origin}: no [[source]] has replay = "IRQ name or number": nothing to replay')
    got, busiest = arrivals(table, keys, trace)
    rows, usable, entries, timeless = _row_counts(table)
    if not entries and timeless:
        # (It said no row had event = "entry", then listed "entry" among the events.)
        raise UserError(
            f'{trace}: none of its {timeless:,} interrupt entries (event = "entry") has a time; '
            "expected each entry's time in ns"
        )
    if not entries:
        events = sorted({str(e) for e in table["event"].unique().to_pylist() if e is not None})[:8]
        raise UserError(
            f'{trace}: no row has event = "entry", the interrupt entries replay takes; '
            f"its events: {', '.join(events) or 'none'}"
        )
    if not got:
        raise UserError(
            f"{trace}: no recorded interrupt matches the scenario's replay sources ({', '.join(keys)}); "
            f"the trace has: {', '.join(busiest[:8]) or 'no interrupts'}"
        )
    warnings = outside_window(got, time_ns(scen.get("warmup", "0s")), time_ns(scen["duration"]))
    warnings += recording_gaps(table, trace, time_ns(scen["duration"]))
    if usable < rows:
        # Dropped without a word until a review counted them.
        warnings.insert(0, f"{rows - usable:,} of {rows:,} rows of {trace} have no time or no event and are skipped")
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
    unmatched = [k for k in keys if k not in got]
    if unmatched:
        warnings.insert(0, f"no recorded interrupt for replay source(s) {', '.join(unmatched)}; they stay silent")
    # The core's own (as `run` prints them).
    warnings += res.get("warnings", [])
    return res, warnings


def _row_counts(table: Any) -> tuple[int, int, int, int]:
    """Rows, rows with a time and an event, interrupt entries among those, and
    interrupt entries without a time."""
    import pyarrow as pa
    import pyarrow.compute as pc

    def count(mask: Any) -> int:
        return int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)

    valid = pc.and_(pc.is_valid(table["time"]), pc.is_valid(table["event"]))
    is_entry = pc.fill_null(pc.equal(table["event"], "entry"), False)
    entry = pc.and_(valid, is_entry)
    timeless = pc.and_(pc.is_null(table["time"]), is_entry)
    return table.num_rows, count(valid), count(entry), count(timeless)


def recording_gaps(table: Any, trace: Path | str, duration_ns: float) -> list[str]:
    """Warnings for what the recording itself lacks (an audit): a run longer than
    the recording, whose rates then count silent time after it, and events the
    tracing buffer lost, a gap the replay cannot see."""
    meta = table.schema.metadata or {}
    out = []
    try:
        recorded_s = float(meta.get(b"irqlab.duration_s", b""))
    except ValueError:
        recorded_s = 0.0
    if recorded_s > 0 and duration_ns / 1e9 > recorded_s * 1.001:
        out.append(
            f"{trace} was recorded for {recorded_s:g} s and the scenario runs {duration_ns / 1e9:g} s: its rates "
            f'count the silent time after the recording; set duration = "{recorded_s:g}s" to compare them'
        )
    try:
        lost = json.loads(meta.get(b"irqlab.snapshots", b"{}")).get("lost_events") or {}
    except (ValueError, AttributeError):
        lost = {}
    if isinstance(lost, dict) and (n := sum(v for v in lost.values() if isinstance(v, int))) > 0:
        out.append(
            f"{trace}: the recording lost {n:,} events ({', '.join(sorted(lost))}: the tracing buffer filled); "
            "the replay has a gap where they were"
        )
    return out


def outside_window(got: dict[str, list[int]], warmup_ns: float, duration_ns: float) -> list[str]:
    """Warnings for recorded arrivals the scenario's window leaves out: those in
    the warm-up are replayed but not measured, those past `duration` not replayed
    at all (a run that reports 0 interrupts for a trace of thousands said nothing)."""
    out = []
    for k, ps in got.items():
        early = sum(1 for t in ps if t < warmup_ns * 1000)
        late = sum(1 for t in ps if t >= duration_ns * 1000)
        if early:
            out.append(
                f"{early:,} of {len(ps):,} recorded arrivals of {k} fall in the warm-up "
                f"(the first {warmup_ns / 1e9:g} s of the trace) and are not measured; set warmup=… lower"
            )
        if late:
            span = (max(ps) // 1000 + 1) / 1e9
            out.append(
                f"{late:,} of {len(ps):,} recorded arrivals of {k} come after the scenario's duration "
                f"({duration_ns / 1e9:g} s) and are not replayed; the trace runs to {span:.3g} s"
            )
    return out
