"""`irqlab sweep --out DIR`: a Parquet dataset written as runs end, that a
SIGKILL leaves readable (pyarrow, DuckDB) and `--resume` completes without
losing or repeating a point; replications with common random numbers; retries;
`irqlab query`."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import irqlab.sweep as sweeps
from helpers import assert_ok, assert_user_error, run_cli, start_cli
from irqlab._util import TEMP_MARK
from irqlab.cli import main
from irqlab.sweep_store import Store

# 20 runs of ~0.1 s each (duration 1s): on one worker the sweep is still well
# under way when its first part appears. Two CPU counts, so a later run brings
# columns (cpu2.*, cpu3.*) the first parts do not have.
RATES = ",".join(f"{r}k/s" for r in range(20, 220, 20))
SLOW = ["--set", "duration=1s", "--grid", "platform.cpus=2,4", "--grid", f"source.0.rate={RATES}"]
NPOINTS = 20
REAL_RUN = sweeps.run_point
FAST = ["--grid", "platform.cpus=2,4", "--grid", "source.0.rate=50k/s,100k/s,200k/s"]


def read(path: Path) -> pa.Table:
    """A dataset or file as one table, in grid order, without the schema metadata."""
    return sweeps.sort_rows(pq.read_table(path)).replace_schema_metadata(None)


def manifest(path: Path) -> dict:
    try:
        return json.loads((path / "_manifest.json").read_text())
    except (OSError, ValueError):
        return {}


@pytest.fixture(scope="module")
def uninterrupted(small, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("full") / "full"
    assert_ok(run_cli("sweep", small, *SLOW, "--workers", "4", "--out", out))
    return out


def test_a_dataset_is_parts_and_a_manifest_and_reads_as_one_table(uninterrupted):
    names = sorted(p.name for p in uninterrupted.iterdir())
    assert "_manifest.json" in names
    assert any(n.startswith("part-") and n.endswith(".parquet") for n in names)
    assert not [n for n in names if TEMP_MARK in n]
    doc = manifest(uninterrupted)
    assert doc["format"] == "irqlab.sweep" and doc["version"] == 1 and doc["points"] == NPOINTS
    assert doc["sweep"]["grid"][0] == ["platform.cpus", ["2", "4"]]
    t = read(uninterrupted)
    assert t.num_rows == NPOINTS
    assert sorted(doc["done"]) == sorted(t.column("point_key").to_pylist())
    # Every part has every column, the 4-CPU ones too (the first parts were rewritten).
    for part in uninterrupted.glob("part-*.parquet"):
        assert pq.read_schema(part).names == t.column_names
    assert "cpu3.interrupts_per_s" in t.column_names
    n = duckdb.sql(f"select count(*) from read_parquet('{uninterrupted}/*.parquet')").fetchall()
    assert n == [(NPOINTS,)]


def _kill_when_a_point_is_done(small: Path, out: Path) -> None:
    p = start_cli("sweep", small, *SLOW, "--workers", "1", "--out", out, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not manifest(out).get("done") and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert p.poll() is None, f"the sweep ended before it could be killed: {p.stderr.read() if p.stderr else ''}"
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_a_killed_sweep_reads_and_resumes_losing_and_repeating_nothing(small, tmp_path, uninterrupted):
    out = tmp_path / "killed"
    _kill_when_a_point_is_done(small, out)
    done = manifest(out)["done"]
    assert 1 <= len(done) < NPOINTS

    # What the kill left reads as one table: pyarrow (skipping the manifest and
    # any temp file) and DuckDB see the same rows, each run once.
    t = pq.read_table(out)
    keys = t.column("point_key").to_pylist()
    assert len(keys) == len(set(keys)) and set(done) <= set(keys)
    via_duckdb = duckdb.sql(f"select point_key from read_parquet('{out}/*.parquet')").fetchall()
    assert sorted(k for (k,) in via_duckdb) == sorted(keys)

    # A query of what the kill left says it is part of the sweep (it said
    # nothing for a dataset directory, only for a NAME.parquet).
    q = run_cli("query", "select count(*) from results", out)
    assert_ok(q)
    assert f"holds {len(done)} of its sweep's {NPOINTS} runs" in q.stderr and "--resume" in q.stderr, q.stderr

    p = run_cli("sweep", small, *SLOW, "--workers", "2", "--out", out, "--resume")
    assert_ok(p)
    assert f"({len(keys)} runs resumed)" in p.stdout
    q = run_cli("query", "select count(*) from results", out)
    assert_ok(q)
    assert "holds" not in q.stderr, q.stderr
    resumed = read(out)
    assert resumed.column("point_key").to_pylist() == read(uninterrupted).column("point_key").to_pylist()
    assert len(set(resumed.column("point_key").to_pylist())) == NPOINTS
    assert resumed.equals(read(uninterrupted))
    assert not [f for f in out.iterdir() if TEMP_MARK in f.name]
    # Nothing left to do: a second resume runs nothing and changes nothing.
    parts = sorted(f.name for f in out.glob("part-*.parquet"))
    assert_ok(run_cli("sweep", small, *SLOW, "--out", out, "--resume"))
    assert sorted(f.name for f in out.glob("part-*.parquet")) == parts


def test_a_parquet_file_resumes_from_its_parts_and_merges_to_the_same_bytes(small, tmp_path):
    whole = tmp_path / "whole.parquet"
    assert_ok(run_cli("sweep", small, *FAST, "--workers", "1", "--out", whole))
    assert not (tmp_path / "whole.parquet.parts").exists()
    # An interrupted NAME.parquet sweep: its dataset beside it, missing a part.
    parts = tmp_path / "cut.parquet.parts"
    assert_ok(run_cli("sweep", small, *FAST, "--workers", "1", "--out", parts.with_suffix(".dir")))
    parts.with_suffix(".dir").rename(parts)
    # How many parts the sweep wrote depends on the machine's load (a part at
    # most once a second: on a loaded one all six runs may share one). Its
    # rows are laid out as a sweep that flushed twice leaves them, with the
    # same columns; the second part is then lost to the interruption.
    written = sorted(parts.glob("part-*.parquet"))
    rows = sweeps.sort_rows(pa.concat_tables([pq.read_table(f) for f in written]))
    for f in written:
        f.unlink()
    pq.write_table(rows.slice(0, 4), parts / "part-000001.parquet")
    lost = rows.num_rows - 4
    assert lost == 2
    cut = tmp_path / "cut.parquet"
    # Read before it is finished, it says so: partial results must not pass for the sweep.
    q = run_cli("query", "select count(*) as n from results", cut, "--format", "csv")
    assert_ok(q)
    assert q.stdout.split() == ["n", str(6 - lost)]
    assert q.stderr.startswith("note: ") and "not written yet" in q.stderr and "--resume" in q.stderr, q.stderr
    assert_user_error(run_cli("sweep", small, *FAST, "--out", cut), "unfinished sweep", "--resume")
    p = run_cli("sweep", small, *FAST, "--out", cut, "--resume")
    assert_ok(p)
    assert "(4 runs resumed)" in p.stdout
    assert cut.read_bytes() == whole.read_bytes()
    assert not parts.exists()
    # A finished file resumes to itself.
    assert_ok(run_cli("sweep", small, *FAST, "--out", cut, "--resume"))
    assert cut.read_bytes() == whole.read_bytes()


def test_a_kill_mid_rewrite_or_before_the_manifest_still_reads_and_resumes(small, tmp_path):
    full = tmp_path / "full"
    assert_ok(run_cli("sweep", small, *FAST, "--out", full))
    t = sweeps.sort_rows(pq.read_table(full))
    # The state a kill leaves while older parts are rewritten to a new run's
    # columns: the first part lacks them, the later one has them all; and no
    # manifest yet (a kill between a part's rename and the manifest's).
    out = tmp_path / "cut"
    out.mkdir()
    two = t.filter(pc.equal(t.column("platform.cpus"), "2"))
    narrow = [c for c in t.column_names if not c.startswith(("cpu2.", "cpu3."))]
    pq.write_table(two.select(narrow), out / "part-000001.parquet")
    pq.write_table(t.filter(pc.equal(t.column("platform.cpus"), "4")), out / "part-000002.parquet")
    (out / f".part-000003.parquet{TEMP_MARK}dead").write_bytes(b"half a part")
    assert pq.read_table(out).num_rows == 6
    assert duckdb.sql(f"select count(*) from read_parquet('{out}/*.parquet')").fetchall() == [(6,)]
    p = run_cli("sweep", small, *FAST, "--out", out, "--resume")
    assert_ok(p)
    assert "(6 runs resumed)" in p.stdout
    for part in out.glob("part-*.parquet"):
        assert pq.read_schema(part).names == t.column_names
    assert read(out).equals(read(full))
    assert manifest(out)["done"] == t.column("point_key").to_pylist()
    assert not [f for f in out.iterdir() if TEMP_MARK in f.name]


def test_same_rows_whatever_the_workers_and_the_output_form(small, tmp_path):
    one, four, single = tmp_path / "w1", tmp_path / "w4", tmp_path / "s.parquet"
    assert_ok(run_cli("sweep", small, *FAST, "--workers", "1", "--out", one))
    assert_ok(run_cli("sweep", small, *FAST, "--workers", "4", "--out", four))
    assert_ok(run_cli("sweep", small, *FAST, "--workers", "3", "--out", single))
    assert read(one).equals(read(four))
    assert read(one).equals(read(single))
    assert read(single).column("point").to_pylist() == list(range(6))


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="dask[distributed] not installed")
def test_a_dask_dataset_has_the_local_rows(small, tmp_path):
    local, dask = tmp_path / "local", tmp_path / "dask"
    assert_ok(run_cli("sweep", small, *FAST, "--workers", "2", "--replications", "2", "--out", local))
    assert_ok(
        run_cli("sweep", small, *FAST, "--backend", "dask", "--workers", "2", "--replications", "2", "--out", dask)
    )
    assert read(local).num_rows == 12
    assert read(local).equals(read(dask))


def test_existing_out_needs_resume(small, tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    line = assert_user_error(run_cli("sweep", small, "--grid", "seed=1,2", "--out", d))
    assert line == f"error: --out {d} exists; use --resume or remove it"
    f = tmp_path / "f.parquet"
    f.write_bytes(b"PAR1")
    assert_user_error(run_cli("sweep", small, "--grid", "seed=1,2", "--out", f), "exists", "--resume")
    assert f.read_bytes() == b"PAR1" and (d / "notes.txt").read_text() == "mine"
    # NAME.parquet that is a directory: refused before any run (it was found after the last one).
    pd = tmp_path / "p.parquet"
    pd.mkdir()
    assert_user_error(run_cli("sweep", small, "--grid", "seed=1,2", "--out", pd), "is a directory", "one file")
    assert list(pd.iterdir()) == [] and not (tmp_path / "p.parquet.parts").exists()
    assert_user_error(run_cli("sweep", small, "--grid", "seed=1,2", "--out", d, "--resume"), "not an irqlab sweep")
    # An empty directory is no result: a sweep may write there.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_ok(run_cli("sweep", small, "--grid", "seed=1,2", "--out", empty))
    # --resume with another definition is refused, naming what differs.
    assert_user_error(
        run_cli("sweep", small, "--grid", "seed=1,3", "--out", empty, "--resume"), "another sweep", "--grid"
    )
    assert_user_error(
        run_cli("sweep", small, "--grid", "seed=1,2", "--replications", "2", "--out", empty, "--resume"),
        "--replications",
    )
    assert_user_error(run_cli("sweep", small, "--grid", "seed=1", "--resume"), "--resume needs --out")


def test_an_out_that_is_a_file_or_a_dangling_link_is_refused_before_any_run(small, tmp_path):
    # Both failed only at the first write, after the runs (an audit).
    empty = tmp_path / "afile"
    empty.write_bytes(b"")
    line = assert_user_error(run_cli("sweep", small, "--grid", "seed=1,2", "--out", empty), "is a file", "NAME.parquet")
    assert "cannot write" not in line and empty.read_bytes() == b""
    dangling = tmp_path / "gone"
    dangling.symlink_to(tmp_path / "nowhere")
    assert_user_error(run_cli("sweep", small, "--grid", "seed=1,2", "--out", dangling), "symbolic link to nothing")
    assert not (tmp_path / "nowhere").exists()


def test_a_sweep_extended_with_more_grid_values_runs_only_the_new_points(small, tmp_path):
    full = tmp_path / "full"
    assert_ok(run_cli("sweep", small, *FAST, "--out", full))
    half = ["--grid", "platform.cpus=2,4", "--grid", "source.0.rate=50k/s,200k/s"]
    for out in (tmp_path / "grown", tmp_path / "grown.parquet"):
        assert_ok(run_cli("sweep", small, *half, "--out", out))
        saved = (out / "part-000001.parquet").read_bytes() if out.is_dir() else b""
        p = run_cli("sweep", small, *FAST, "--out", out, "--resume")
        assert_ok(p)
        assert "(4 runs resumed)" in p.stdout
        # The same rows as the whole grid run at once, numbered by the extended grid.
        assert read(out).equals(read(full))
        if not out.is_dir():
            assert not (tmp_path / "grown.parquet.parts").exists()
            continue
        assert manifest(out)["sweep"]["grid"] == manifest(full)["sweep"]["grid"]
        assert manifest(out)["done"] == manifest(full)["done"]
        for part in out.glob("part-*.parquet"):
            assert json.loads(pq.read_schema(part).metadata[b"irqlab.sweep"])["grid"] == manifest(full)["sweep"]["grid"]
        # A kill before an older part was renumbered: it still reads right and resumes.
        (out / "part-000001.parquet").write_bytes(saved)
        p = run_cli("sweep", small, *FAST, "--out", out, "--resume")
        assert_ok(p)
        assert "(6 runs resumed)" in p.stdout
        assert read(out).equals(read(full))
    # Anything but more values on the same axes is another sweep.
    fewer = ["--grid", "platform.cpus=2", "--grid", "source.0.rate=50k/s,100k/s,200k/s,400k/s"]
    line = assert_user_error(run_cli("sweep", small, *fewer, "--out", full, "--resume"), "another sweep")
    assert "only adding values to its axes extends a sweep" in line
    swapped = ["--grid", "source.0.rate=50k/s,100k/s,200k/s", "--grid", "platform.cpus=2,4"]
    assert_user_error(run_cli("sweep", small, *swapped, "--out", full, "--resume"), "another sweep")
    assert read(full).num_rows == 6


def test_replications_share_seeds_across_a_policy_parameter(small, tmp_path):
    out = tmp_path / "r.parquet"
    p = run_cli("sweep", small, "--grid", "source.0.handler=1us,2us", "--replications", "3", "--out", out)
    assert_ok(p)
    t = pq.read_table(out)
    assert t.num_rows == 6
    rows = t.select(["source.0.handler", "replication", "seed", "msi_writes"]).to_pylist()
    by = {(r["source.0.handler"], r["replication"]): r for r in rows}
    seeds = [by["1us", r]["seed"] for r in range(3)]
    assert seeds[0] == 42  # replication 0 runs the scenario's own seed
    assert len(set(seeds)) == 3
    assert seeds == [sweeps.replication_seed(42, r) for r in range(3)]
    for r in range(3):
        # Same seed, and so the same arrivals, whatever the handler cost.
        assert by["1us", r]["seed"] == by["2us", r]["seed"]
        assert by["1us", r]["msi_writes"] == by["2us", r]["msi_writes"]
    # The summary: per grid point, n, the mean and a 95 % Student-t interval.
    assert "interrupts_per_s mean" in p.stdout and "interrupts_per_s ±95% CI" in p.stdout
    assert "2 points x 3 replications" in p.stdout
    # A seed axis is the base seed of its points' replications.
    out2 = tmp_path / "s.parquet"
    p = run_cli("sweep", small, "--grid", "seed=7,8", "--replications", "2", "--out", out2)
    assert_ok(p)
    # The summary names each point by its base seed (the rows' seeds are mixed per replication).
    lines = [ln.split() for ln in p.stdout.splitlines()]
    assert lines[1][:2] == ["seed", "n"], p.stdout
    assert [ln[:2] for ln in lines[3:5]] == [["7", "2"], ["8", "2"]], p.stdout
    assert pq.read_table(out2).column("seed").to_pylist() == [
        7,
        sweeps.replication_seed(7, 1),
        8,
        sweeps.replication_seed(8, 1),
    ]
    assert_user_error(run_cli("sweep", small, "--grid", "seed=1", "--replications", "0"), "--replications")


def test_student_t_interval():
    assert sweeps.t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert sweeps.t_quantile(0.975, 4) == pytest.approx(2.7764, abs=1e-4)
    assert sweeps.t_quantile(0.975, 30) == pytest.approx(2.0423, abs=1e-4)
    mean, half = sweeps.mean_ci([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and half == pytest.approx(3.1824 * 1.2910 / 2, rel=1e-4)
    assert sweeps.mean_ci([5.0]) == (5.0, None)


def test_point_key_is_the_scenario_overrides_and_seed():
    k = sweeps.point_key("a", ["x=1"], 1)
    assert k == sweeps.point_key("a", ["x=1"], 1)
    assert (
        len(
            {k, sweeps.point_key("b", ["x=1"], 1), sweeps.point_key("a", ["x=2"], 1), sweeps.point_key("a", ["x=1"], 2)}
        )
        == 4
    )


def test_query_runs_sql_over_the_results(small, tmp_path):
    out = tmp_path / "q"
    assert_ok(run_cli("sweep", small, *FAST, "--out", out))
    p = run_cli("query", "select count(*) as n from results", out)
    assert_ok(p)
    assert p.stdout.split() == ["n", "─", "6"], p.stdout
    # A seed is shown whole, to be pasted into --seed (it was cut with separators at 80 columns).
    p = run_cli("query", "select 16860738450190168606::ubigint as seed, 1234567 as n from results limit 1", out)
    assert_ok(p)
    assert p.stdout.split()[-2:] == ["16860738450190168606", "1,234,567"], p.stdout
    p = run_cli(
        "query", 'select "platform.cpus", count(*) as n from results group by 1 order by 1', out, "--format", "csv"
    )
    assert_ok(p)
    assert p.stdout == "platform.cpus,n\n2,3\n4,3\n"
    single = tmp_path / "q.parquet"
    assert_ok(run_cli("sweep", small, *FAST, "--out", single))
    assert run_cli("query", "select count(*) from results", single, "--format", "csv").stdout == "count_star()\n6\n"
    assert_user_error(run_cli("query", "selec count(*) from results", out), "query", "syntax error")
    assert_user_error(run_cli("query", "select nope from results", out), "nope")
    assert_user_error(run_cli("query", "select 1", tmp_path / "nothere"), "no such file")
    assert_user_error(run_cli("query", "select 1", out, "--format", "json"), "--format")
    # An empty statement, and a timestamp with a time zone (DuckDB's conversion needs pytz): tracebacks before.
    assert_user_error(run_cli("query", "  ", out), "no SQL given")
    p = run_cli("query", "select timestamptz '2026-01-02 03:04:05+00' as t, count(*) as n from results", out)
    assert_ok(p)
    assert "2026-01-02 03:04:05" in p.stdout and p.stdout.split()[-1] == "6", p.stdout


def _patched_run(monkeypatch, behaviour):
    """Replace the worker function: `behaviour(call_number, overrides)` -> None to run, or raise/return."""
    calls: dict[tuple[str, ...], int] = {}

    def fake(text, origin, overrides, seed, force=False, stop=None):
        key = tuple(overrides)
        calls[key] = calls.get(key, 0) + 1
        got = behaviour(calls[key], overrides)
        return REAL_RUN(text, origin, overrides, seed, force, stop) if got is None else got

    monkeypatch.setattr(sweeps, "run_point", fake)
    monkeypatch.setenv("CI", "true")
    return calls


def _main(*args) -> int:
    with pytest.raises(SystemExit) as ex:
        main([str(a) for a in args])
    return int(ex.value.code or 0)


def test_a_crashed_worker_is_retried_once(monkeypatch, small, tmp_path, capsys):
    def crash_once(n, ov):
        if "source.0.rate=100k/s" in ov and n == 1:
            raise RuntimeError("worker died")
        return None

    calls = _patched_run(monkeypatch, crash_once)
    out = tmp_path / "retry"
    assert _main("sweep", small, *FAST, "--out", out) == 0
    assert read(out).num_rows == 6
    assert max(calls.values()) == 2 and sum(calls.values()) == 8

    def always(n, ov):
        if "source.0.rate=100k/s" in ov:
            raise RuntimeError("worker died")
        return None

    calls = _patched_run(monkeypatch, always)
    out = tmp_path / "crash"
    capsys.readouterr()
    assert _main("sweep", small, *FAST, "--out", out) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: 2 of 6 runs failed"), err
    assert "crashed twice" in err[0] and "RuntimeError: worker died" in err[0] and "--resume" in err[0]
    assert sorted(calls.values()) == [1, 1, 1, 1, 2, 2]
    # The runs that ended are kept; resuming runs only the failed ones.
    assert read(out).num_rows == 4
    calls = _patched_run(monkeypatch, lambda n, ov: None)
    assert _main("sweep", small, *FAST, "--out", out, "--resume") == 0
    assert sum(calls.values()) == 2 and read(out).num_rows == 6


def test_a_point_that_fails_on_bad_input_is_reported_not_retried(monkeypatch, small, tmp_path, capsys):
    def bad(n, ov):
        return (False, "source[0].rate: too fast") if "source.0.rate=200k/s" in ov else None

    calls = _patched_run(monkeypatch, bad)
    assert _main("sweep", small, *FAST, "--out", tmp_path / "bad") == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "too fast" in err[0] and "platform.cpus=2, source.0.rate=200k/s" in err[0], err
    assert sorted(calls.values()) == [1] * 6


def test_progress_is_plain_lines_when_piped_and_nothing_when_quiet(small, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    cmd = [sys.executable, "-m", "irqlab", "sweep", str(small), "--grid", "seed=1,2"]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "sweep (2 runs): 2/2 runs" in p.stderr
    p = subprocess.run([*cmd, "--quiet"], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stderr == ""


def test_resume_refuses_runs_another_irqlab_made(small, tmp_path):
    """A run's key hashes the scenario, overrides and seed, not the model: parts
    from another version or commit would mix two models' results in one table."""
    d = tmp_path / "d"
    assert_ok(run_cli("sweep", small, *FAST, "--out", d))
    part = sorted(d.glob("part-*.parquet"))[0]
    t = pq.read_table(part)
    meta = dict(t.schema.metadata)
    meta[b"irqlab.commit"] = b"deadbeef"
    pq.write_table(t.replace_schema_metadata(meta), part)
    line = assert_user_error(run_cli("sweep", small, *FAST, "--out", d, "--resume"), "--resume", "deadbeef")
    assert "was written by irqlab.commit deadbeef" in line


