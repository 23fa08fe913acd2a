"""`irqlab bench`: the reference model runs and reports engine speed in the
shared JSON shape. Speed itself is never asserted (CI machines vary)."""

from __future__ import annotations

import json

import irqlab
from helpers import assert_ok, run_cli


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
