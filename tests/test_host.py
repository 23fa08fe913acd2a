"""Real hosts: measure, record, monitor, replay (issue 6). Measurements are
checked for plausibility and for stability between runs, never for speed."""

from __future__ import annotations

import json
import mmap
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import irqlab
from helpers import assert_ok, assert_terminates, assert_user_error, run_cli, start_cli

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

TRACEFS_OK = os.geteuid() == 0 and Path("/sys/kernel").is_dir()


def measure(*args: str, tmp: Path) -> dict:
    out = tmp / f"m{len(list(tmp.iterdir()))}.json"
    assert_ok(run_cli("measure", *args, "--json", out))
    return json.loads(out.read_text())


def test_syscall_cost_is_plausible_and_stable(tmp_path: Path) -> None:
    a = measure("syscall", "--calls", "200000", "--runs", "3", tmp=tmp_path)
    x = a["metrics"]["ns_per_call"]
    assert 5 < x < 100_000
    assert a["metrics"]["ns_per_call_min"] <= x <= a["metrics"]["ns_per_call_max"]
    # Stable between measurements: the fastest runs of two agree within 3x. A
    # measurement whose loop did not have its CPU all along (`cpu_share_min` under
    # BUSY_SHARE: a CI neighbour, such as the other test worker, came and went on
    # that CPU) is left out while quiet ones can be had: up to six are taken. A
    # neighbour that stays slows every measurement alike, so then the two that had
    # their CPU the most are compared (not the last two: one of those could have
    # shared its CPU all along and the other had it alone). The fastest run is the
    # least disturbed one, where a median still moves with a neighbour that comes
    # and goes.
    from irqlab.host.measure import BUSY_SHARE

    taken = [a]

    def quiet() -> list[dict]:
        return [m for m in taken if m["metrics"]["cpu_share_min"] >= BUSY_SHARE]

    while len(quiet()) < 2 and len(taken) < 6:
        taken.append(measure("syscall", "--calls", "200000", "--runs", "3", tmp=tmp_path))
    pair = quiet()[:2] if len(quiet()) >= 2 else sorted(taken, key=lambda m: -m["metrics"]["cpu_share_min"])[:2]
    fastest = [m["metrics"]["ns_per_call_min"] for m in pair]
    assert max(fastest) / min(fastest) < 3, f"gettid cost unstable: fastest runs {fastest} ns"
    assert a["host"]["kernel"] and a["host"]["cores"] >= 1 and "boot_options" in a["host"]
    assert set(a) >= {"scenario", "seed", "version", "metrics", "histograms", "series", "tables"}


def test_host_records_the_effective_mitigations_and_idle_states(tmp_path: Path) -> None:
    # A sysfs tree of a host with one mitigation in force, one vulnerability
    # left open and a deep idle state turned off: what `host` reports must be
    # what the files say, and a host without the files reports None.
    from irqlab.host import info

    vul = tmp_path / "vulnerabilities"
    vul.mkdir()
    (vul / "retbleed").write_text("Mitigation: untrained return thunk; SMT enabled with STIBP protection\n")
    (vul / "spec_store_bypass").write_text("Vulnerable\n")
    (vul / "meltdown").write_text("Not affected\n")
    (tmp_path / "cpuidle").mkdir()
    (tmp_path / "cpuidle" / "current_driver").write_text("intel_idle\n")
    (tmp_path / "cpuidle" / "current_governor").write_text("menu\n")
    for k, (name, lat, res, off) in enumerate([("POLL", 0, 0, 0), ("C1E", 2, 4, 0), ("C6", 290, 800, 1)]):
        d = tmp_path / "cpu0" / "cpuidle" / f"state{k}"
        d.mkdir(parents=True)
        for f, v in (("name", name), ("latency", lat), ("residency", res), ("disable", off)):
            (d / f).write_text(f"{v}\n")
    v = info.vulnerabilities(str(tmp_path))
    assert v == {
        "meltdown": "Not affected",
        "retbleed": "Mitigation: untrained return thunk; SMT enabled with STIBP protection",
        "spec_store_bypass": "Vulnerable",
    }
    idle = info.cpuidle(str(tmp_path))
    assert idle is not None and (idle["driver"], idle["governor"]) == ("intel_idle", "menu")
    assert [(s["name"], s["latency_us"], s["residency_us"], s["disabled"]) for s in idle["states"]] == [
        ("POLL", 0, 0, False),
        ("C1E", 2, 4, False),
        ("C6", 290, 800, True),
    ]
    line = info.describe(
        {"kernel": "6.12", "cpu_model": "x", "cores": 2, "boot_options": {}, "vulnerabilities": v, "cpuidle": idle}
    )
    # The deepest state the governor may choose: a disabled one is not.
    assert "mitigations in force: 1, vulnerable: 1" in line and "deepest C1E (2 us exit)" in line, line
    empty = tmp_path / "none"
    empty.mkdir()
    assert info.vulnerabilities(str(empty)) is None and info.cpuidle(str(empty)) is None
    assert "idle:" not in info.describe({**{"kernel": "k", "cpu_model": "x", "cores": 1, "boot_options": {}}})


def test_sched_yield_runs_one_task_per_cpu(tmp_path: Path) -> None:
    # What a second task adds depends on what else this machine runs (a busy
    # CPU shares itself with every yield), so that is a benchmark's question;
    # here: each task is pinned to a CPU of its own, every task makes progress,
    # and the totals add up.
    args = ("--seconds", "0.2", "--intervals", "3", "--warmup", "0.1")
    one = measure("sched_yield", "--tasks", "1", *args, tmp=tmp_path)
    two = measure("sched_yield", "--tasks", "2", *args, tmp=tmp_path)
    m1, m2 = one["metrics"], two["metrics"]
    assert 0 < m1["ops_per_s"] < 1e9
    assert m2["ops_per_s"] == pytest.approx(2 * m2["ops_per_s_per_task"])
    assert 0 < m2["ops_per_s_per_task_min"] <= m2["ops_per_s_per_task_max"]
    assert len(two["series"]["ops_per_s"]["v"]) == 3
    cpus = two["params"]["task_cpus"]
    assert all(len(c) == 1 for c in cpus), cpus
    if len(os.sched_getaffinity(0)) >= 2:
        assert cpus[0] != cpus[1], cpus


