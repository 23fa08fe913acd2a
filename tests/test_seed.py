"""`--seed 0` is a seed like any other: it must never fall back to a default
(a truthiness test such as `seed or 1` turns 0 into 1)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

import irqlab
from helpers import assert_ok, run_cli
from irqlab import whatif as wi

PROFILE = ["--exceptions-per-s", "500000", "--irqs-per-s", "20000", "--cpus", "1,2", "--sdei-dispatch-ns", "1000"]


def test_whatif_honours_seed_zero(tmp_path: Path) -> None:
    docs = {}
    for seed in (0, 1):
        out = tmp_path / f"w{seed}.json"
        assert_ok(run_cli("whatif", *PROFILE, "--seed", seed, "--json", out))
        docs[seed] = json.loads(out.read_text())
    # The interrupt arrivals are random, so the two seeds give other throughputs...
    assert docs[0]["throughput"] != docs[1]["throughput"]
    # ...and --seed 0 gives exactly what the model gives with seed 0.
    base = wi.Base.load(wi.DEFAULT_BASE)
    expected = wi.throughput(base, wi.Profile(500000, 20000, 1000), [1, 2], 0)
    assert docs[0]["throughput"] == expected


def test_run_records_and_uses_seed_zero(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert_ok(run_cli("run", small, "--seed", "0", "--json", out))
    doc = json.loads(out.read_text())
    assert doc["seed"] == 0
    lib, _ = irqlab.run(small, seed=0)
    assert doc["metrics"] == lib["metrics"]
    own, _ = irqlab.run(small)  # the scenario's own seed (42)
    assert own["seed"] == 42 and own["metrics"] != doc["metrics"]


def test_sweep_runs_seed_zero(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.parquet"
    assert_ok(run_cli("sweep", small, "--seed", "0", "--grid", "source.0.rate=100k/s", "--out", out))
    table = pq.read_table(out)
    assert table.column("seed").to_pylist() == [0]
    lib, _ = irqlab.run(small, ["source.0.rate=100k/s"], seed=0)
    assert table.column("interrupts").to_pylist() == [lib["metrics"]["interrupts"]]
