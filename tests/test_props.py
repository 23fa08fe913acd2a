"""Property: any `--set` override of a valid scenario gives a result or a
one-line ScenarioError — never a panic or any other exception."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import irqlab
from conftest import DATA
from helpers import examples
from irqlab import _core

SMALL = (DATA / "small.toml").read_text()


def leaf_paths(v, prefix=""):
    """Every key path of the normalized scenario, with list elements by index."""
    if isinstance(v, dict):
        for k, x in v.items():
            yield from leaf_paths(x, f"{prefix}.{k}" if prefix else k)
    elif isinstance(v, list) and v and isinstance(v[0], dict):
        for i, x in enumerate(v):
            yield from leaf_paths(x, f"{prefix}.{i}")
    else:
        yield prefix


# Keys that scale run time with their value are kept out: the property is about
# input handling, and a 1000-second run would only test patience.
SLOW = {"duration", "stats.series_interval", "trace.max_events"}
PATHS = sorted(p for p in leaf_paths(json.loads(_core.load(SMALL, "small.toml", []))) if p not in SLOW)
EXTRA = ["nosuch", "cpu.nosuch", "source.7.rate", "source[0].cpus[0]", "platform", "cpu..masking", ".", "expect.0"]

values = st.one_of(
    st.integers(-(2**65), 2**65).map(str),
    st.integers(-3, 300).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.sampled_from(["true", "false", "nan", "inf", "-inf", "[]", "[0]", "[0, 1, 99]", "{}", '""', '"x"', "", "  "]),
    st.builds(
        lambda n, u: f"{n}{u}",
        st.one_of(st.integers(-5, 5000), st.floats(-1e3, 1e3, allow_nan=False)),
        st.sampled_from(["ps", "ns", "us", "ms", "s", "k/s", "M/s", "/s", "x", ""]),
    ),
    st.sampled_from(["daif", "pmr", "poisson", "periodic", "syscall", "pagefault", "yield", "none"]),
    st.text(max_size=12),
)
# Control characters in keys are covered by an explicit test below.
printable = st.text(st.characters(blacklist_categories=["Cc", "Cs"]), max_size=10)
keys = st.one_of(st.sampled_from(PATHS), st.sampled_from(EXTRA), printable)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(keys, values), min_size=1, max_size=3))
def test_random_overrides_give_a_result_or_a_scenario_error(sets):
    overrides = [f"{k}={v}" for k, v in sets]
    try:
        raw, trace = _core.run(SMALL, "small.toml", overrides, None, False)
    except irqlab.ScenarioError as e:
        msg = str(e)
        assert msg and "\n" not in msg, repr(msg)
        return
    result = json.loads(raw)
    assert trace is None
    for k, v in result["metrics"].items():
        assert math.isfinite(v), (k, v, overrides)
        if k.endswith("_share"):
            assert -1e-9 <= v <= 1 + 1e-9, (k, v, overrides)


def test_a_key_with_a_newline_still_gives_a_one_line_message():
    with pytest.raises(irqlab.ScenarioError) as e:
        _core.load(SMALL, "small.toml", ["a\nb=1"])
    assert "\n" not in str(e.value), repr(str(e.value))


@settings(max_examples=examples(50), deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_is_rejected_cleanly_or_loads(text):
    try:
        _core.load(text, "fuzz.toml", [])
    except irqlab.ScenarioError as e:
        assert str(e).startswith("fuzz.toml") and "\n" not in str(e), str(e)