def test_page_faults_are_plausible(tmp_path: Path) -> None:
    a = measure(
        "pagefault",
        "--tasks",
        "1",
        "--mb",
        "16",
        "--seconds",
        "0.2",
        "--intervals",
        "3",
        "--warmup",
        "0.1",
        tmp=tmp_path,
    )
    m = a["metrics"]
    f = m["faults_per_s"]
    assert 1e3 < f < 1e9
    # A rate is pages over the time the loop really took, not over the nominal
    # interval (which whole 16 MB passes overrun): one task's median rate and
    # median time per page are the same interval's, so they multiply to 1 s.
    assert m["ns_per_fault"] * f == pytest.approx(1e9, rel=1e-9)
    # Real faults: one per page, or one per huge page with THP.
    assert 0.9 <= m["pages_per_fault"] <= 520, m["pages_per_fault"]
    assert a["host"]["transparent_hugepage"] in (None, "always", "madvise", "never")


def test_monitor_reads_only_what_are_a_cpus_interrupts() -> None:
    """RTR (APIC ICR read retries) is no interrupt, and ERR/MIS are one
    system-wide column, which was read as CPU 0's."""
    from irqlab.host.monitor import read_interrupts

    text = (
        "           CPU0       CPU1\n"
        "  1:          9          0   IO-APIC   1-edge      i8042\n"
        " 24:        100        200   PCI-MSIX-0000:00:04.0 1-edge  virtio1-req.0\n"
        "LOC:       1000       2000   Local timer interrupts\n"
        "RTR:          7          7   APIC ICR read retries\n"
        "PIN:          3          4   Posted-interrupt notification event\n"
        "CAL:         11         12   Function call interrupts\n"
        "TLB:         10         12   TLB shootdowns\n"
        "MCP:          2          2   Machine check polls\n"
        "ERR:          5\n"
        "MIS:          6\n"
    )
    got = read_interrupts(text)
    # TLB shootdowns come in CAL's IPIs, and MCP is a timer's polls (an audit).
    want = {"1 i8042": [9, 0], "24 virtio1-req.0": [100, 200], "LOC": [1000, 2000], "PIN": [3, 4], "CAL": [11, 12]}
    assert got == want


def test_monitor_samples(tmp_path: Path) -> None:
    out = tmp_path / "mon.json"
    p = run_cli("monitor", "--interval", "0.2", "--count", "2", "--per-source", "--json", out)
    assert_ok(p)
    # The tables show beside a JSON file, as run's summary does (they went silent).
    assert "interrupts" in p.stdout, p.stdout
    doc = json.loads(out.read_text())
    assert len(doc["series"]["interrupts_per_s"]["v"]) == 2
    assert all(0 <= v <= 1 for k, s in doc["series"].items() if k.endswith("hardirq_share") for v in s["v"])
    assert any(k.startswith("source.") for k in doc["series"])


class DiskWriter:
    """O_DIRECT writes to a file on a disk, in a loop on a thread, so that the
    disk's completion interrupts keep coming for as long as it runs. Started
    before `record` and stopped after it returns: the whole recording window
    has I/O in it, however late the recording starts or slow the machine is."""

    def __init__(self, path: Path, blocks: int = 256, bs: int = 4096) -> None:
        self.path, self.blocks, self.bs = path, blocks, bs
        self.writes = 0
        self.error: OSError | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        buf = mmap.mmap(-1, self.bs)  # page-aligned, as O_DIRECT needs
        buf.write(b"\xa5" * self.bs)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_DIRECT, 0o600)
        except OSError as e:
            self.error = e
            return
        try:
            while not self._stop.is_set():
                os.pwrite(fd, buf, (self.writes % self.blocks) * self.bs)
                self.writes += 1
        except OSError as e:
            self.error = e
        finally:
            os.close(fd)

    def __enter__(self) -> DiskWriter:
        self._thread.start()
        # Only go on once the device has completed writes: a path that cannot
        # take direct I/O says so here, not as an empty recording later.
        deadline = time.monotonic() + 30
        while self.writes < 20 and self.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def disk_irqs(path: Path) -> dict[int, str]:
    """The MSI/MSI-X interrupts of the PCI device behind the block device that
    holds `path` (a partition's parent disk included), by IRQ number, named
    as /proc/interrupts names them: e.g. {36: "virtio1-req.0"} or nvme0q1...

    Read from sysfs (/sys/dev/block/MAJ:MIN, up to the device with msi_irqs/),
    so the test needs no device name of this machine."""
    st = os.stat(path)
    node = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not node.exists():
        return {}
    d = node.resolve()
    while d != d.parent and not (d / "msi_irqs").is_dir():
        d = d.parent
    if not (d / "msi_irqs").is_dir():
        return {}
    numbers = {int(p.name) for p in (d / "msi_irqs").iterdir() if p.name.isdigit()}
    names: dict[int, str] = {}
    for line in Path("/proc/interrupts").read_text().splitlines()[1:]:
        head, _, rest = line.partition(":")
        if head.strip().isdigit() and int(head) in numbers:
            names[int(head)] = rest.split()[-1]
    return names


