"""Bad input never ends in a traceback: one `error:` line on stderr naming what
is wrong, exit code 2, and no output file left behind."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from helpers import assert_user_error, run_cli

UNKNOWN_KEY = """
name = "t"
duration = "1ms"
[cpu]
maskin = "daif"
"""

MALFORMED = """
name = "t"
duration =
"""


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / "in" / name
    p.parent.mkdir(exist_ok=True)
    p.write_text(text)
    return p


# (id, argv builder(small, tmp in-dir) -> args, substrings the one line must contain)
CASES = [
    ("unknown-key", lambda s, d: ["run", write(d, "u.toml", UNKNOWN_KEY)], ["u.toml", "cpu.maskin", "unknown field"]),
    ("wrong-type", lambda s, d: ["run", s, "--set", "platform.cpus=lots"], ["platform.cpus", "invalid type"]),
    ("bad-enum", lambda s, d: ["run", s, "--set", "cpu.masking=pmrr"], ["cpu.masking", "pmrr", "daif"]),
    ("negative-duration", lambda s, d: ["run", s, "--set", "duration=-1s"], ["duration"]),
    ("time-without-unit", lambda s, d: ["run", s, "--set", "source.0.handler=300"], ["source[0].handler", "unit"]),
    ("missing-file", lambda s, d: ["run", d / "nope.toml"], ["nope.toml", "no such file"]),
    ("directory", lambda s, d: ["run", d], ["directory"]),
    ("set-without-equals", lambda s, d: ["run", s, "--set", "duration"], ["--set", "KEY=VALUE"]),
    ("set-bad-index", lambda s, d: ["run", s, "--set", "source.5.rate=1"], ["source", "no index 5"]),
    ("malformed-toml", lambda s, d: ["run", write(d, "m.toml", MALFORMED)], ["m.toml:3", "TOML"]),
    ("not-utf8", lambda s, d: ["run", _binary(d)], ["b.toml", "UTF-8"]),
    ("negative-seed", lambda s, d: ["run", s, "--seed", "-1"], ["--seed"]),
    ("validate-bad", lambda s, d: ["validate", s, "--set", "platform.cpus=0"], ["platform.cpus"]),
    ("grid-without-equals", lambda s, d: ["sweep", s, "--grid", "platform.cpus"], ["--grid", "KEY=V1,V2"]),
    ("grid-empty-value", lambda s, d: ["sweep", s, "--grid", "platform.cpus=2,,4"], ["--grid", "empty value"]),
    ("grid-bad-value", lambda s, d: ["sweep", s, "--grid", "platform.cpus=2,lots"], ["platform.cpus", "lots"]),
    ("grid-missing", lambda s, d: ["sweep", s], ["--grid"]),
    ("grid-twice", lambda s, d: ["sweep", s, "--grid", "seed=1", "--grid", "seed=2"], ["given twice"]),
    ("grid-bad-seed", lambda s, d: ["sweep", s, "--grid", "seed=1,x"], ["seed", "'x'"]),
    ("unknown-backend", lambda s, d: ["sweep", s, "--grid", "seed=1", "--backend", "slurm"], ["slurm", "local"]),
    ("zero-workers", lambda s, d: ["sweep", s, "--grid", "seed=1", "--workers", "0"], ["--workers"]),
    ("only-unknown", lambda s, d: ["reproduce", "--figures", d, "--only", "nosuch"], ["nosuch", "known"]),
    ("figures-missing", lambda s, d: ["reproduce", "--figures", d / "nodir"], ["nodir"]),
]


def _binary(tmp: Path) -> Path:
    p = write(tmp, "b.toml", "")
    p.write_bytes(b'name = "\xff\xfe"\n')
    return p


def _outputs(case_id: str, out: Path) -> list[str]:
    # Every command gets the output flags it has, so that "no file written" is checked.
    if case_id.startswith(("grid", "unknown-backend", "zero-workers")):
        return ["--out", str(out / "sweep.parquet")]
    if case_id.startswith(("only", "figures")):
        return ["--out", str(out / "report")]
    if case_id.startswith("validate"):
        return []
    return ["--json", str(out / "r.json"), "--trace", str(out / "r.pftrace")]


@pytest.mark.parametrize("case_id,argv,needles", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case_id, argv, needles, small, tmp_path):
    indir = tmp_path / "in"
    indir.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    args = argv(small, tmp_path) + _outputs(case_id, out)
    p = run_cli(*args)
    assert_user_error(p, *needles)
    assert list(out.iterdir()) == [], "an output (or temp) file was left behind"


def test_a_bad_point_late_in_the_grid_stops_the_sweep_before_any_run(small, tmp_path):
    out = tmp_path / "s.parquet"
    p = run_cli("sweep", small, "--grid", "seed=1,2", "--grid", "source.0.rate=10k/s,fast", "--out", out)
    line = assert_user_error(p, "source[0].rate", "fast", "grid point")
    assert "seed=1" in line
    assert not out.exists()


def test_a_metric_missing_from_the_results_is_named(small, tmp_path):
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "f.toml").write_text(
        small.read_text()
        + '\n[[expect]]\nmetric = "no_such_metric"\npublished = 1.0\ntolerance = 0.1\nsource = "test"\n'
        + 'kind = "prediction"\n'
    )
    report = tmp_path / "report"
    p = run_cli("reproduce", "--figures", figs, "--out", report)
    assert_user_error(p, "no_such_metric", "interrupts")
    assert not report.exists()


@pytest.mark.skipif(importlib.util.find_spec("ray") is not None, reason="ray is installed")
def test_ray_backend_without_ray_says_how_to_get_it(small, tmp_path):
    p = run_cli("sweep", small, "--grid", "seed=1", "--backend", "ray", "--out", tmp_path / "s.parquet")
    assert_user_error(p, "ray", "pip install")
    assert not (tmp_path / "s.parquet").exists()


def test_usage_errors_from_typer_keep_exit_2(small):
    p = run_cli("run")  # missing SCENARIO
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
    p = run_cli("run", small, "--seed", "abc")
    assert p.returncode == 2
    assert "Traceback" not in p.stderr
