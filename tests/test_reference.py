"""Results do not move while the structure does: every bundled scenario and
figure variant gives exactly the metrics, histograms, series and trace bytes
recorded in tests/reference/reference.json.gz (written by regen.py on the
commit the architecture issue started from). A result may gain fields; none
may change or disappear. A change meant to move results regenerates the file
in the same commit and says why."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "reference"))
from cases import REFERENCE, cases, run_case

REF = json.loads(gzip.decompress(REFERENCE.read_bytes()))
CASES = list(cases())


def test_every_case_has_a_reference() -> None:
    assert sorted(c for c, _, _ in CASES) == sorted(REF)


@pytest.mark.parametrize("case,path,sets", CASES, ids=[c for c, _, _ in CASES])
def test_results_match_the_reference(case: str, path: Path, sets: list[str]) -> None:
    ref, got = REF[case], run_case(path, sets)
    for part in ("metrics", "histograms", "series"):
        missing = sorted(set(ref[part]) - set(got[part]))
        assert not missing, f"{case}: {part} lost {missing[:5]}"
        changed = [k for k in ref[part] if ref[part][k] != got[part][k]]
        assert not changed, f"{case}: {part} changed: " + ", ".join(
            f"{k} {ref[part][k]!r} -> {got[part][k]!r}" for k in changed[:3]
        )
    assert got["trace_sha256"] == ref["trace_sha256"], f"{case}: the trace bytes changed"