def direct_io_dir(tmp: Path) -> tuple[Path, dict[int, str]] | None:
    """A directory on a PCI disk that takes O_DIRECT: the test's temp dir, or
    the checkout's (when /tmp is a tmpfs), or /var/tmp."""
    for d in (tmp, Path(__file__).resolve().parent, Path("/var/tmp")):
        irqs = disk_irqs(d) if d.is_dir() else {}
        if irqs and os.access(d, os.W_OK):
            return d, irqs
    return None


def proc_interrupt_counts(text: str) -> dict[str, int]:
    """Per name, the sum over CPUs of a /proc/interrupts snapshot."""
    lines = text.splitlines()
    ncpu = len(lines[0].split())
    out: dict[str, int] = {}
    for line in lines[1:]:
        head, _, rest = line.partition(":")
        if not head.strip().isdigit():
            continue
        f = rest.split()
        out[f[-1]] = sum(int(x) for x in f[:ncpu] if x.isdigit())
    return out


@dataclass
class Recording:
    trace: Path
    disk: str  # the /proc/interrupts name of the disk queue that took the writes
    writes: int


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    if not TRACEFS_OK:
        pytest.skip("recording needs root and tracefs (/sys/kernel/tracing)")
    d = tmp_path_factory.mktemp("rec")
    found = direct_io_dir(d)
    if found is None:
        pytest.skip(f"no directory here is on a PCI disk with MSI interrupts ({d}, the checkout, /var/tmp)")
    io_dir, irqs = found
    trace = d / "trace.parquet"
    target = io_dir / f".irqlab-test-direct-{os.getpid()}.bin"
    try:
        with DiskWriter(target) as w:
            assert w.error is None, f"O_DIRECT writes to {target} failed: {w.error}"
            before = w.writes
            p = run_cli("record", "--duration", "2", "--out", trace)
            during = w.writes - before
        assert w.error is None, f"O_DIRECT writes to {target} failed: {w.error}"
    finally:
        target.unlink(missing_ok=True)
    assert_ok(p)
    assert during > 0
    # The disk queue that completed the writes: the one of the device's
    # vectors with the most interrupts in the window (a config vector has none).
    table = pq.read_table(trace)
    counts = entries_by_name(table)
    disk = max(irqs.values(), key=lambda n: counts.get(n, 0))
    return Recording(trace, disk, during)


def entries_by_name(table: pa.Table) -> dict[str, int]:
    counts: dict[str, int] = {}
    for r in table.select(["kind", "event", "name"]).to_pylist():
        if r["kind"] == "irq" and r["event"] == "entry":
            counts[r["name"]] = counts.get(r["name"], 0) + 1
    return counts


def test_recording_holds_device_interrupts(recording: Recording) -> None:
    table = pq.read_table(recording.trace)
    assert {"time", "cpu", "irq", "name", "event", "duration"} <= set(table.column_names)
    n = entries_by_name(table).get(recording.disk, 0)
    # Writes ran through the whole window, each a completion interrupt or a
    # share of one (virtio and NVMe may complete several per interrupt).
    assert n >= 50, (recording.disk, n, recording.writes)
    meta = table.schema.metadata
    snaps = json.loads(meta[b"irqlab.snapshots"])
    assert {"interrupts_before", "interrupts_after", "stat_after"} <= set(snaps)
    # The snapshots bracket the tracing window, so the trace can hold no more
    # of the disk's interrupts than /proc/interrupts counted between them.
    delta = (
        proc_interrupt_counts(snaps["interrupts_after"])[recording.disk]
        - proc_interrupt_counts(snaps["interrupts_before"])[recording.disk]
    )
    assert 0 < n <= delta, (n, delta)
    # ... and no fewer than the interrupts of the window (tracing starts right
    # after the first snapshot and stops right before the second), less what
    # came while the recorder was descheduled between a snapshot and the switch
    # (`untraced_ns`, tiny unless the machine is loaded: a review saw how a
    # loaded CI host could fail a flat 0.9).
    untraced = snaps["untraced_ns"] / 2e9
    assert 0 <= untraced < 1, snaps["untraced_ns"]
    assert n >= (0.9 - untraced) * delta, (n, delta, untraced)
    rows = table.to_pylist()
    exits = [r for r in rows if r["event"] == "exit" and r["name"] == recording.disk and r["duration"] is not None]
    assert exits and all(0 <= r["duration"] < 1e9 for r in exits)
    # Times to the ns where the kernel has the raw format (every kernel with
    # instances): one of a few hundred events on a whole µs would be a chance.
    if snaps["time_resolution_ns"] == 1:
        assert sum(r["time"] % 1000 != 0 for r in rows) > len(rows) // 2, rows[:5]
    else:
        assert all(r["time"] % 1000 == 0 for r in rows)
    # The recording's private instance is gone: the host's tracing is as it was.
    # (Only its own: another `irqlab record` may be running beside this test.)
    assert snaps["instance"].startswith("irqlab-")
    assert not (Path("/sys/kernel/tracing/instances") / snaps["instance"]).exists()


def test_replay_under_two_policies(recording: Recording, tmp_path: Path) -> None:
    name = recording.disk
    n = entries_by_name(pq.read_table(recording.trace))[name]
    scen = tmp_path / "replay.toml"
    scen.write_text(
        f'name = "replay"\nduration = "3s"\n[platform]\ncpus = 2\n[cpu]\nirq_entry = "300ns"\n'
        f'[[source]]\nname = "dev"\nreplay = "{name}"\nrate = 0\ncpus = [1]\nhandler = "3us"\n'
    )

    def go(*sets: str) -> dict:
        out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
        args = ["replay", recording.trace, "--scenario", scen, "--json", out]
        for s in sets:
            args += ["--set", s]
        assert_ok(run_cli(*args))
        return json.loads(out.read_text())

    plain = go()
    gsim = go("gsim.delay_us=2000")
    assert plain["metrics"][f"replay.{name}.recorded"] == n
    assert plain["metrics"]["msi_writes"] == n  # every recorded interrupt went through the model
    # Moderation holds interrupts back: later, never more handler runs, nothing lost.
    assert gsim["histograms"]["irq_latency"]["mean"] > plain["histograms"]["irq_latency"]["mean"]
    assert gsim["metrics"]["interrupts"] <= plain["metrics"]["interrupts"]
    m = gsim["metrics"]
    # GSIM's own timer interrupts are interrupts too, but not the device's.
    timers = round(m["source.gsim.interrupts_per_s"] * m["sim_s"])
    assert m["interrupts"] - timers + m["irq_merged"] + m["msi_merged_in_pba"] == n
    assert gsim["metrics"]["gsim.masked_while_disabled"] > 0
    assert go() == plain  # deterministic


