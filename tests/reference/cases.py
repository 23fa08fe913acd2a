"""The reference runs that pin the model's results while its structure changes
(the architecture issue): every bundled scenario, every figure variant (an
`[[expect]]` entry's `set`), and the tests' own scenarios, each run with a
Perfetto trace. `regen.py` writes what they give to `reference.json.gz`;
`tests/test_reference.py` checks that a build still gives exactly that."""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Any, Iterator

import irqlab
from irqlab import _core

HERE = Path(__file__).resolve().parent
REFERENCE = HERE / "reference.json.gz"
TESTS = HERE.parent


def cases() -> Iterator[tuple[str, Path, list[str]]]:
    """(case id, scenario path, overrides) for every reference run."""
    roots = [irqlab.SCENARIOS_DIR / d for d in ("figures", "examples", "bench")] + [TESTS / "data"]
    for root in roots:
        for path in sorted(root.glob("*.toml")):
            doc = tomllib.loads(path.read_text())
            if any("replay" in src for src in doc.get("source", [])):
                continue  # runs only with its recorded trace (`irqlab replay`, tests/test_host.py)
            variants: list[list[str]] = [[]]
            for exp in doc.get("expect", []):
                sets = list(exp.get("set", []))
                if sets not in variants:
                    variants.append(sets)
            for sets in variants:
                yield f"{root.name}/{path.stem}" + ("" if not sets else " " + " ".join(sets)), path, sets


def run_case(path: Path, sets: list[str]) -> dict[str, Any]:
    """The result document and the trace's hash (the trace itself is large)."""
    text = path.read_text()
    result, trace = _core.run(text, str(path.name), sets, None, True)
    doc = json.loads(result)
    return {
        "metrics": doc["metrics"],
        "histograms": doc["histograms"],
        "series": doc["series"],
        "trace_sha256": hashlib.sha256(trace or b"").hexdigest(),
    }
