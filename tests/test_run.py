"""`irqlab run`, `validate`, `schema` and the Python API: the result shape of
DESIGN.md and determinism (same seed -> same bytes, other seed -> other result)."""

from __future__ import annotations

import json
import numbers
import tomllib

import pytest

import irqlab
from helpers import assert_ok, run_cli

TOP_KEYS = {"scenario", "seed", "version", "metrics", "histograms", "series", "tables", "provenance"}
REQUIRED_METRICS = {"events", "interrupts", "msi_writes", "interrupts_per_s", "sim_s"}
HIST_KEYS = {"count", "mean", "min", "max", "p50", "p90", "p99", "p99.9", "p99.99", "unit"}


def check_result_shape(doc: dict) -> None:
    assert set(doc) == TOP_KEYS | {"first_half"}
    # The first half of the measured window, for the settle check: metrics and histograms, no per-CPU rows.
    half = doc["first_half"]
    assert set(half) == {"metrics", "histograms"} and set(half["histograms"]) <= set(doc["histograms"])
    assert set(half["metrics"]) <= set(doc["metrics"]) and not any(k.startswith("cpu0.") for k in half["metrics"])
    assert isinstance(doc["scenario"], str) and doc["scenario"]
    assert isinstance(doc["seed"], int) and not isinstance(doc["seed"], bool)
    assert doc["version"] == irqlab.__version__
    assert set(doc["metrics"]) >= REQUIRED_METRICS, set(doc["metrics"])
    for name, v in doc["metrics"].items():
        assert isinstance(v, numbers.Real) and not isinstance(v, bool), (name, v)
    for name, h in doc["histograms"].items():
        assert set(h) == HIST_KEYS, (name, set(h))
        assert isinstance(h["unit"], str)
        if h["count"]:
            # Percentiles of one distribution can only grow.
            qs = [h[k] for k in ("min", "p50", "p90", "p99", "p99.9", "p99.99", "max")]
            assert qs == sorted(qs), (name, qs)
    for name, s in doc["series"].items():
        assert set(s) == {"t", "v"}, name
        assert len(s["t"]) == len(s["v"]), name
        assert s["t"] == sorted(s["t"]), name


def examples() -> list:
    return sorted((irqlab.SCENARIOS_DIR / "examples").glob("*.toml"))


def test_examples_are_bundled():
    assert examples(), f"no examples in {irqlab.SCENARIOS_DIR / 'examples'}"


@pytest.mark.parametrize("path", examples(), ids=lambda p: p.stem)
def test_every_example_runs_and_has_the_design_shape(path, example_run):
    if any("replay" in src for src in tomllib.loads(path.read_text()).get("source", [])):
        pytest.skip("runs with its recorded trace: test_the_bundled_trace_replays_without_root")
    p, doc = example_run(path)
    assert_ok(p)
    check_result_shape(doc)
    assert doc["metrics"]["sim_s"] > 0
    # The summary printed for people names the metrics it shows.
    assert "interrupts" in p.stdout and doc["scenario"] in p.stdout
    # Every example is long enough for its warm-up (irqlab run's short-run warning).
    assert "lengthen duration" not in p.stderr, p.stderr


def test_small_has_interrupts_and_latency_histograms(small, tmp_path):
    out = tmp_path / "r.json"
    assert_ok(run_cli("run", small, "--json", out))
    doc = json.loads(out.read_text())
    check_result_shape(doc)
    m = doc["metrics"]
    assert m["interrupts"] > 0 and m["msi_writes"] > 0 and m["events"] >= m["interrupts"]
    # 2 queues x 100k/s for 3.5 ms measured: about 700 interrupts (Poisson).
    assert 400 < m["interrupts"] < 1000, m["interrupts"]
    # Counted three ways (the handler starts, per source group, per CPU), they agree.
    per_source = sum(v for k, v in m.items() if k.startswith("source.") and k.endswith(".interrupts_per_s"))
    assert per_source == pytest.approx(m["interrupts_per_s"], rel=1e-9)
    cpus = doc["tables"]["cpus"]
    col = cpus["columns"].index("interrupts_per_s")
    assert sum(r[col] for r in cpus["rows"]) == pytest.approx(m["interrupts_per_s"], rel=1e-9)
    assert doc["histograms"], "expected at least one latency histogram"


def test_same_seed_gives_identical_bytes_and_another_seed_differs(small, tmp_path):
    runs = []
    for i, seed in enumerate([5, 5, 6]):
        j, t = tmp_path / f"{i}.json", tmp_path / f"{i}.pftrace"
        assert_ok(run_cli("run", small, "--seed", seed, "--json", j, "--trace", t))
        runs.append((j.read_bytes(), t.read_bytes()))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] == runs[1][1]
    assert len(runs[0][1]) > 0
    a, c = json.loads(runs[0][0]), json.loads(runs[2][0])
    assert (a["seed"], c["seed"]) == (5, 6)
    assert a["metrics"] != c["metrics"]
    assert runs[0][1] != runs[2][1]


def test_seed_flag_and_overrides_reach_the_core(small):
    base, _ = irqlab.run(small)
    assert base["seed"] == 42  # the scenario's own
    doubled, _ = irqlab.run(small, ["source.0.rate=200k/s"], seed=42)
    assert doubled["metrics"]["interrupts"] > 1.5 * base["metrics"]["interrupts"]


def test_json_to_stdout_is_pure_json(small):
    p = run_cli("run", small, "--json", "-")
    assert_ok(p)
    check_result_shape(json.loads(p.stdout))