def write_foreign(path: Path) -> None:
    pq.write_table(pa.table({"a": [1, 2], "b": ["x", "y"]}), path)


@pytest.mark.parametrize(
    "make,needles",
    [
        (lambda p: p.write_bytes(os.urandom(2000)), ["not a readable Parquet file"]),
        (write_foreign, ["not an irqlab trace"]),
        (lambda p: None, ["no such trace file"]),
        (lambda p: p.mkdir(), ["is a directory", "Parquet trace file"]),
        (lambda p: os.mkfifo(p), ["not a regular file", "Parquet trace file"]),
    ],
)
def test_replay_bad_traces(make, needles: list[str], tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    make(trace)
    out = tmp_path / "r.json"
    scen = irqlab.SCENARIOS_DIR / "examples" / "replay-disk.toml"
    assert_user_error(run_cli("replay", trace, "--scenario", scen, "--json", out), *needles)
    assert not out.exists()


BUNDLED = irqlab.SCENARIOS_DIR / "traces" / "virtio-disk.parquet"  # 3,724 completions of virtio1-req.0 in 2 s
REPLAY_DISK = irqlab.SCENARIOS_DIR / "examples" / "replay-disk.toml"


def test_replay_says_what_the_scenarios_window_leaves_out() -> None:
    """A warm-up that swallows the trace reported 0 interrupts and said nothing."""
    p = run_cli(
        "replay", BUNDLED, "--scenario", REPLAY_DISK, "--set", "duration=2s", "--set", "warmup=1s", "--json", "-"
    )
    assert_ok(p)
    assert "warning: 3,724 of 3,724 recorded arrivals of virtio1-req.0 fall in the warm-up" in p.stderr
    assert json.loads(p.stdout)["metrics"]["interrupts"] == 0
    p = run_cli("replay", BUNDLED, "--scenario", REPLAY_DISK, "--set", "duration=0.1s", "--json", "-")
    assert_ok(p)
    assert "recorded arrivals of virtio1-req.0 come after the scenario's duration (0.1 s)" in p.stderr
    p = run_cli("replay", BUNDLED, "--scenario", REPLAY_DISK, "--json", "-")
    assert_ok(p)
    assert "warning" not in p.stderr
    # Longer than the recording, the rates count silent time after it (an audit:
    # the README's example read 1,241/s for a trace of 1,862/s).
    p = run_cli("replay", BUNDLED, "--scenario", REPLAY_DISK, "--set", "duration=3s", "--json", "-")
    assert_ok(p)
    assert "was recorded for 2 s and the scenario runs 3 s" in p.stderr and 'duration = "2s"' in p.stderr
    assert (
        abs(
            json.loads(run_cli("replay", BUNDLED, "--scenario", REPLAY_DISK, "--json", "-").stdout)["metrics"][
                "interrupts_per_s"
            ]
            - 1862
        )
        < 2
    )


def test_a_replay_warns_of_events_the_recording_lost_and_finds_damaged_pages(tmp_path: Path) -> None:
    # Lost events made a silent gap, and flipped bytes inside the file replayed
    # with exit 0 (an audit): record writes page checksums, replay checks them.
    t = pq.read_table(BUNDLED)
    meta = dict(t.schema.metadata)
    snaps = json.loads(meta[b"irqlab.snapshots"])
    snaps["lost_events"] = {"cpu1": 250}
    meta[b"irqlab.snapshots"] = json.dumps(snaps).encode()
    lost = tmp_path / "lost.parquet"
    pq.write_table(t.replace_schema_metadata(meta), lost)
    p = run_cli("replay", lost, "--scenario", REPLAY_DISK, "--json", "-")
    assert_ok(p)
    assert "the recording lost 250 events (cpu1" in p.stderr
    checked = tmp_path / "checked.parquet"
    pq.write_table(t, checked, write_page_checksum=True, compression="none")
    data = bytearray(checked.read_bytes())
    mid = len(data) // 3  # inside the column chunks, away from the footer
    data[mid : mid + 64] = bytes(b ^ 0xFF for b in data[mid : mid + 64])
    checked.write_bytes(bytes(data))
    p = run_cli("replay", checked, "--scenario", REPLAY_DISK, "--json", "-")
    assert_user_error(p, "not a readable Parquet file")


def test_a_replay_counts_the_rows_it_skips_and_names_a_trace_without_entries(tmp_path: Path) -> None:
    """Rows without a time were dropped without a word, and a trace with no
    interrupt entry said "the trace has: no interrupts" (a review)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(BUNDLED)
    times = table["time"].to_pylist()
    holed = table.set_column(
        table.column_names.index("time"), "time", pa.array([None] * 3 + times[3:], table.schema.field("time").type)
    )
    pq.write_table(holed, tmp_path / "holed.parquet")
    p = run_cli("replay", tmp_path / "holed.parquet", "--scenario", REPLAY_DISK, "--json", "-")
    assert_ok(p)
    assert f"warning: 3 of {table.num_rows:,} rows of {tmp_path / 'holed.parquet'} have no time or no event" in p.stderr
    bogus = table.set_column(table.column_names.index("event"), "event", pa.array(["bogus"] * table.num_rows))
    pq.write_table(bogus, tmp_path / "bogus.parquet")
    p = run_cli("replay", tmp_path / "bogus.parquet", "--scenario", REPLAY_DISK)
    assert_user_error(p, 'no row has event = "entry"', "its events: bogus")
    # No time anywhere: it said no row had event = "entry", then listed "entry" among the events.
    timeless = table.set_column(
        table.column_names.index("time"), "time", pa.array([None] * table.num_rows, table.schema.field("time").type)
    )
    pq.write_table(timeless, tmp_path / "timeless.parquet")
    entries = table["event"].to_pylist().count("entry")
    p = run_cli("replay", tmp_path / "timeless.parquet", "--scenario", REPLAY_DISK)
    assert_user_error(p, f"none of its {entries:,} interrupt entries", "has a time", "expected")


def test_a_replay_records_its_provenance_and_what_set_from_measured(tmp_path: Path) -> None:
    """replay's JSON had no provenance, though real-hosts.md says --set-from goes there."""
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"metrics": {"ns_per_call": 900.0}}))
    args = ["--set-from", f"{m}:ns_per_call=source.0.handler", "--set", "cpu.irq_entry=300ns", "--json", "-"]
    p = run_cli("replay", BUNDLED, "--scenario", REPLAY_DISK, *args)
    assert_ok(p)
    prov = json.loads(p.stdout)["provenance"]
    assert prov["commit"] and prov["overrides"][-1] == "cpu.irq_entry=300ns"
    assert prov["parameters"]["source.0.handler"] == f"measured: {m}:ns_per_call"
    assert prov["parameters"]["cpu.irq_entry"] == "set"
    assert prov["scenario"]["source"][0]["replay"] == "virtio1-req.0"


