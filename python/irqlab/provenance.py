"""Where a result comes from: the scenario as run (overrides applied), the
overrides, the irqlab version and commit, each parameter's status, and the
metrics that depend on a cost left at its zero default.

A parameter is *fitted on* a named figure (an `[[expect]]` of kind "fit" lists
it), *measured* (it came from `--set-from`), *set* on the command line or by a
figure variant, *sourced* (the scenario's `[cite]` table says where it comes
from), *assumed* (the scenario writes it without a source) or a *default* (the
model's value; nobody chose it).
"""

from __future__ import annotations

import fnmatch
import json
import subprocess
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from . import _core

#: Sections that describe the run rather than the system modelled.
_NOT_PARAMETERS = {"name", "description", "expect", "cite", "stats", "trace", "seed", "duration", "warmup"}


_commit: str | None = None


def commit() -> str:
    """The git commit of this checkout (`-dirty` with uncommitted changes), or "unknown".

    Read once and kept, unless `git` was stopped by a signal or timed out: a
    Ctrl-C that reached it mid-sweep had every later part say "unknown", which
    `--resume` then refused as another irqlab's (an audit)."""
    global _commit
    if _commit is None:
        value, settled = _read_commit()
        if not settled:
            return value
        _commit = value
    return _commit


def _read_commit() -> tuple[str, bool]:
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(here), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except subprocess.CalledProcessError as e:
        return "unknown", e.returncode >= 0  # a negative code: killed by a signal
    except subprocess.TimeoutExpired:
        return "unknown", False
    except (OSError, subprocess.SubprocessError):
        return "unknown", True
    return (head + ("-dirty" if dirty else "") if head else "unknown"), True


def leaves(doc: Any, prefix: str = "") -> dict[str, Any]:
    """Key path (`task.0.body`, as `--set` writes it) -> value, for every scalar in `doc`."""
    out: dict[str, Any] = {}
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.update(leaves(v, f"{prefix}{k}."))
    elif isinstance(doc, list) and any(isinstance(v, (dict, list)) for v in doc):
        for i, v in enumerate(doc):
            out.update(leaves(v, f"{prefix}{i}."))
    else:
        out[prefix[:-1]] = doc
    return out


def _written(text: str, origin: str) -> set[str]:
    """The key paths the scenario file itself writes."""
    try:
        raw = json.loads(text) if origin.endswith(".json") else tomllib.loads(text)
    except ValueError:
        return set()
    return set(leaves(raw))


def _override_keys(overrides: Iterable[str]) -> list[str]:
    return [o.split("=", 1)[0].strip() for o in overrides]


def build(
    text: str,
    origin: str,
    overrides: Sequence[str],
    measured: Mapping[str, str] | None = None,
    metrics: Iterable[str] = (),
) -> dict[str, Any]:
    """The `provenance` of a run of `text` with `overrides`; `measured` maps the
    keys that `--set-from` set to where their value came from."""
    measured = dict(measured or {})
    resolved = json.loads(_core.load(text, origin, list(overrides)))
    written = _written(text, origin)
    fitted: dict[str, list[str]] = {}
    for e in resolved.get("expect", []):
        if e.get("kind") == "fit":
            for key in e.get("fitted", []):
                fitted.setdefault(key, []).append(e.get("name") or resolved.get("name", ""))
    cite: dict[str, str] = resolved.get("cite", {})
    set_keys = set(_override_keys(overrides)) - set(measured)

    def under(key: str, keys: Iterable[str]) -> str | None:
        """The override in `keys` that wrote `key`: itself, or a table or list
        it lies in (`cpu.idle_state` for `cpu.idle_state.0.exit`)."""
        return next((k for k in keys if key == k or key.startswith(k + ".")), None)

    status: dict[str, str] = {}
    for key, value in sorted(leaves(resolved).items()):
        # Parts the scenario does not have (null, []) and labels are not parameters.
        if key.split(".", 1)[0] in _NOT_PARAMETERS or value is None or value == [] or key.endswith(".name"):
            continue
        if (m := under(key, measured)) is not None:
            status[key] = f"measured: {measured[m]}"
        elif under(key, set_keys) is not None:
            status[key] = "set"
        elif key in fitted:
            status[key] = "fitted on " + ", ".join(fitted[key])
        elif key in cite:
            status[key] = f"sourced: {cite[key]}"
        elif key in written:
            status[key] = "assumed"
        else:
            status[key] = "default"
    zero = {
        key: globs
        for key, globs in _core.zero_costs(text, origin, list(overrides))
        if key not in written and key not in set_keys and key not in measured
    }
    names = list(metrics)
    flagged = {
        m: sorted(k for k, globs in zero.items() if any(fnmatch.fnmatchcase(m, g) for g in globs)) for m in names
    }
    return {
        "irqlab": _core.__version__,
        "commit": commit(),
        "overrides": list(overrides),
        "scenario": resolved,
        "parameters": status,
        "zero_default_costs": zero,
        "flagged_metrics": {m: ks for m, ks in flagged.items() if ks},
    }


def counts(prov: Mapping[str, Any]) -> dict[str, int]:
    """How many parameters have each status (fitted/sourced/measured/set/assumed/default)."""
    out: dict[str, int] = {}
    for s in prov.get("parameters", {}).values():
        kind = s.split(" ", 1)[0].rstrip(":")
        out[kind] = out.get(kind, 0) + 1
    return out
