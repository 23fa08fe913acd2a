"""`irqlab sweep`: grid order, column types, and the same table whatever the
number of workers or the backend."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import assert_ok, run_cli

GRID = ["--grid", "platform.cpus=2,4", "--grid", "source.0.rate=50k/s,100k/s,200k/s"]


def sweep(small, out, *extra):
    p = run_cli("sweep", small, *GRID, "--out", out, *extra)
    assert_ok(p)
    return pq.read_table(out)


@pytest.fixture(scope="module")
def one_worker(small, tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep") / "w1.parquet"
    return out, sweep(small, out, "--workers", "1")


def test_rows_follow_the_grid_with_typed_columns(one_worker):
    _, t = one_worker
    assert t.num_rows == 6
    expected = list(itertools.product(["2", "4"], ["50k/s", "100k/s", "200k/s"]))
    assert list(zip(t.column("platform.cpus").to_pylist(), t.column("source.0.rate").to_pylist())) == expected
    assert t.schema.field("platform.cpus").type == pa.string()
    assert t.schema.field("seed").type == pa.uint64()
    assert set(t.column("seed").to_pylist()) == {42}
    # Bookkeeping: one replication, the grid point's index, its run key (resume).
    assert t.column("replication").to_pylist() == [0] * 6
    assert t.column("point").to_pylist() == list(range(6))
    assert len(set(t.column("point_key").to_pylist())) == 6
    for m in ("events", "interrupts", "msi_writes", "interrupts_per_s", "sim_s"):
        assert t.schema.field(m).type == pa.float64(), m
    # The rate axis really reached the model: more offered load, more interrupts.
    irqs = t.column("interrupts").to_pylist()
    for cpus in range(2):
        row = irqs[cpus * 3 : cpus * 3 + 3]
        assert row[0] < row[1] < row[2], row
    assert t.schema.metadata[b"irqlab.scenario"] == b"small"


def test_two_workers_give_the_same_table_and_bytes(one_worker, small, tmp_path):
    out1, t1 = one_worker
    out2 = tmp_path / "w2.parquet"
    t2 = sweep(small, out2, "--workers", "2")
    assert t1.equals(t2, check_metadata=True)
    assert out1.read_bytes() == out2.read_bytes()


def test_a_seed_axis_gives_replicates(small, tmp_path):
    out = tmp_path / "seeds.parquet"
    p = run_cli("sweep", small, "--grid", "seed=1,2,3", "--out", out)
    assert_ok(p)
    t = pq.read_table(out)
    assert t.column_names[0] == "seed"
    assert t.column("seed").to_pylist() == [1, 2, 3]
    assert len(set(t.column("interrupts").to_pylist())) > 1


def test_set_applies_to_every_point(small, tmp_path):
    out = tmp_path / "s.parquet"
    assert_ok(run_cli("sweep", small, "--grid", "seed=1,2", "--set", "source.0.rate=0", "--out", out))
    assert pq.read_table(out).column("interrupts").to_pylist() == [0.0, 0.0]


#: Set in the environment of the sweeps these tests start, so that every process
#: their clusters spawn (which inherit it) can be told from any other on the machine.
CLUSTER_MARK = "IRQLAB_TEST_CLUSTER"


def _cluster_pids(mark: str) -> set[int]:
    """Processes of a local Ray or Dask cluster that a sweep of this test started
    (its environment holds `CLUSTER_MARK=mark`) and left running."""
    names = ("raylet", "gcs_server", "ray::", "dask-worker", "dask-scheduler", "default_worker.py")
    tag = f"{CLUSTER_MARK}={mark}".encode()
    pids = set()
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                if any(n in cmd for n in names) and tag in (d / "environ").read_bytes().split(b"\0"):
                    pids.add(int(d.name))
            except OSError:
                continue
    return pids


@pytest.fixture
def no_cluster_left(monkeypatch):
    """The cluster a backend starts is gone when its sweep ends: waited for
    (generously: Ray's processes take a moment to exit), then killed and failed.
    Only the test's own cluster is looked for: a Ray or Dask cluster of the user's
    on the same machine is not touched."""
    mark = f"{os.getpid()}-{time.monotonic_ns()}"
    monkeypatch.setenv(CLUSTER_MARK, mark)
    yield
    deadline = time.monotonic() + 60
    left = _cluster_pids(mark)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _cluster_pids(mark)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"cluster processes outlived the sweep: {sorted(left)}"


@pytest.mark.parametrize("backend", ["dask", "ray"])
@pytest.mark.parametrize("workers", ["1", "2"])
def test_cluster_backends_match_local(one_worker, small, tmp_path, backend, workers, no_cluster_left):
    """The same sweep gives the same table with local, Dask and Ray, with 1 or 2
    workers (issue 17), whatever batches the points went out in."""
    _, t1 = one_worker
    t2 = sweep(small, tmp_path / f"{backend}.parquet", "--backend", backend, "--workers", workers)
    assert t1.equals(t2, check_metadata=True)


def test_batches_grow_to_about_a_second_and_stay_balanced():
    from irqlab.sweep_cluster import Batches

    b = Batches(list(range(1000)), workers=2, target_s=1.0)
    first = [b.next(), b.next()]
    assert first == [[0], [1]], "nothing timed yet: one point per batch"
    for _ in range(2):
        b.record(0.01)
    assert b.next() == list(range(2, 102)), "100 points of 10 ms make a 1 s task"
    for _ in range(100):
        b.record(0.01)
    seen = [0, 1, *range(2, 102)]
    while not b.exhausted():
        batch = b.next()
        # Never more than an equal share of what was left for 2 workers.
        assert 1 <= len(batch) <= max(1, -(-(1000 - len(seen)) // 2)), batch
        seen += batch
    assert seen == list(range(1000)), "every point once, in order"
    slow = Batches(list(range(10)), workers=2)
    slow.record(5.0)
    assert slow.next() == [0], "points longer than a second go alone"


def test_grid_values_may_be_toml_arrays_and_strings():
    from irqlab._util import UserError
    from irqlab.sweep import parse_grid

    axes = parse_grid(["source.0.cpus=[0, 1],[1]", 'name="a,b",c', "seed=3"])
    assert axes == [("source.0.cpus", ["[0, 1]", "[1]"]), ("name", ['"a,b"', "c"]), ("seed", ["3"])]
    with pytest.raises(UserError, match="unbalanced"):
        parse_grid(["source.0.cpus=[0,1"])


def test_array_grid_values_reach_the_model(small, tmp_path):
    out = tmp_path / "cpus.parquet"
    assert_ok(run_cli("sweep", small, "--grid", "source.0.cpus=[0],[0, 1]", "--out", out))
    t = pq.read_table(out)
    assert t.column("source.0.cpus").to_pylist() == ["[0]", "[0, 1]"]
    assert t.column("cpu1.interrupts_per_s").to_pylist()[0] == 0.0
    assert t.column("cpu1.interrupts_per_s").to_pylist()[1] > 0.0


def test_in_flight_keeps_two_batches_per_worker_and_reports_a_crashed_batch_per_point():
    from irqlab.sweep_cluster import _InFlight

    jobs = {i: ("text", "origin", [f"seed={i}"], i, False) for i in range(6)}
    sent: list[list[int]] = []
    seen: list[tuple[int, str, str]] = []

    def submit(batch):
        sent.append([job[3] for job in batch])
        return len(sent) - 1

    flight = _InFlight(jobs, 1, lambda i, status, payload: seen.append((i, status, payload)), submit)
    flight.fill()
    assert sent == [[0], [1]] and len(flight.tasks) == 2, "one worker: two single-point batches out"

    def crash():
        raise RuntimeError("worker died")

    flight.finished(0, crash)
    assert seen == [(0, "crash", "RuntimeError: worker died")]
    flight.finished(1, lambda: [(True, "{}", 0.01)])
    assert seen[-1] == (1, "ok", "{}")
    # Timed at 10 ms a point: the rest go out together (an equal share for one worker).
    assert sent[2:] == [[2], [3, 4, 5]], sent


def test_a_point_with_no_completions_has_no_latency(small, tmp_path):
    """A handler longer than the run completes nothing: its percentiles are null
    (n/a in the summary), not the core's 0 ns, which went into means and plots."""
    out = tmp_path / "empty.parquet"
    p = run_cli("sweep", small, "--grid", "source.0.handler=300ns,10s", "--out", out, "-q")
    assert_ok(p)
    rows = {r["source.0.handler"]: r for r in pq.read_table(out).to_pylist()}
    assert rows["300ns"]["irq_latency.p99"] > 0
    assert rows["10s"]["irq_latency.p99"] is None and rows["10s"]["irq_latency.mean"] is None
    assert "n/a" in p.stdout