def test_a_replay_number_is_a_device_irq_not_a_system_vector(tmp_path: Path) -> None:
    """Vector 236 is local_timer's on x86; a device on IRQ 236 must take only its own arrivals."""
    t = pq.read_table(BUNDLED)
    irqs = [
        236 if n == "virtio1-req.0" else i for n, i in zip(t.column("name").to_pylist(), t.column("irq").to_pylist())
    ]
    clash = tmp_path / "clash.parquet"
    pq.write_table(t.set_column(t.column_names.index("irq"), "irq", pa.array(irqs, pa.int32())), clash)
    p = run_cli("replay", clash, "--scenario", REPLAY_DISK, "--set", 'source.0.replay="236"', "--json", "-")
    assert_ok(p)
    m = json.loads(p.stdout)["metrics"]
    assert m["replay.236.recorded"] == 3724 and m["msi_writes"] == 3724


def test_replay_with_no_matching_source(recording: Recording, tmp_path: Path) -> None:
    scen = irqlab.SCENARIOS_DIR / "examples" / "replay-disk.toml"
    out = tmp_path / "r.json"
    assert_user_error(
        run_cli("replay", recording.trace, "--scenario", scen, "--set", "source.0.replay=nvme9q9", "--json", out),
        "no recorded interrupt matches",
        "nvme9q9",
    )
    assert not out.exists()


@pytest.mark.parametrize(
    "args,needles",
    [
        (["measure", "nothing"], ["measure nothing", "unknown measurement", "syscall"]),
        (["measure", "syscall", "--runs", "0"], ["--runs 0"]),
        # Options a measurement does not read were ignored without a word (a review).
        (["measure", "syscall", "--tasks", "4"], ["measure syscall", "--tasks is not used"]),
        (["measure", "pagefault", "--runs", "3"], ["measure pagefault", "--runs is not used"]),
        (["record", "--duration", "0", "--out", "x.parquet"], ["--duration 0"]),
        (["monitor", "--json", "x.json"], ["--json needs --count"]),
        (
            [
                "run",
                irqlab.SCENARIOS_DIR / "examples" / "md1-queue.toml",
                "--set-from",
                "nofile.json:ns_per_call=cpu.irq_entry",
            ],
            ["--set-from nofile.json"],
        ),
    ],
)
def test_host_bad_input(args: list, needles: list[str], tmp_path: Path) -> None:
    assert_user_error(run_cli(*args, cwd=tmp_path), *needles)
    assert not (tmp_path / "x.parquet").exists() and not (tmp_path / "x.json").exists()


def test_measured_cost_sets_a_scenario_parameter(tmp_path: Path) -> None:
    measure("syscall", "--calls", "100000", "--runs", "1", tmp=tmp_path)
    fig = irqlab.SCENARIOS_DIR / "figures" / "m1-gettid.toml"
    bad = tmp_path / "m0.json"
    assert_user_error(run_cli("run", fig, "--set-from", f"{bad}:nope=task.0.body"), "no metric 'nope'")
    # A measured whole call (167 ns, fixed here so that the check does not depend
    # on this machine) put on the body is the loop's cost, not 167 ns plus the
    # figure's modelled entry, exit and user work (98.4 ns): it sets per_op.
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"metrics": {"ns_per_call": 167.0, "ns_per_fault": 60.0}}))
    out = tmp_path / "r.json"
    assert_ok(run_cli("run", fig, "--set-from", f"{m}:ns_per_call=task.0.body", "--json", out))
    r = json.loads(out.read_text())
    assert r["metrics"]["task.gettid.ns_per_op"] == pytest.approx(167.0, rel=1e-4)
    assert r["provenance"]["parameters"]["task.0.per_op"] == f"measured: {m}:ns_per_call"
    # The fastest or slowest run is a whole pass too (a review: ns_per_call_min
    # went on the body, and the model added its entry and exit on top).
    fastest = tmp_path / "fastest.json"
    fastest.write_text(json.dumps({"metrics": {"ns_per_call_min": 167.0}}))
    assert_ok(run_cli("run", fig, "--set-from", f"{fastest}:ns_per_call_min=task.0.body", "--json", out))
    assert json.loads(out.read_text())["metrics"]["task.gettid.ns_per_op"] == pytest.approx(167.0, rel=1e-4)
    # Less than what the model puts around the body: one line naming the key.
    assert_user_error(
        run_cli("run", fig, "--set-from", f"{m}:ns_per_fault=task.0.body"),
        "task[0].per_op",
        "nothing is left for the body",
    )
    # A --set of what the measurement sets (or of the body its whole pass replaces)
    # would be overridden without a word: the pair is refused.
    for s in ("task.0.body=100ns", "task.0.per_op=100ns"):
        p = run_cli("run", fig, "--set", s, "--set-from", f"{m}:ns_per_call=task.0.body")
        assert_user_error(p, f"--set {s}", "both set task.0.per_op", "expected one of them")
    p = run_cli("run", fig, "--set", "task.0.work=1ns", "--set-from", f"{m}:ns_per_call=task.0.body", "--json", out)
    assert_ok(p)


