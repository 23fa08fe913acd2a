"""The one shape of every `--json` result: `irqlab run` (built by the core),
`bench`, `measure` and `monitor` (built here) share it, so a consumer reads
them all the same way."""

from __future__ import annotations

from typing import Any

from . import _core

#: Keys every result document has.
KEYS = ("scenario", "seed", "version", "metrics", "histograms", "series", "tables")


def document(
    scenario: str | None,
    seed: int | None,
    metrics: dict[str, float],
    histograms: dict[str, Any] | None = None,
    series: dict[str, Any] | None = None,
    tables: dict[str, Any] | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """A result document; `extra` adds command-specific keys (`host`, `params`)."""
    doc: dict[str, Any] = {
        "scenario": scenario,
        "seed": seed,
        "version": _core.__version__,
        "metrics": metrics,
        "histograms": histograms or {},
        "series": series or {},
        "tables": tables or {},
    }
    clash = set(extra) & set(doc)
    if clash:
        raise ValueError(f"extra keys {sorted(clash)} would replace the result's own")
    doc.update(extra)
    return doc
