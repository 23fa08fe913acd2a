"""`irqlab record`: this host's interrupt events through a private tracefs
instance (`irq:irq_handler_entry/exit` and `irq_vectors:*`), written as
Parquet with /proc/interrupts and /proc/stat snapshots in its metadata.

A private instance (`instances/irqlab-PID`) leaves the global trace buffer and
other users' settings alone; removing it at the end, on Ctrl-C or on SIGTERM,
puts the host's tracing back as it was (tracefs is unmounted again if this
command mounted it, once no recorder's instance is left in it).

Several recorders may run at once: each takes `LOCK` while it mounts tracefs
and makes its instance, and while it removes the instance and decides whether
to unmount, so one never unmounts tracefs under another's instance. Whether an
irqlab recorder mounted it is kept in `MOUNTED_MARK` (the last one out, of any
of them, unmounts)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from .. import _core
from .._util import UserError, atomic_write, pid_alive
from .info import host_info

TRACEFS = Path("/sys/kernel/tracing")
#: Serialises recorders' mount, make, remove and unmount steps (root-only, as record is).
LOCK = Path("/run/irqlab-record.lock")
#: Present while tracefs is mounted because an irqlab recorder mounted it.
MOUNTED_MARK = Path("/run/irqlab-record.mounted")
MOUNT = ["mount", "-t", "tracefs", "nodev", str(TRACEFS)]
EVENTS = ("irq/irq_handler_entry", "irq/irq_handler_exit")
SCHEMA_TAG = b"irqlab.trace"
#: The trace format `record` writes under SCHEMA_TAG, and the one `replay` reads.
TRACE_FORMAT = b"1"

# "  <idle>-0  [001] d.h1.  1234.567890: irq_handler_entry: irq=36 name=virtio1-req.0"
LINE = re.compile(r"^\s*.+?-\d+\s+(?:\(\s*[-\d]+\)\s+)?\[(\d+)\]\s+(?:\S+\s+)?(\d+)\.(\d+):\s+(\w+):\s*(.*)$")
# The same event with the `raw` trace option: "PID CPU NS type: ID" (`print_raw_fmt`).
RAW_LINE = re.compile(r"^\d+ (\d+) (\d+) ")


def _write(path: Path, text: str) -> None:
    path.write_text(text)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    with open(LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _mount_if_needed() -> bool:
    """Mounts tracefs unless it is; under `LOCK`. True if this call mounted it."""
    if (TRACEFS / "instances").is_dir():
        return False
    try:
        subprocess.run(MOUNT, check=True, capture_output=True, text=True)
    except (OSError, subprocess.CalledProcessError) as e:
        detail = getattr(e, "stderr", "") or str(e)
        raise UserError(
            f"record: tracefs is not mounted at {TRACEFS} and mounting it failed ({detail.strip()})"
        ) from None
    if not (TRACEFS / "instances").is_dir():
        raise UserError(f"record: {TRACEFS} has no instances/ directory: this kernel's tracefs is too old or disabled")
    MOUNTED_MARK.touch()
    return True


def _remove(inst: Path) -> None:
    """Removes the instance and, if an irqlab recorder mounted tracefs and no
    instance is left in it, unmounts it; under `LOCK`. An instance outlives an
    unmount (the kernel keeps it): if tracefs is gone, it is mounted again to
    remove it."""
    with _locked():
        remounted = False
        if not (TRACEFS / "instances").is_dir():
            remounted = subprocess.run(MOUNT, capture_output=True).returncode == 0
        if inst.exists():
            _stop_and_rmdir(inst)
        left = any((TRACEFS / "instances").iterdir()) if (TRACEFS / "instances").is_dir() else True
        if (remounted or MOUNTED_MARK.exists()) and not left:
            subprocess.run(["umount", str(TRACEFS)], capture_output=True)
            MOUNTED_MARK.unlink(missing_ok=True)


def _on_term(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def capture(duration: float, advance: Callable[[float], None] | None = None) -> tuple[str, str | None, dict[str, Any]]:
    """Records for `duration` seconds; returns the trace text, the same events
    read again with the `raw` option (ns timestamps; `None` where the option
    is missing) and the snapshots."""
    if os.geteuid() != 0:
        raise UserError("record: needs root (CAP_SYS_ADMIN) to use tracefs; run it as root")
    inst = TRACEFS / "instances" / f"irqlab-{os.getpid()}"
    # SIGTERM and SIGHUP (a closed terminal, a dropped ssh) must unwind through
    # the `finally` below, which removes the instance: by default they kill at
    # once, and the instance went on tracing, 32 MiB a CPU (a review). The CLI's
    # SIGTERM handler does (it says "terminated", exit 143); a signal left at
    # its default gets one that does.
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}
    for sig, handler in old.items():
        if handler == signal.SIG_DFL:
            signal.signal(sig, _on_term)
    # The instance's name goes with the trace, so that a check that it is gone
    # looks at this recording's instance, not at another recorder's.
    snaps: dict[str, Any] = {"instance": inst.name}
    try:
        with _locked():
            _mount_if_needed()
            _remove_orphans()
            try:
                inst.mkdir()
            except OSError as e:
                raise UserError(f"record: cannot create a tracefs instance at {inst} ({e.strerror})") from None
        try:
            # A new instance traces from the start: off until the snapshots are
            # taken, so that they bracket exactly what the trace holds.
            _write(inst / "tracing_on", "0")
            _write(inst / "buffer_size_kb", "32768")
            _write(inst / "trace_clock", "mono")
            enabled = 0
            for ev in EVENTS:
                p = inst / "events" / ev / "enable"
                if p.exists():
                    _write(p, "1")
                    enabled += 1
            vectors = inst / "events" / "irq_vectors" / "enable"
            if vectors.exists():
                _write(vectors, "1")
            if enabled == 0:
                raise UserError("record: this kernel has no irq:irq_handler_entry tracepoint")
            # How long the snapshots count what tracing cannot see (between a
            # snapshot and the switch), so that a reader can bound the trace
            # against their counts: long only if this process was descheduled.
            counted_from = time.monotonic_ns()
            snaps["interrupts_before"] = Path("/proc/interrupts").read_text()
            snaps["stat_before"] = Path("/proc/stat").read_text()
            snaps["start_monotonic_ns"] = time.monotonic_ns()
            _write(inst / "tracing_on", "1")
            untraced = time.monotonic_ns() - counted_from
            end = time.monotonic() + duration
            while (left := end - time.monotonic()) > 0:
                time.sleep(min(0.1, left))
                if advance:
                    advance(duration - max(0.0, end - time.monotonic()))
            off_at = time.monotonic_ns()
            _write(inst / "tracing_on", "0")
            snaps["lost_events"] = _lost(inst)
            snaps["interrupts_after"] = Path("/proc/interrupts").read_text()
            snaps["untraced_ns"] = untraced + time.monotonic_ns() - off_at
            snaps["stat_after"] = Path("/proc/stat").read_text()
            text = (inst / "trace").read_text()
            raw = None
            if (inst / "options" / "raw").exists():
                # Reading `trace` consumes nothing, and tracing is off: a second
                # read in the raw format lists the same events in the same order.
                _write(inst / "options" / "raw", "1")
                raw = (inst / "trace").read_text()
        except PermissionError as e:
            raise UserError(f"record: permission denied writing {e.filename}") from None
        except FileNotFoundError as e:
            # Another program unmounted tracefs (or removed the instance) while this one recorded.
            raise UserError(
                f"record: {e.filename} vanished while recording (tracefs unmounted by another program?)"
            ) from None
    finally:
        try:
            _remove(inst)
        finally:
            for sig, handler in old.items():
                if handler == signal.SIG_DFL:
                    signal.signal(sig, handler)
    return text, raw, snaps


def _remove_orphans() -> None:
    """Removes the instances of recorders that died without cleaning up
    (SIGKILL runs nothing): `irqlab-PID` whose PID is gone. Under `LOCK`."""
    for d in (TRACEFS / "instances").glob("irqlab-*"):
        pid = d.name.removeprefix("irqlab-")
        if pid.isdigit() and not pid_alive(int(pid)):
            _stop_and_rmdir(d)


def _stop_and_rmdir(inst: Path) -> None:
    """Stops an instance's tracing and removes it, as far as tracefs lets."""
    with contextlib.suppress(OSError):
        _write(inst / "tracing_on", "0")
    with contextlib.suppress(OSError):
        inst.rmdir()