def test_a_measured_hosts_idle_states_set_the_scenarios(tmp_path: Path) -> None:
    """--set-from FILE:host.cpuidle=cpu.idle_state: the states sysfs showed where
    the measurement ran, less the disabled ones, with their exit latency and residency."""
    states = [
        {"name": "POLL", "latency_us": 0, "residency_us": 0, "disabled": False},
        {"name": "C1", "latency_us": 2, "residency_us": 2, "disabled": False},
        {"name": "C1E", "latency_us": 10, "residency_us": 20, "disabled": True},
        {"name": "C6 deep", "latency_us": 133, "residency_us": 600, "disabled": False},
    ]
    m = tmp_path / "m.json"
    m.write_text(json.dumps({"metrics": {}, "host": {"cpuidle": {"driver": "intel_idle", "states": states}}}))
    fig = irqlab.SCENARIOS_DIR / "examples" / "md1-queue.toml"
    out = tmp_path / "r.json"
    assert_ok(run_cli("run", fig, "--set-from", f"{m}:host.cpuidle=cpu.idle_state", "--json", out))
    r = json.loads(out.read_text())
    assert sorted(k for k in r["metrics"] if k.startswith("cpuidle.") and k.endswith("wakes_per_s")) == [
        "cpuidle.C1.wakes_per_s",
        "cpuidle.C6_deep.wakes_per_s",
        "cpuidle.POLL.wakes_per_s",
    ]
    params = r["provenance"]["parameters"]
    assert params["cpu.idle_state.2.exit"] == params["cpu.idle_state.0.residency"] == f"measured: {m}:host.cpuidle"
    # md1-queue's CPU idles a few µs between interrupts: C1's exit, never C6's.
    assert 0 < r["metrics"]["cpuidle.exit_mean_ns"] <= 2000
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps({"metrics": {"ns_per_call": 1.0}}))
    assert_user_error(run_cli("run", fig, "--set-from", f"{bare}:host.cpuidle=cpu.idle_state"), "no host.cpuidle")
    off = tmp_path / "off.json"
    off.write_text(json.dumps({"host": {"cpuidle": {"states": [dict(states[0], disabled=True)]}}}))
    assert_user_error(run_cli("run", fig, "--set-from", f"{off}:host.cpuidle=cpu.idle_state"), "no enabled state")


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # gone meanwhile
        return b""


@pytest.mark.skipif(
    not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(), reason="needs /proc children"
)
@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_measure_task_that_dies_is_one_line_at_once(sig: signal.Signals) -> None:
    """A task killed (SIGKILL, the OOM killer) left the parent waiting a minute
    for its result, then a traceback (queue.Empty). And a task's loop runs in
    Rust, which ran no Python handler until it returned: with the CLI's SIGTERM
    handler inherited by fork, a SIGTERMed task kept running its 60 s and
    holding the command's stderr (a CI run waited a minute on a terminated
    measure's output)."""
    p = start_cli("measure", "sched_yield", "--tasks", "2", "--seconds", "60", "--intervals", "1", "--warmup", "0")
    try:
        tasks = _started_tasks(p, 2)
        os.kill(tasks[0], sig)
        # Not a benchmark: a bound far above the milliseconds this takes, far below the 60 s loop.
        _, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 2, err
    [line] = err.strip().splitlines()
    assert line.startswith("error: measure sched_yield: task ") and f"died (killed by signal {int(sig)})" in line, err
    alive = [t for t in tasks if Path(f"/proc/{t}").exists() and b"zombie" not in _status(t)]
    assert alive == [], f"tasks left running: {alive}"


def test_a_kernel_without_irq_time_accounting_shows_no_hardirq_share() -> None:
    """Without CONFIG_IRQ_TIME_ACCOUNTING /proc/stat's irq column is 0 for good;
    monitor showed that as 0.0 % hardirq on every CPU."""
    from irqlab.host import monitor as hmon

    off = "cpu  100 0 50 1000 5 0 3 0 0 0\ncpu0 100 0 50 1000 5 0 3 0 0 0\n"
    on = "cpu  100 0 50 1000 5 7 3 0 0 0\ncpu0 100 0 50 1000 5 7 3 0 0 0\n"
    assert not hmon.irq_time_accounted(off) and hmon.irq_time_accounted(on)
    a = hmon.Snapshot(0.0, {}, [0], [100])
    b = hmon.Snapshot(1.0, {}, [10], [200])
    assert hmon.rates(a, b)["hardirq_share"] == [0.1]
    assert hmon.rates(a, b, accounted=False)["hardirq_share"] == [None]