def test_trace_is_only_produced_on_request(small):
    _, trace = irqlab.run(small)
    assert trace is None
    _, trace = irqlab.run(small, trace=True)
    assert isinstance(trace, bytes) and trace


def test_validate_and_load(small):
    p = run_cli("validate", small, "--set", "platform.cpus=4")
    assert_ok(p)
    assert p.stdout.startswith("OK ")
    scen = irqlab.load(small, ["platform.cpus=4"])
    assert scen["name"] == "small" and scen["seed"] == 42 and scen["expect"] == []


def test_scenario_error_is_a_value_error(small):
    assert issubclass(irqlab.ScenarioError, ValueError)
    with pytest.raises(irqlab.ScenarioError, match=r"platform\.cpus"):
        irqlab.load(small, ["platform.cpus=lots"])


def test_schema_describes_the_scenario_keys(tmp_path):
    p = run_cli("schema")
    assert_ok(p)
    schema = json.loads(p.stdout)
    assert {"name", "duration", "warmup", "seed"} <= set(schema["properties"])
    out = tmp_path / "schema.json"
    assert_ok(run_cli("schema", "--out", out))
    assert json.loads(out.read_text()) == schema


def test_the_schema_accepts_what_the_core_accepts_and_rejects_what_it_rejects():
    """An editor checking a scenario with the schema must agree with the core:
    it flagged `warmup = 0` and `rate = "1e6/s"` (which load) and let `rate = -5` through."""
    import jsonschema

    schema = irqlab.schema()
    check = jsonschema.Draft7Validator(schema)
    for path in sorted(irqlab.SCENARIOS_DIR.glob("*/*.toml")):
        doc = tomllib.loads(path.read_text())
        assert not list(check.iter_errors(doc)), path
    base = {"name": "t", "duration": "1ms", "platform": {"cpus": 1}}
    src = {"name": "s", "rate": "1k/s", "handler": "300ns"}
    cases = [
        ({"warmup": 0}, True),
        ({"warmup": "+5ns", "duration": "1.ms"}, True),
        ({"source": [{**src, "rate": "1.5625e4/s"}]}, True),
        ({"source": [{**src, "rate": "1e6"}]}, True),
        ({"source": [{**src, "rate": 2.5e5}]}, True),
        ({"source": [{**src, "rate": -5}]}, False),
        ({"source": [{**src, "rate": "-5/s"}]}, False),
        ({"warmup": 5}, False),
        ({"warmup": "5"}, False),
        ({"seed": "16860738450190168606"}, True),
        ({"seed": -1}, False),
    ]
    for extra, ok in cases:
        doc = {**base, **extra}
        try:
            _load_dict(doc)
            core = True
        except irqlab.ScenarioError:
            core = False
        assert core == ok, (extra, "core")
        assert (not list(check.iter_errors(doc))) == ok, (extra, "schema")


def _load_dict(doc: dict) -> None:
    """Loads a scenario given as a dict through the core: written as TOML (top-level
    keys, tables and arrays of tables; JSON's scalars are TOML's)."""
    import tempfile
    from pathlib import Path

    lines = [f"{k} = {json.dumps(v)}" for k, v in doc.items() if not isinstance(v, (dict, list))]
    for k, v in doc.items():
        tables = [(f"[{k}]", v)] if isinstance(v, dict) else [(f"[[{k}]]", t) for t in v] if isinstance(v, list) else []
        for header, table in tables:
            lines += [header, *(f"{a} = {json.dumps(b)}" for a, b in table.items())]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "s.toml"
        p.write_text("\n".join(lines) + "\n")
        irqlab.load(p)


def test_version_flag():
    p = run_cli("--version")
    assert_ok(p)
    assert irqlab.__version__ in p.stdout


def test_every_bundled_scenario_validates():
    files = sorted(irqlab.SCENARIOS_DIR.glob("*/*.toml"))
    assert files
    for f in files:
        irqlab.load(f)  # raises ScenarioError naming the file if not
    # And what `irqlab validate` checks beyond: every entry's overrides, and the
    # metrics the expectations and studies compare, from a 100 us run of each.
    from irqlab.reproduce import prepare, probe

    probe(prepare(files))


def test_the_probe_runs_the_users_sets_and_no_longer_than_the_run(monkeypatch):
    """validate's probe ran the file without the user's --set, and always for
    100 us: a --set that shortened a flood to 1 us left a 100 us flood to probe."""
    from irqlab import reproduce

    md1 = irqlab.SCENARIOS_DIR / "examples" / "md1-queue.toml"
    real, seen = reproduce._core.run, []

    def spy(text, origin, overrides, *rest):
        seen.append(list(overrides))
        return real(text, origin, overrides, *rest)

    monkeypatch.setattr(reproduce._core, "run", spy)
    for user, probed in ((["duration=1us", "warmup=0s"], 'duration="1000000ps"'), ([], 'duration="100000000ps"')):
        seen.clear()
        reproduce.probe(reproduce.prepare([md1], ["source.0.rate=40k/s", *user]))
        assert seen and all("source.0.rate=40k/s" in o and o[-2] == probed for o in seen), seen


def test_the_bundled_trace_replays_without_root() -> None:
    import irqlab

    trace = irqlab.SCENARIOS_DIR / "traces" / "virtio-disk.parquet"
    scenario = irqlab.SCENARIOS_DIR / "examples" / "replay-disk.toml"
    p = run_cli("replay", trace, "--scenario", scenario, "--json", "-")
    assert_ok(p)
    m = json.loads(p.stdout)["metrics"]
    # A 2 s recording of a virtio disk's completions (3,724 of them) through the modelled flow.
    assert m["source.disk.interrupts_per_s"] > 500