def _lost(inst: Path) -> dict[str, int]:
    """Events the instance's ring buffer lost, per CPU that lost any: `overrun`
    (the oldest overwritten when a CPU's buffer filled) and `dropped events`,
    from per_cpu/cpuN/stats."""
    lost: dict[str, int] = {}
    for stats in sorted((inst / "per_cpu").glob("cpu*/stats")):
        n = 0
        for line in stats.read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("overrun", "dropped events") and value.strip().isdigit():
                n += int(value)
        if n:
            lost[stats.parent.name] = n
    return lost


def ns_times(text: str, raw: str | None) -> list[int] | None:
    """The ns timestamp of each event line of `text`, from the same events read
    with the `raw` option, or `None` if the two cannot be paired line for line.

    The text format prints a ns clock rounded to whole µs (`ns2usecs` in
    `trace_print_time`); the raw one prints it whole (`print_raw_fmt`) but
    not the events' fields. Each pair must agree on the CPU and on the rounded
    µs, so a mismatch (a kernel that orders them differently) falls back to µs
    rather than giving an event another's time."""
    if raw is None:
        return None
    ns = [(int(m.group(1)), int(m.group(2))) for line in raw.splitlines() if (m := RAW_LINE.match(line))]
    events = [m for line in text.splitlines() if not line.startswith("#") and (m := LINE.match(line))]
    if len(ns) != len(events):
        return None
    out = []
    for (cpu, t), m in zip(ns, events):
        us = int(m.group(2)) * 1_000_000 + int(m.group(3).ljust(6, "0")[:6])
        if cpu != int(m.group(1)) or (t + 500) // 1000 != us:
            return None
        out.append(t)
    return out


