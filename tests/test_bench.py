"""`irqlab bench`: the reference model runs and reports engine speed in the
shared JSON shape. Speed itself is never asserted (CI machines vary)."""

from __future__ import annotations

import json

import pytest

import irqlab
from helpers import assert_ok, assert_user_error, run_cli


def test_bench_reports_positive_speed_metrics(tmp_path):
    out = tmp_path / "bench.json"
    p = run_cli("bench", "--json", out)
    assert_ok(p)
    doc = json.loads(out.read_text())
    assert set(doc) == {"scenario", "seed", "version", "metrics", "histograms", "series", "tables"}
    assert doc["version"] == irqlab.__version__
    m = doc["metrics"]
    for k in ("interrupts", "events", "wall_s", "interrupts_per_wall_s", "events_per_wall_s"):
        assert isinstance(m[k], (int, float)) and m[k] > 0, (k, m.get(k))
    # The bench times the reference model itself: the same interrupts as a run of it.
    ref, _ = irqlab.run(irqlab.SCENARIOS_DIR / "bench" / "reference.toml")
    assert m["interrupts"] == ref["metrics"]["interrupts"] and m["events"] == ref["metrics"]["events"]
    assert m["events"] >= m["interrupts"]
    assert "wall_s" in p.stdout


def test_bench_reference_scenario_is_bundled():
    scen = irqlab.load(irqlab.SCENARIOS_DIR / "bench" / "reference.toml")
    assert scen["name"]


def test_bench_scale_times_the_same_interrupts_on_more_cpus(tmp_path):
    out = tmp_path / "scale.json"
    p = run_cli("bench", "--scale", "4,1", "--repeat", "2", "--json", out)
    assert_ok(p)
    # Rounds over every size, so that a swing of the machine's speed meets each size alike.
    progress = [line for line in p.stderr.splitlines() if line.startswith("round ")]
    assert [line.split(":")[0] for line in progress] == [
        "round 1/2, 1 CPUs",
        "round 1/2, 4 CPUs",
        "round 2/2, 1 CPUs",
        "round 2/2, 4 CPUs",
    ], p.stderr
    rows = json.loads(out.read_text())["tables"]["scale"]
    assert [r["cpus"] for r in rows] == [1, 4], "sizes run smallest first"
    assert [r["sources"] for r in rows] == [32, 128]
    # The same load per source over 1/N of the time: Poisson counts of ~10^6 events, not a factor apart.
    assert abs(rows[0]["events"] - rows[1]["events"]) / rows[0]["events"] < 0.02, rows
    assert rows[0]["vs_smallest"] == 1.0 and rows[0]["loop_vs_smallest"] == 1.0
    for r in rows:
        assert r["events_per_wall_s"] > 0 and r["peak_rss_mb"] > 0, r
        # The run's own memory: the process's peak over its start, never above the peak.
        assert 0 <= r["run_rss_mb"] < r["peak_rss_mb"], r
        # The loop is the wall time less the setup (a 1 ns run of the same machine).
        assert 0 < r["setup_s"] < r["wall_s"], r
        loop = r["events"] / (r["wall_s"] - r["setup_s"])
        assert abs(r["loop_events_per_wall_s"] / loop - 1) < 1e-9, r
    assert "M ev/s" in p.stdout and "loop M/s" in p.stdout


def test_bench_scale_rejects_bad_cpu_counts():
    for bad in ("0", "a,2", "70000", ""):
        p = run_cli("bench", "--scale", bad)
        assert p.returncode == 2, (bad, p.stderr)
        # An empty value is refused before the command reads it, as every empty argument is.
        start = "error: irqlab bench: --scale's value is empty" if bad == "" else "error: --scale"
        assert p.stderr.strip().startswith(start) and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = run_cli("bench", "--scale", "2", "--set", "seed=3")
    assert p.returncode == 2 and "without --scenario or --set" in p.stderr, p.stderr


def test_scale_scenarios_load_and_spread_their_sources(tmp_path):
    from irqlab import _core

    for cpus in (1, 3, 64):
        path = tmp_path / f"scale-{cpus}.toml"
        path.write_text(_core.scale_scenario(cpus))
        scen = irqlab.load(path)
        assert scen["platform"]["cpus"] == cpus
        (src,) = scen["source"]
        assert src["count"] == 32 * cpus and sorted(set(src["cpus"])) == list(range(cpus))


def test_a_peer_runs_beside_the_reference_and_its_ratio_is_reported(tmp_path):
    """`--peer`: the SimPy twin (or any command printing its rate) timed in the
    same run, alternating with irqlab's; a peer that fails is one error line."""
    import sys

    from helpers import assert_user_error

    fake = tmp_path / "peer.py"
    fake.write_text("import json\nprint(json.dumps({'interrupts_per_wall_s': 1000.0}))\n")
    out = tmp_path / "bench.json"
    p = run_cli("bench", "--repeat", "2", "--peer", f"{sys.executable} {fake}", "--json", out)
    assert_ok(p)
    m = json.loads(out.read_text())["metrics"]
    assert m["peer.0.interrupts_per_wall_s"] == 1000.0
    assert m["peer.0.irqlab_times"] == m["interrupts_per_wall_s"] / 1000.0
    # Per round, irqlab's run against the peer's beside it: never above the fastest
    # irqlab run against a peer that reads 1,000 every round.
    assert 0 < m["peer.0.irqlab_times_median_round"] <= m["peer.0.irqlab_times"]
    assert "at the median of 2 rounds" in p.stderr
    assert "peer 0 (" in p.stderr and "peer.py" in p.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("import sys\nsys.exit('no simpy here')\n")
    assert_user_error(run_cli("bench", "--peer", f"{sys.executable} {broken}"), "--peer", "exit 1", "no simpy here")
    assert_user_error(run_cli("bench", "--peer", "x", "--scenario", fake), "without --scenario")


def test_bench_counts_a_warm_up_scenario_over_the_whole_run(tmp_path):
    """A scenario with a warm-up: its interrupts are counted over the run the
    wall time covers, so interrupts and simulated seconds per wall-second agree
    (they read 10x apart with a 90 % warm-up)."""
    out = tmp_path / "b.json"
    scen = irqlab.SCENARIOS_DIR / "examples" / "md1-queue.toml"
    p = run_cli("bench", "--scenario", scen, "--set", "duration=100ms", "--set", "warmup=90ms", "--json", out)
    assert_ok(p)
    m = json.loads(out.read_text())["metrics"]
    whole, _ = irqlab.run(scen, ["duration=100ms", "warmup=0s"])
    assert m["interrupts"] == whole["metrics"]["interrupts"], "counted after the 90 ms warm-up only"
    rate = m["interrupts"] / 0.1  # per simulated second
    assert abs(m["interrupts_per_wall_s"] / (m["sim_s_per_wall_s"] * rate) - 1) < 1e-9, m


@pytest.mark.parametrize("value", ["Infinity", "true"])
def test_a_peer_rate_that_is_not_a_finite_number_is_refused(value):
    """Infinity went into --json as invalid JSON; true counted as 1 (a review)."""
    peer = f"echo '{{\"interrupts_per_wall_s\": {value}}}'"
    p = run_cli("bench", "--peer", peer)
    assert_user_error(p, "--peer")
