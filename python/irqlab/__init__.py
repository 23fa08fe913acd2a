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
    """The scenario file's text; a missing, unreadable or binary file is a ScenarioError."""
    from ._util import UserError, read_scenario

    try:
        return read_scenario(path)
    except UserError as e:
        raise ScenarioError(str(e)) from None


def _overrides(overrides: Iterable[str] | None) -> list[str]:
    if overrides is None:
        return []
    # A lone string would be taken apart into characters.
    if isinstance(overrides, (str, bytes)):
        raise TypeError(
            f"overrides: expected a list of KEY=VALUE strings, got one string {overrides!r}; wrap it in [...]"
        )
    out = list(overrides)
    bad = [o for o in out if not isinstance(o, str)]
    if bad:
        raise TypeError(f"overrides: expected KEY=VALUE strings, got {bad[0]!r}")
    return out


def _seed(seed: int | None) -> int | None:
    if seed is None:
        return None
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed: expected an integer from 0 to 2^64-1 or None, got {seed!r}")
    if not 0 <= seed < 2**64:
        raise ScenarioError(f"seed {seed}: expected an integer from 0 to 2^64-1")
    return seed


def load(path: str | PathLike[str], overrides: Iterable[str] = ()) -> dict[str, Any]:
    """Validate the scenario at `path` and return it normalized (a dict).

    Raises ScenarioError (a ValueError) for a missing, unreadable or invalid
    scenario or override, TypeError for overrides that are not a list of strings."""
    text, origin = _read(path)
    scenario: dict[str, Any] = json.loads(_core.load(text, origin, _overrides(overrides)))
    return scenario


def run(
    path: str | PathLike[str],
    overrides: Iterable[str] = (),
    seed: int | None = None,
    trace: bool = False,
    force: bool = False,
) -> tuple[dict[str, Any], bytes | None]:
    """Run the scenario at `path`; returns (result dict, Perfetto trace bytes or None).
    The result carries its `provenance` (irqlab.provenance).

    Raises ScenarioError (a ValueError) for a missing, unreadable or invalid
    scenario or override and for a seed outside 0 … 2^64-1; TypeError for
    overrides that are not a list of strings or a seed that is not an integer.
    A run whose estimated events or memory pass the limits is refused
    (ScenarioError naming the key) unless `force`; Ctrl-C stops it
    (KeyboardInterrupt)."""
    from . import provenance
    from ._util import in_worker

    text, origin = _read(path)
    overrides = _overrides(overrides)
    s = _seed(seed)
    result, trace_bytes = in_worker(lambda stop: _core.run(text, origin, overrides, s, trace, stop, force))
    doc: dict[str, Any] = json.loads(result)
    doc["provenance"] = provenance.build(text, origin, overrides, metrics=[*doc["metrics"], *doc["histograms"]])
    return doc, trace_bytes


def schema() -> dict[str, Any]:
    """The JSON Schema of the scenario format."""
    doc: dict[str, Any] = json.loads(_core.schema())
    return doc
