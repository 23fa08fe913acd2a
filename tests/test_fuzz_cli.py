"""CLI fuzzing (issue 11): random option lists, built from the options the
commands have and the values a hostile user types, never end in a traceback;
every refusal is one `error:` line with exit 2. `make test-long` searches 40x
longer."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import examples
from irqlab.cli import main

KEYS = [
    "duration",
    "warmup",
    "seed",
    "platform.cpus",
    "source.0.rate",
    "source.0.count",
    "source.0.handler",
    "task.0.work",
    "task.0.body",
    "task.0.exception",
    "cpu.masking",
    "fabric.slots",
    "fabric.msi_write",
    "nope",
]
VALUES = [
    "0",
    "1",
    "-1",
    "2",
    "4294967296",
    "1e12",
    "nan",
    "inf",
    "abc",
    "",
    "1us",
    "0ns",
    "3ms",
    "1e12/s",
    "10k/s",
    "true",
    "[]",
    "[0, 1]",
    "{}",
    '"pmr"',
    '"syscall"',
    "18446744073709551616",
]


def options() -> st.SearchStrategy[list[str]]:
    kv = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), st.sampled_from(VALUES))
    one = st.one_of(
        st.tuples(st.just("--set"), kv),
        st.tuples(st.just("--seed"), st.sampled_from(VALUES)),
        st.tuples(st.just("--grid"), kv),
        st.tuples(st.just("--workers"), st.sampled_from(VALUES)),
        st.tuples(st.just("--zzz")),
        st.tuples(st.sampled_from(VALUES)),
    )
    return st.lists(one, max_size=4).map(lambda xs: [a for x in xs for a in x])


@settings(
    max_examples=examples(25),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(command=st.sampled_from(["run", "validate", "sweep", "whatif"]), opts=options())
def test_random_options_end_in_a_result_or_one_error_line(
    command: str, opts: list[str], small: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("IRQLAB_MAX_EVENTS", "1e6")  # whatever the options say, runs stay short
    args = [command] + ([str(small)] if command != "whatif" else []) + opts
    with pytest.raises(SystemExit) as ex:
        main(args)
    err = capsys.readouterr().err
    assert ex.value.code in (0, 2), (args, ex.value.code, err)
    assert "Traceback" not in err, (args, err)
    if ex.value.code == 2:
        lines = [ln for ln in err.strip().splitlines() if ln]
        assert len(lines) == 1 and lines[0].startswith("error: "), (args, err)