def test_lost_events_are_read_from_each_cpus_ring_buffer_stats(tmp_path: Path) -> None:
    """A busy host overflows the 32 MiB per-CPU buffer: the oldest events are
    overwritten, and record must say so (it read no overrun counter)."""
    from irqlab.host.record import _lost

    for cpu, overrun, dropped in ((0, 0, 0), (1, 1234, 0), (2, 5, 6)):
        d = tmp_path / "per_cpu" / f"cpu{cpu}"
        d.mkdir(parents=True)
        (d / "stats").write_text(f"entries: 10\noverrun: {overrun}\ncommit overrun: 0\ndropped events: {dropped}\n")
    assert _lost(tmp_path) == {"cpu1": 1234, "cpu2": 11}


@pytest.mark.skipif(not TRACEFS_OK, reason="recording needs root and tracefs (/sys/kernel/tracing)")
def test_overlapping_recordings_both_succeed_and_leave_tracing_as_it_was(tmp_path: Path) -> None:
    """The first of two overlapping recorders, ending first, unmounted tracefs
    under the second (it mounted it): the second died with a traceback and its
    instance was left recording in the kernel."""
    tracefs = Path("/sys/kernel/tracing")
    mounted_before = (tracefs / "instances").is_dir()
    first = start_cli("record", "--duration", "1", "--out", tmp_path / "a.parquet")
    try:
        # The second starts once the first's instance exists (so it finds tracefs mounted).
        mine = tracefs / "instances" / f"irqlab-{first.pid}"
        for _ in range(600):
            if mine.is_dir() or first.poll() is not None:
                break
            time.sleep(0.05)
        second = run_cli("record", "--duration", "2", "--out", tmp_path / "b.parquet")
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert_ok(second)
    assert (tmp_path / "a.parquet").is_file() and (tmp_path / "b.parquet").is_file()
    assert (tracefs / "instances").is_dir() == mounted_before, "tracefs is mounted as it was"
    if mounted_before:
        assert not [d for d in (tracefs / "instances").iterdir() if d.name.startswith("irqlab-")]


@pytest.mark.skipif(not TRACEFS_OK, reason="recording needs root and tracefs (/sys/kernel/tracing)")
def test_record_removes_what_a_dead_recorder_left_and_cleans_up_on_sighup(tmp_path: Path) -> None:
    """A recorder SIGHUPed (a closed terminal) left its instance tracing at 32 MiB
    a CPU, and nothing removed it later; a killed one's instance is removed by
    the next recording (a review)."""
    tracefs = Path("/sys/kernel/tracing")
    p = start_cli("record", "--duration", "60", "--out", tmp_path / "a.parquet")
    mine = tracefs / "instances" / f"irqlab-{p.pid}"
    try:
        for _ in range(600):
            if mine.is_dir() or p.poll() is not None:
                break
            time.sleep(0.05)
        assert mine.is_dir(), "the recorder started"
        os.kill(p.pid, signal.SIGHUP)
        p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode != 0 and not (tmp_path / "a.parquet").exists()
    assert not mine.exists(), "a SIGHUPed recorder removes its instance"
    # An instance whose recorder is gone (as SIGKILL leaves it): the next recording removes it.
    dead = subprocess.Popen(["true"])
    dead.wait()
    mounted = (tracefs / "instances").is_dir()
    if not mounted:
        subprocess.run(["mount", "-t", "tracefs", "nodev", str(tracefs)], check=True)
    orphan = tracefs / "instances" / f"irqlab-{dead.pid}"
    orphan.mkdir()
    try:
        assert_ok(run_cli("record", "--duration", "0.2", "--out", tmp_path / "b.parquet"))
        assert not orphan.exists()
    finally:
        if orphan.exists():
            orphan.rmdir()
        if not mounted and (tracefs / "instances").is_dir():
            subprocess.run(["umount", str(tracefs)], check=False)


def test_a_handler_name_with_spaces_is_kept_whole() -> None:
    from irqlab.host.record import parse

    line = "  <idle>-0  [001] d.h1.  1234.567890: irq_handler_entry: irq=24 name=PCIe PME"
    [(t, cpu, irq, name, event, kind)] = list(parse(line))
    assert (t, cpu, irq, name, event, kind) == (1234_567_890_000, 1, 24, "PCIe PME", "entry", "irq")


def test_times_come_to_the_ns_from_the_raw_read_and_only_when_it_pairs() -> None:
    from irqlab.host.record import ns_times, parse

    text = (
        "# tracer: nop\n"
        "  <idle>-0  [001] d.h1.  1234.567890: irq_handler_entry: irq=24 name=nvme0q1\n"
        "CPU:0 [LOST 3 EVENTS]\n"
        "  fio-77  [000] d.h1.  1234.567891: irq_handler_exit: irq=24 ret=handled\n"
    )
    raw = "# tracer: nop\n0 1 1234567889601 type: 225\nCPU:0 [LOST 3 EVENTS]\n77 0 1234567891499 type: 224\n"
    ns = ns_times(text, raw)
    assert ns == [1234567889601, 1234567891499]
    assert [r[0] for r in parse(text, ns)] == ns
    # The text rounds to the µs (1234.567890 is ...889,601 ns rounded): a raw
    # time that does not round to its line's, another CPU, or another count of
    # events is not this trace's, and the µs stay.
    assert ns_times(text, raw.replace("1234567889601", "1234567888999")) is None
    assert ns_times(text, raw.replace("0 1 1234567889601", "0 0 1234567889601")) is None
    assert ns_times(text, raw.replace("77 0 1234567891499 type: 224\n", "")) is None
    assert ns_times(text, None) is None
    assert [r[0] for r in parse(text)] == [1234_567_890_000, 1234_567_891_000]


