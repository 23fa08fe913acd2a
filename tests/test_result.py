"""One result shape: `run` (built by the core), `bench`, `measure` and
`monitor` give documents with the same top-level keys, and the core's tables
say what the metric names say, without splitting them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import irqlab
from helpers import assert_ok, run_cli
from irqlab import _core
from irqlab.result import KEYS, document


def _doc(tmp_path: Path, *args: object) -> dict:
    out = tmp_path / f"{len(list(tmp_path.iterdir()))}.json"
    assert_ok(run_cli(*args, "--json", out))
    return json.loads(out.read_text())


def test_every_command_writes_the_same_shape(tmp_path: Path, small: Path) -> None:
    docs = {
        "run": _doc(tmp_path, "run", small),
        "bench": _doc(tmp_path, "bench"),
        "measure": _doc(tmp_path, "measure", "syscall", "--calls", "20000", "--runs", "1"),
        "monitor": _doc(tmp_path, "monitor", "--interval", "0.1", "--count", "1"),
    }
    for name, d in docs.items():
        assert set(KEYS) <= set(d), (name, sorted(d))
        assert d["version"] == irqlab.__version__, name
    # run's document is the core's, plus where it comes from.
    assert set(docs["run"]) == {*KEYS, "provenance", "first_half"}


def test_document_refuses_to_overwrite_its_own_keys() -> None:
    with pytest.raises(ValueError, match="version"):
        document("x", None, {}, version="0")


def test_tables_match_the_metrics(tmp_path: Path) -> None:
    fig = irqlab.SCENARIOS_DIR / "figures" / "m4-kvm-cancels.toml"
    res, _ = irqlab.run(fig)
    t = res["tables"]["cancel_causes"]
    assert t["rows"], "the figure has cancels"
    for row in t["rows"]:
        r = dict(zip(t["columns"], row, strict=True))
        assert res["metrics"][f"cancels.{r['request']}.{r['kind']}.{r['cause']}"] == r["cancels"]
    assert sum(dict(zip(t["columns"], row, strict=True))["cancels"] for row in t["rows"]) == res["metrics"]["cancels"]


def test_a_scenario_can_be_given_as_data() -> None:
    small = (Path(__file__).parent / "data" / "small.toml").read_text()
    as_data = json.loads(_core.load(small, "small.toml", []))
    from_toml, _ = _core.run(small, "small.toml", [], 3, False)
    from_json, _ = _core.run(json.dumps(as_data), "small.json", [], 3, False)
    assert json.loads(from_toml)["metrics"] == json.loads(from_json)["metrics"]
    with pytest.raises(_core.ScenarioError, match="an object of sections"):
        _core.load("[1]", "x.json", [])


def test_units_are_parsed_by_the_core() -> None:
    from irqlab._util import time_ns

    assert time_ns("1.5us") == 1500.0
    assert _core.parse_rate("1M/s") == 1e6
    with pytest.raises(_core.ScenarioError):
        time_ns("fast")
