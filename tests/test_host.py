"""Real hosts: measure, record, monitor, replay (issue 6). Measurements are
checked for plausibility and for stability between runs, never for speed."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest

import irqlab
from helpers import assert_ok, assert_user_error, run_cli

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402

TRACEFS_OK = os.geteuid() == 0 and Path("/sys/kernel").is_dir()


def measure(*args: str, tmp: Path) -> dict:
    out = tmp / f"m{len(list(tmp.iterdir()))}.json"
    assert_ok(run_cli("measure", *args, "--json", out))
    return json.loads(out.read_text())


def test_syscall_cost_is_plausible_and_stable(tmp_path: Path) -> None:
    a = measure("syscall", "--calls", "200000", "--runs", "3", tmp=tmp_path)
    b = measure("syscall", "--calls", "200000", "--runs", "3", tmp=tmp_path)
    x, y = a["metrics"]["ns_per_call"], b["metrics"]["ns_per_call"]
    assert 5 < x < 100_000 and 5 < y < 100_000
    assert max(x, y) / min(x, y) < 3, (x, y)
    assert a["host"]["kernel"] and a["host"]["cores"] >= 1 and "boot_options" in a["host"]
    assert set(a) >= {"scenario", "seed", "version", "metrics", "histograms", "series"}


def test_sched_yield_scales_per_task(tmp_path: Path) -> None:
    one = measure("sched_yield", "--tasks", "1", "--seconds", "0.2", "--intervals", "3", "--warmup", "0.1", tmp=tmp_path)
    two = measure("sched_yield", "--tasks", "2", "--seconds", "0.2", "--intervals", "3", "--warmup", "0.1", tmp=tmp_path)
    m1, m2 = one["metrics"], two["metrics"]
    assert 1e4 < m1["ops_per_s"] < 1e9
    assert m2["ops_per_s"] == pytest.approx(2 * m2["ops_per_s_per_task"])
    # Pinned one per CPU: a second task adds throughput (on one CPU it would only share it).
    if (os.cpu_count() or 1) >= 2:
        assert m2["ops_per_s"] > 1.2 * m1["ops_per_s"]
    assert len(two["series"]["ops_per_s"]["v"]) == 3


def test_page_faults_are_plausible(tmp_path: Path) -> None:
    a = measure("pagefault", "--tasks", "1", "--mb", "16", "--seconds", "0.2", "--intervals", "3", "--warmup", "0.1", tmp=tmp_path)
    f = a["metrics"]["faults_per_s"]
    assert 1e4 < f < 1e9
    # Whole mappings: a multiple of the pages per pass, per interval.
    assert all(v * 0.2 % 4096 == 0 for v in a["series"]["faults_per_s"]["v"])


def test_monitor_samples(tmp_path: Path) -> None:
    out = tmp_path / "mon.json"
    assert_ok(run_cli("monitor", "--interval", "0.2", "--count", "2", "--per-source", "--json", out))
    doc = json.loads(out.read_text())
    assert len(doc["series"]["interrupts_per_s"]["v"]) == 2
    assert all(0 <= v <= 1 for k, s in doc["series"].items() if k.endswith("hardirq_share") for v in s["v"])
    assert any(k.startswith("source.") for k in doc["series"])


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not TRACEFS_OK:
        pytest.skip("recording needs root and tracefs")
    d = tmp_path_factory.mktemp("rec")
    trace = d / "trace.parquet"
    target = d / "direct.bin"

    dd: list[subprocess.CompletedProcess[str]] = []

    def disk_io() -> None:
        # O_DIRECT writes go to the device, so its completion interrupts happen now.
        dd.append(subprocess.run(["dd", "if=/dev/zero", f"of={target}", "bs=4k", "count=2000", "oflag=direct"],
                                 capture_output=True, text=True, timeout=60))

    t = threading.Timer(0.3, disk_io)
    t.start()
    p = run_cli("record", "--duration", "2", "--out", trace)
    t.join()
    assert_ok(p)
    if dd and dd[0].returncode != 0:
        pytest.skip(f"no direct I/O possible in {d} (a tmpfs?): {dd[0].stderr.strip()}")
    return trace


def busiest_device(trace: Path) -> tuple[str, int]:
    t = pq.read_table(trace).to_pylist()
    counts: dict[str, int] = {}
    for r in t:
        if r["kind"] == "irq" and r["event"] == "entry":
            counts[r["name"]] = counts.get(r["name"], 0) + 1
    name = max(counts, key=lambda n: counts[n])
    return name, counts[name]


def test_recording_holds_device_interrupts(recording: Path) -> None:
    table = pq.read_table(recording)
    assert {"time", "cpu", "irq", "name", "event", "duration"} <= set(table.column_names)
    name, n = busiest_device(recording)
    assert n >= 50, (name, n)
    rows = table.to_pylist()
    exits = [r for r in rows if r["event"] == "exit" and r["name"] == name and r["duration"] is not None]
    assert exits and all(0 <= r["duration"] < 1e9 for r in exits)
    meta = table.schema.metadata
    snaps = json.loads(meta[b"irqlab.snapshots"])
    assert "interrupts_before" in snaps and "stat_after" in snaps
    # The private instance is gone: the host's tracing is as it was.
    assert not any(p.name.startswith("irqlab-") for p in Path("/sys/kernel/tracing/instances").glob("*")) \
        if Path("/sys/kernel/tracing/instances").is_dir() else True


def test_replay_under_two_policies(recording: Path, tmp_path: Path) -> None:
    name, n = busiest_device(recording)
    scen = tmp_path / "replay.toml"
    scen.write_text(
        f'name = "replay"\nduration = "3s"\n[platform]\ncpus = 2\n[cpu]\nirq_entry = "300ns"\n'
        f'[[source]]\nname = "dev"\nreplay = "{name}"\nrate = 0\ncpus = [1]\nhandler = "3us"\n'
    )

    def go(*sets: str) -> dict:
        out = tmp_path / f"r{len(list(tmp_path.iterdir()))}.json"
        args = ["replay", recording, "--scenario", scen, "--json", out]
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
    assert m["interrupts"] + m["irq_merged"] + m["msi_merged_in_pba"] == n
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
    ],
)
def test_replay_bad_traces(make, needles: list[str], tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    make(trace)
    out = tmp_path / "r.json"
    scen = irqlab.SCENARIOS_DIR / "examples" / "replay-disk.toml"
    assert_user_error(run_cli("replay", trace, "--scenario", scen, "--json", out), *needles)
    assert not out.exists()


def test_replay_with_no_matching_source(recording: Path, tmp_path: Path) -> None:
    scen = irqlab.SCENARIOS_DIR / "examples" / "replay-disk.toml"
    out = tmp_path / "r.json"
    assert_user_error(run_cli("replay", recording, "--scenario", scen, "--set", "source.0.replay=nvme9q9", "--json", out),
                      "no recorded interrupt matches", "nvme9q9")
    assert not out.exists()


@pytest.mark.parametrize(
    "args,needles",
    [
        (["measure", "nothing"], ["measure nothing", "unknown measurement", "syscall"]),
        (["measure", "syscall", "--runs", "0"], ["--runs 0"]),
        (["record", "--duration", "0", "--out", "x.parquet"], ["--duration 0"]),
        (["monitor", "--json", "x.json"], ["--json needs --count"]),
        (["run", irqlab.SCENARIOS_DIR / "examples" / "md1-queue.toml", "--set-from", "nofile.json:ns_per_call=cpu.irq_entry"],
         ["--set-from nofile.json"]),
    ],
)
def test_host_bad_input(args: list, needles: list[str], tmp_path: Path) -> None:
    assert_user_error(run_cli(*args, cwd=tmp_path), *needles)
    assert not (tmp_path / "x.parquet").exists() and not (tmp_path / "x.json").exists()


def test_measured_cost_sets_a_scenario_parameter(tmp_path: Path) -> None:
    m = measure("syscall", "--calls", "100000", "--runs", "1", tmp=tmp_path)
    fig = irqlab.SCENARIOS_DIR / "figures" / "m1-gettid.toml"
    out = tmp_path / "r.json"
    assert_ok(run_cli("run", fig, "--set-from", f"{tmp_path / 'm0.json'}:ns_per_call=task.0.body", "--json", out))
    r = json.loads(out.read_text())
    # The loop now costs the measured call plus the figure's entry, exit and user work.
    assert r["metrics"]["task.gettid.ns_per_op"] == pytest.approx(m["metrics"]["ns_per_call"] + 98.4, rel=1e-3)
    bad = tmp_path / "m0.json"
    assert_user_error(run_cli("run", fig, "--set-from", f"{bad}:nope=task.0.body"), "no metric 'nope'")