def test_a_task_that_shares_its_cpu_with_another_load_is_warned_about(tmp_path: Path) -> None:
    """A busy neighbour doubled gettid's cost and measure said nothing (a review).
    The loop runs on the first CPU it may use; a hog pinned there takes about half."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    hog = subprocess.Popen([sys.executable, "-c", f"import os\nos.sched_setaffinity(0, {{{cpu}}})\nwhile True: pass"])
    try:
        time.sleep(0.3)
        out = tmp_path / "m.json"
        p = run_cli("measure", "syscall", "--calls", "2000000", "--runs", "3", "--json", out)
    finally:
        hog.kill()
        hog.wait()
    assert_ok(p)
    share = json.loads(out.read_text())["metrics"]["cpu_share_min"]
    assert share < 0.8, share
    assert "warning: a task had its CPU only" in p.stderr


def test_record_refuses_stdout_and_one_duration_limit() -> None:
    assert_user_error(run_cli("record", "--out", "-"), "--out -", "Parquet file")
    assert_user_error(run_cli("record", "--duration", "4000", "--out", "x.parquet"), "at most 3600")


def test_arrivals_match_by_name_or_irq_number_and_skip_incomplete_rows() -> None:
    """The column-wise reading (pyarrow.compute, so millions of events stay out
    of Python): times in ps from the first valid event, sorted; a number matches
    a device IRQ only; a row without a time or an event is skipped; an IRQ
    without a name is known by its number."""
    from irqlab.host.replay import arrivals

    rows = [
        # time ns, irq, name, event, kind
        (1_000, 36, "nvme0q1", "entry", "irq"),
        (1_500, 36, "nvme0q1", "exit", "irq"),
        (3_000, 236, "local_timer", "entry", "vector"),
        (2_000, 36, None, "entry", "irq"),  # no name: "36"
        (None, 36, "nvme0q1", "entry", "irq"),  # no time: skipped
        (2_500, 36, "nvme0q1", None, "irq"),  # no event: skipped
        (4_000, 236, "nvme0q9", "entry", None),  # no kind: a device's
        (500, 1, "other", "exit", "irq"),  # the first valid event: t0
    ]
    cols = list(zip(*rows))
    table = pa.table(
        {
            "time": pa.array(cols[0], pa.int64()),
            "irq": pa.array(cols[1], pa.int32()),
            "name": pa.array(cols[2], pa.string()),
            "event": pa.array(cols[3], pa.string()),
            "kind": pa.array(cols[4], pa.string()),
        }
    )
    got, busiest = arrivals(table, ["nvme0q1", "36", "236", "nosuch"])
    assert got == {"nvme0q1": [500_000], "36": [500_000, 1_500_000], "236": [3_500_000]}
    assert busiest[0] in ("nvme0q1", "36", "local_timer", "nvme0q9") and len(busiest) == 4

    # An empty name is no name, and entries with neither are said to be there
    # (the message read "the trace has: no interrupts" beside 2 entries).
    bare = pa.table(
        {
            "time": pa.array([1_000, 2_000, 3_000], pa.int64()),
            "irq": pa.array([None, None, 7], pa.int32()),
            "name": pa.array(["", None, ""], pa.string()),
            "event": pa.array(["entry"] * 3, pa.string()),
        }
    )
    got, busiest = arrivals(bare, ["7"])
    assert got == {"7": [2_000_000]}
    assert busiest == ["(entries with no name or IRQ number)", "7"]


@pytest.mark.skipif(
    not Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").exists(), reason="needs /proc children"
)
def test_a_terminated_measure_kills_its_tasks_and_exits(tmp_path: Path) -> None:
    """SIGTERM left the parent joining each task for 5 s in turn (hours with
    4,096 tasks), and tasks stuck behind it (a review)."""
    n = 48
    p = start_cli("measure", "sched_yield", "--tasks", n, "--seconds", "60", "--intervals", "1", "--warmup", "0")
    try:
        tasks = _started_tasks(p, n)
    except BaseException:
        p.kill()
        raise
    # Not a benchmark: the old code needed n x 5 s here, past the helper's minute.
    assert_terminates(p)
    alive = [t for t in tasks if Path(f"/proc/{t}").exists() and b"zombie" not in _status(t)]
    assert alive == [], f"tasks left running: {alive}"


def _started_tasks(p: subprocess.Popen[str], n: int) -> list[int]:
    """The PIDs of `irqlab measure`'s n forked tasks, once all have started."""
    deadline = time.monotonic() + 60
    tasks: list[int] = []
    while len(tasks) < n and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
        # The forked tasks run the parent's command line (a resource tracker would not);
        # read it here, not at once: right after Popen it can still be empty.
        me = _cmdline(p.pid)
        tasks = [c for c in _children(p.pid) if me and _cmdline(c) == me]
    assert len(tasks) == n, "the tasks did not start"
    return tasks


def _status(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/status").read_bytes().lower()
    except OSError:
        return b"zombie"  # gone


@pytest.mark.skipif(not TRACEFS_OK, reason="recording needs root and tracefs (/sys/kernel/tracing)")
def test_sigterm_stops_a_recording_as_documented_and_removes_its_instance(tmp_path: Path) -> None:
    """(Here, with every test that records: `make test` runs a test file to a
    worker, and other tests here check that no `irqlab-*` instance is left.)
    `record` said "interrupted" and exit 130 for SIGTERM (its own handler
    turned it into Ctrl-C); it is "terminated", 143, as for every command."""
    out = tmp_path / "t.parquet"
    p = start_cli("record", "--duration", "60", "--out", out)
    instance = Path(f"/sys/kernel/tracing/instances/irqlab-{p.pid}")
    try:
        # Recording once its tracefs instance exists (tracefs mounted by then).
        deadline = time.monotonic() + 60
        while not instance.exists() and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        if p.poll() is not None:
            _, err = p.communicate()
            pytest.skip(f"record could not start here: {err.strip()}")
        assert instance.exists(), "no tracefs instance after 60 s"
    except BaseException:
        p.kill()
        raise
    assert_terminates(p)
    assert not instance.exists() and not out.exists()
    assert not list(tmp_path.iterdir()), "a stopped recording left a file"