def test_a_sweep_too_large_to_plan_or_with_a_value_twice_is_refused(small, tmp_path):
    out = tmp_path / "o.parquet"
    line = assert_user_error(run_cli("sweep", small, *FAST, "--replications", str(10**20), "--out", out))
    assert "--grid and --replications make" in line and "at most 1,000,000" in line
    # 5k/s and 5000/s are one scenario, written two ways.
    assert_user_error(
        run_cli("sweep", small, "--grid", "source.0.rate=5k/s,5000/s", "--out", out), "are the same scenario"
    )
    # A --set of a grid key was dropped without a word: the grid's value won.
    for given in ("source.0.rate=1k/s", "source[0].rate=1k/s"):
        line = assert_user_error(
            run_cli("sweep", small, "--set", given, "--grid", "source.0.rate=5k/s,10k/s", "--out", out)
        )
        assert f"--set {given} and --grid source.0.rate=..." in line and "give it in one" in line, line
    assert not out.exists()


def test_a_mean_over_fewer_runs_than_its_point_says_its_n(small, tmp_path):
    """A percentile of an empty histogram has no value, so a point's mean and
    interval are over the runs that have one; the table and the report say how
    many where that is fewer than the point's n (they gave only n, and the
    report's note then put the wrong degrees of freedom on the interval)."""
    out = tmp_path / "few.parquet"
    # 2 sources at 200/s over 3.5 ms: about a quarter of the runs see no interrupt.
    p = run_cli("sweep", small, "--grid", "source.0.rate=200/s,100k/s", "--replications", "12", "--out", out)
    assert_ok(p)
    rows = pq.read_table(out).to_pylist()
    values = [r["irq_latency.p99"] for r in rows if r["source.0.rate"] == "200/s"]
    have = [v for v in values if v is not None]
    assert len(values) == 12 and 0 < len(have) < 12, f"{len(have)} of 12 runs have a p99: pick another rate"
    summary = sweeps.summarize(pq.read_table(out), ["source.0.rate"], ["irq_latency.p99"])
    assert summary[0]["n"] == 12 and summary[0]["counts"]["irq_latency.p99"] == len(have)
    assert summary[0]["irq_latency.p99"][0] == pytest.approx(sum(have) / len(have))
    assert summary[1]["counts"]["irq_latency.p99"] == 12
    # Each wrapped group of columns repeats the row's key.
    low = " ".join(line for line in p.stdout.splitlines() if line.strip().startswith("200/s"))
    high = " ".join(line for line in p.stdout.splitlines() if line.strip().startswith("100k/s"))
    assert f"(n {len(have)})" in low and "(n " not in high, p.stdout
    r = run_cli("report", out, "--metric", "irq_latency.p99", "--out", tmp_path / "rep")
    assert_ok(r)
    page = (tmp_path / "rep" / "index.html").read_text()
    assert f"(n {len(have)})" in page and "n the runs that have a value" in page