def parse(text: str, ns: list[int] | None = None) -> Iterator[tuple[int, int, int, str, str, str]]:
    """(time ns, cpu, irq or vector, name, event, kind) per trace line; `ns`
    (from `ns_times`) gives each event line's time to the ns."""
    k = -1
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = LINE.match(line)
        if not m:
            continue
        k += 1
        cpu, sec, frac, ev, rest = m.groups()
        t = ns[k] if ns is not None else int(sec) * 1_000_000_000 + int(frac.ljust(9, "0")[:9])
        fields = dict(kv.split("=", 1) for kv in rest.split() if "=" in kv)
        if ev in ("irq_handler_entry", "irq_handler_exit"):
            irq = int(fields.get("irq", -1))
            # `name` is the format's last field and may hold spaces ("PCIe PME").
            name = rest.split("name=", 1)[1].strip() if "name=" in rest else ""
            yield t, int(cpu), irq, name, "entry" if ev.endswith("entry") else "exit", "irq"
        elif ev.endswith("_entry") or ev.endswith("_exit"):
            base, _, which = ev.rpartition("_")
            vec = int(fields.get("vector", -1))
            yield t, int(cpu), vec, base, which, "vector"


def to_table(text: str, raw: str | None, snaps: dict[str, Any], duration: float) -> Any:
    import pyarrow as pa

    ns = ns_times(text, raw)
    snaps["time_resolution_ns"] = 1 if ns is not None else 1000
    rows = list(parse(text, ns))
    rows.sort(key=lambda r: (r[0], r[1]))
    open_: dict[tuple[int, str, int], tuple[int, str]] = {}
    cols: dict[str, list[Any]] = {k: [] for k in ("time", "cpu", "irq", "name", "event", "kind", "duration")}
    for t, cpu, irq, name, event, kind in rows:
        dur = None
        key = (cpu, kind, irq)
        if event == "entry":
            open_[key] = (t, name)
        else:
            start = open_.pop(key, None)
            if start:
                dur = t - start[0]
                name = name or start[1]
        for k, v in zip(cols, (t, cpu, irq, name, event, kind, dur)):
            cols[k].append(v)
    schema = pa.schema(
        [
            ("time", pa.int64()),
            ("cpu", pa.int32()),
            ("irq", pa.int32()),
            ("name", pa.string()),
            ("event", pa.string()),
            ("kind", pa.string()),
            ("duration", pa.int64()),
        ]
    )
    meta = {
        SCHEMA_TAG: TRACE_FORMAT,
        b"irqlab.version": _core.__version__.encode(),
        b"irqlab.duration_s": str(duration).encode(),
        b"irqlab.host": json.dumps(host_info()).encode(),
        b"irqlab.snapshots": json.dumps(snaps).encode(),
    }
    return pa.table(cols, schema=schema).replace_schema_metadata(meta)


def record(
    duration: float, out: Path, advance: Callable[[float], None] | None = None, keep_sigint_ignored: bool = False
) -> dict[str, Any]:
    """Records for `duration` s and writes the Parquet trace to `out`; returns its
    summary. Ctrl-C is ignored from the write on, and, with `keep_sigint_ignored`
    (the CLI, which has its summary line to print), after the return too."""
    import io

    import pyarrow.parquet as pq

    if not 0 < duration <= 3600:
        raise UserError(f"--duration {duration}: expected more than 0 and at most 3600 seconds")
    text, raw, snaps = capture(duration, advance)
    table = to_table(text, raw, snaps, duration)
    buf = io.BytesIO()
    # Page checksums, so that replay finds damage inside the file, not only in
    # its footer (flipped bytes replayed silently; an audit).
    pq.write_table(table, buf, compression="zstd", write_page_checksum=True)
    # From here the recording is kept: a Ctrl-C that lands during the write (a
    # rename) or just after it would exit 130 beside a complete file, which a
    # script checking $? would throw away. So it is ignored until the end.
    main = threading.current_thread() is threading.main_thread()
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN) if main else None
    try:
        atomic_write(out, buf.getvalue())
    finally:
        if old_int is not None and not keep_sigint_ignored:
            signal.signal(signal.SIGINT, old_int)
    names = table.column("name").to_pylist()
    kinds = table.column("kind").to_pylist()
    events = table.column("event").to_pylist()
    per: dict[str, int] = {}
    for n, k, e in zip(names, kinds, events):
        if e == "entry":
            per[f"{k}:{n}"] = per.get(f"{k}:{n}", 0) + 1
    return {"events": table.num_rows, "entries": per, "lost": snaps.get("lost_events", {})}
