"""irqlab: a lab for interrupt delivery on servers — simulate, measure, compare.

The simulator lives in the Rust extension `irqlab._core`; this package is the
front end (CLI, sweeps, reproductions, reports). `load` and `run` are thin
path-taking wrappers over the binding for use from notebooks and scripts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from os import PathLike
from pathlib import Path
from typing import Any

try:
    from . import _core
except ImportError as e:  # pragma: no cover - only without a build
    raise ImportError(
        f"irqlab's Rust core (irqlab._core) is not built; run `make setup` (or `maturin develop --release`) first ({e})"
    ) from e

__version__: str = _core.__version__
ScenarioError = _core.ScenarioError

SCENARIOS_DIR = Path(__file__).resolve().parent / "scenarios"

__all__ = ["SCENARIOS_DIR", "ScenarioError", "__version__", "load", "run", "schema"]


def _read(path: str | PathLike[str]) -> tuple[str, str]:
    p = Path(path)
    return p.read_text(encoding="utf-8"), str(path)


def load(path: str | PathLike[str], overrides: Iterable[str] = ()) -> dict[str, Any]:
    """Validate the scenario at `path` and return it normalized (a dict)."""
    text, origin = _read(path)
    scenario: dict[str, Any] = json.loads(_core.load(text, origin, list(overrides)))
    return scenario


def run(
    path: str | PathLike[str],
    overrides: Iterable[str] = (),
    seed: int | None = None,
    trace: bool = False,
) -> tuple[dict[str, Any], bytes | None]:
    """Run the scenario at `path`; returns (result dict, Perfetto trace bytes or None).
    The result carries its `provenance` (irqlab.provenance)."""
    from . import provenance

    text, origin = _read(path)
    overrides = list(overrides)
    result, trace_bytes = _core.run(text, origin, overrides, seed, trace)
    doc: dict[str, Any] = json.loads(result)
    doc["provenance"] = provenance.build(text, origin, overrides, metrics=[*doc["metrics"], *doc["histograms"]])
    return doc, trace_bytes


def schema() -> dict[str, Any]:
    """The JSON Schema of the scenario format."""
    doc: dict[str, Any] = json.loads(_core.schema())
    return doc