def test_the_summary_shows_the_headline_metrics(small, tmp_path):
    """What the sweep is about (the interrupt rate, latency p99s), as `irqlab
    report` plots by default, not the engine's event count."""
    p = run_cli("sweep", small, "--grid", "source.0.rate=50k/s,100k/s", "--out", tmp_path / "o.parquet")
    assert_ok(p)
    head = next(line for line in p.stdout.splitlines() if "source.0.rate" in line)
    assert "interrupts_per_s" in head and "irq_latency.p99" in head and "events" not in head, head
    assert "2 points" in p.stdout and "1 points" not in p.stdout
    # A latency in its unit (histograms are in ns), not a bare number; each
    # group of columns the table wraps into ends with a p99 here.
    rows = [line.split() for line in p.stdout.splitlines() if line.strip().startswith(("50k/s", "100k/s"))]
    assert len(rows) >= 2 and all(r[-1] in ("ns", "µs", "ms") for r in rows), rows


@pytest.mark.skipif(importlib.util.find_spec("distributed") is None, reason="needs dask[distributed]")
def test_a_dask_address_that_is_not_a_scheduler_is_one_line(small, tmp_path):
    """Refused: one line at once (it took Dask's 30 s). Listening but silent:
    one line once the connect time is up (it hung with no output; an HTTP
    server there gave a traceback). The timeouts here are bounds, not measurements."""
    import socket

    args = ["sweep", small, "--grid", "seed=1,2", "--backend", "dask", "--out", tmp_path / "o"]
    # Bound and not listening: connections are refused, and the port stays
    # ours (closed first, another test's server could take it meanwhile).
    with socket.socket() as refusing:
        refusing.bind(("127.0.0.1", 0))
        port = refusing.getsockname()[1]
        assert_user_error(run_cli(*args, "--address", f"tcp://127.0.0.1:{port}", timeout=60), "cannot reach a Dask")
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        assert_user_error(run_cli(*args, "--address", address, timeout=120), f"--address {address}", "Dask scheduler")
    assert not (tmp_path / "o").exists()


