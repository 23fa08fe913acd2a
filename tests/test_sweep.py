"""`irqlab sweep`: grid order, column types, and the same table whatever the
number of workers or the backend."""

from __future__ import annotations

import importlib.util
import itertools

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


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="dask[distributed] not installed")
def test_dask_backend_matches_local(one_worker, small, tmp_path):
    _, t1 = one_worker
    t2 = sweep(small, tmp_path / "dask.parquet", "--backend", "dask", "--workers", "2")
    assert t1.equals(t2, check_metadata=True)


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
