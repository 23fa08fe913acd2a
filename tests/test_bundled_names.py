"""A bundled scenario by name, from any directory: the README's commands say
`scenarios/examples/...`, which only the clone's root has, and a `pip install`
has no `scenarios/` at all."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import assert_ok, assert_user_error, run_cli
from irqlab._util import BUNDLED, UserError, bundled_names, bundled_scenario, read_scenario

SHORT = ["--set", "duration=2ms", "--set", "warmup=0s", "--format", "json"]


NAMES = ["examples/md1-queue", "examples/md1-queue.toml", "scenarios/examples/md1-queue.toml", "md1-queue"]


@pytest.mark.parametrize("name", NAMES)
def test_a_bundled_scenario_is_found_by_name_outside_the_clone(tmp_path: Path, name: str) -> None:
    p = run_cli("run", name, *SHORT, cwd=tmp_path)
    assert_ok(p)
    assert json.loads(p.stdout)["scenario"] == "md1-queue"


def test_a_file_of_that_path_comes_first(tmp_path: Path) -> None:
    own = (BUNDLED / "examples" / "md1-queue.toml").read_text().replace('name = "md1-queue"', 'name = "mine"')
    assert 'name = "mine"' in own
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "md1-queue.toml").write_text(own)
    p = run_cli("run", "examples/md1-queue.toml", *SHORT, cwd=tmp_path)
    assert_ok(p)
    assert json.loads(p.stdout)["scenario"] == "mine"


def test_a_near_miss_is_one_line_naming_the_closest(tmp_path: Path) -> None:
    p = run_cli("run", "m5-nvme-qd", cwd=tmp_path)
    assert_user_error(p, "m5-nvme-qd: no such file", "did you mean examples/m5-nvme-qd1?")
    p = run_cli("sweep", "exampels/md1-queue", "--grid", "seed=1", cwd=tmp_path)
    assert_user_error(p, "did you mean examples/md1-queue?")


def test_an_absolute_or_parent_path_is_only_a_missing_file(tmp_path: Path) -> None:
    line = assert_user_error(run_cli("run", tmp_path / "md1-queue.toml", cwd=tmp_path), "no such file")
    assert "bundled" not in line
    with pytest.raises(UserError, match=r"^\.\./md1-queue: no such file$"):
        read_scenario("../md1-queue")


def test_every_bundled_name_resolves_to_its_file() -> None:
    names = bundled_names()
    assert "examples/md1-queue" in names and "figures/m5-nvme-8ssd" in names
    for n in names:
        assert bundled_scenario(n) == BUNDLED / f"{n}.toml"
        assert bundled_scenario(f"scenarios/{n}.toml") == BUNDLED / f"{n}.toml"
    # A stem alone, when one file has it; a directory alone names nothing.
    assert bundled_scenario("reference") == BUNDLED / "bench" / "reference.toml"
    assert bundled_scenario("examples") is None
    assert bundled_scenario("scenarios") is None


def test_the_bundled_trace_replays_by_name_outside_the_clone(tmp_path: Path) -> None:
    for trace in ("scenarios/traces/virtio-disk.parquet", "traces/virtio-disk"):
        p = run_cli("replay", trace, "--scenario", "examples/replay-disk", "--json", "-", cwd=tmp_path)
        assert_ok(p)
        assert json.loads(p.stdout)["metrics"]["interrupts"] > 0
    assert_user_error(
        run_cli("replay", "traces/none", "--scenario", "examples/replay-disk", cwd=tmp_path), "no such trace"
    )


def test_replay_prints_as_run_does(tmp_path: Path) -> None:
    """Human units, and the `*` its footnote explains on what rests on a zero-default cost
    (replay printed raw numbers and a footnote nothing in its table referred to)."""
    p = run_cli("replay", "traces/virtio-disk", "--scenario", "examples/replay-disk", cwd=tmp_path)
    assert_ok(p)
    assert p.stdout.splitlines()[2].startswith("summary: "), p.stdout
    assert "interrupts_per_s" in p.stdout and " k/s " in p.stdout
    # replay-disk leaves fabric.msi_write at 0: the latency rests on it, and is marked.
    assert p.stderr.startswith("* depends on a cost left at its zero default: fabric.msi_write"), p.stderr
    assert any(ln.rstrip().endswith(" *") for ln in p.stdout.splitlines()), p.stdout