@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs ray")
def test_an_unreachable_ray_cluster_is_one_line(small, tmp_path):
    """Checked before `ray.init`, whose own retries take minutes (the timeout
    here is that bound, not a measurement)."""
    args = [
        "sweep",
        small,
        "--grid",
        "seed=1,2",
        "--backend",
        "ray",
        "--address",
        "127.0.0.1:1",
        "--out",
        tmp_path / "o",
    ]
    assert_user_error(run_cli(*args, timeout=90), "--address 127.0.0.1:1", "cannot reach a Ray cluster")
    # Something that listens but is not Ray (no gRPC answer): ray.init retried it for minutes.
    import socket

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        args[args.index("127.0.0.1:1")] = address
        assert_user_error(run_cli(*args, timeout=90), f"--address {address}", "not a Ray cluster")


def test_resume_with_nothing_to_resume_runs_the_sweep_and_says_so(small, tmp_path):
    """A misspelt --out with --resume reran everything without a word (a review);
    a script that always passes --resume still works."""
    out = tmp_path / "typo.parquet"
    p = run_cli("sweep", small, "--grid", "seed=1,2", "--out", out, "--resume", "-q")
    assert_ok(p)
    assert f"note: --resume: nothing to resume at {out}; running the whole sweep" in p.stderr, p.stderr
    assert out.is_file()


def test_the_next_part_is_timed_from_the_start_of_a_write(small, tmp_path, monkeypatch):
    """Parts start at most once per FLUSH_S, counted from the start of the last
    write: counted from its end, a row that came during a slow write waited
    FLUSH_S on top of it (a review measured 1.5 s for the README's "a second")."""
    plan = sweeps.plan(small.read_text(), str(small), [("source.0.rate", ["50k/s"])], [], None)
    store = Store(plan, tmp_path / "d", resume=False)
    started: list[float] = []

    def write(rows, names):
        started.append(time.monotonic())
        time.sleep(0.05)  # a slow disk; only the order of the stamps is asserted

    monkeypatch.setattr(store, "_write_part", write)
    store._rows.append({"point": 0})
    store.flush()
    assert len(started) == 1 and store._last_flush <= started[0]
    store.release()


def test_the_note_on_a_files_parts_names_the_file_to_resume(tmp_path):
    # Resuming into NAME.parquet.parts would never write NAME.parquet (an audit).
    from irqlab.sweep_store import MANIFEST, unfinished_note

    parts = tmp_path / "r.parquet.parts"
    parts.mkdir()
    (parts / MANIFEST).write_text(json.dumps({"points": 4, "done": [0]}))
    note = unfinished_note(parts)
    assert note is not None and f"--out {tmp_path / 'r.parquet'} --resume" in note, note
    d = tmp_path / "dataset"
    d.mkdir()
    (d / MANIFEST).write_text(json.dumps({"points": 4, "done": [0]}))
    assert f"--out {d} --resume" in (unfinished_note(d) or "")
