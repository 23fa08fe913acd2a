"""What the commands print: the consoles, number formatting, result tables and JSON output."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .._util import atomic_write

#: The exit status when the reader of stdout went away (`irqlab run ... | head -1`):
#: a Unix tool's that SIGPIPE ended. (Python ignores SIGPIPE, and a sweep's Ray
#: or Dask sockets need it ignored, so the status is given by hand.)
EXIT_PIPE = 128 + 13


def stdout_gone() -> None:
    """Points stdout at /dev/null, so that the interpreter's last flush of what
    is still buffered fails no more (it would print its own message)."""
    _to_devnull(sys.stdout)


def _to_devnull(stream: Any) -> None:
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, stream.fileno())


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """Rich's own ends the program with status 1, which reads as a failure."""
        self.quiet = True
        stdout_gone()
        raise SystemExit(EXIT_PIPE)


class _ErrConsole(Console):
    def on_broken_pipe(self) -> None:
        """stderr's reader went away too (`2>&1 | head`, where the last lines go to
        stderr after stdout): the same exit as stdout's, not rich's 1 (an audit)."""
        self.quiet = True
        _to_devnull(sys.stderr)
        raise SystemExit(EXIT_PIPE)


out = _Console(highlight=False)
err = _ErrConsole(stderr=True, highlight=False)

STDOUT = "-"
HIST_STATS = ["count", "mean", "min", "p50", "p90", "p99", "p99.9", "p99.99", "max"]


def fmt(v: Any) -> str:
    if v is None:
        return "n/a"  # a metric with no value (null in JSON), as the other tables write it
    if isinstance(v, bool):
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    if isinstance(v, float):
        # At least as many significant digits as the integer part: no 3.3e+06 for counts.
        digits = max(6, len(str(int(abs(v)))) if abs(v) < 1e18 else 6)
        return f"{v:,.{digits}g}"
    return str(v)


def dump(doc: Any) -> str:
    return json.dumps(doc, indent=2) + "\n"


def write_json(dest: Path, doc: Any) -> None:
    if str(dest) == STDOUT:
        sys.stdout.write(dump(doc))
    else:
        atomic_write(dest, dump(doc))


def to_stdout(dest: Path | None) -> bool:
    """Whether `--json` sends the JSON to stdout (then it is the only output)."""
    return str(dest) == STDOUT


def hist_table(hists: dict[str, dict[str, Any]]) -> Table:
    # A few histograms read best one per column (fits 80 columns); many, one per row.
    t = Table(title="histograms", title_justify="left", box=box.SIMPLE_HEAD)
    if len(hists) <= 4:
        t.add_column("")
        for name, h in hists.items():
            t.add_column(f"{name} ({h.get('unit', '')})", justify="right")
        for s in HIST_STATS:
            t.add_row(s, *(fmt(h.get(s)) for h in hists.values()))
        return t
    t.add_column("histogram", no_wrap=True)
    for s in HIST_STATS:
        t.add_column(s, justify="right")
    t.add_column("unit")
    for name, h in hists.items():
        t.add_row(name, *(fmt(h.get(s)) for s in HIST_STATS), str(h.get("unit", "")))
    return t


def print_header(result: dict[str, Any], variant: str | None = None) -> None:
    """Where a result comes from: scenario (and variant), seed, version, and the parameters' statuses."""
    prov = result.get("provenance") or {}
    name = escape(str(result.get("scenario", "?")))
    head = f"[bold]{name}[/bold]"
    if variant is not None:
        head += f'  variant "{escape(variant)}"'
    if result.get("seed") is not None:  # a measurement has none
        head += f"  seed {result['seed']}"
    head += f"  irqlab {result.get('version')}"
    if prov:
        # The commit's short form (all of it is in the JSON's provenance).
        commit = str(prov.get("commit"))
        head += f" ({commit[:12]}{'-dirty' if commit.endswith('-dirty') else ''})"
    out.print(head, soft_wrap=True)
    if prov:
        from ..provenance import counts

        c = counts(prov)
        n_over = len(prov.get("overrides", []))
        parts = [f"{c[k]} {k}" for k in ("fitted", "measured", "sourced", "set", "assumed", "default") if c.get(k)]
        out.print(f"parameters: {', '.join(parts)}; {n_over} override(s)", markup=False, soft_wrap=True)


def note_flagged(prov: dict[str, Any]) -> None:
    """On stderr: the zero-default costs that the metrics marked `*` depend on."""
    if prov.get("flagged_metrics"):
        zero = prov.get("zero_default_costs", {})
        err.print(
            f"* depends on a cost left at its zero default: {', '.join(sorted(zero))}",
            markup=False,
            soft_wrap=True,
        )


def print_result(result: dict[str, Any]) -> None:
    """A human summary of a result: where it comes from, metrics, then histogram percentiles."""
    prov = result.get("provenance") or {}
    print_header(result)
    flagged: dict[str, list[str]] = prov.get("flagged_metrics", {})
    mt = Table(title="metrics", title_justify="left", box=box.SIMPLE_HEAD)
    mt.add_column("metric")
    mt.add_column("value", justify="right")
    for k, v in result.get("metrics", {}).items():
        mt.add_row(k + (" *" if k in flagged else ""), fmt(v))
    out.print(mt)
    note_flagged(prov)
    hists = result.get("histograms", {})
    if hists:
        out.print(hist_table(hists))
    series = result.get("series", {})
    if series:
        out.print(f"series: {', '.join(series)} (in --json)")


def emit(result: dict[str, Any], json_out: Path | None) -> None:
    """The usual ending of a result command: JSON if asked, a summary unless the JSON went to stdout."""
    if json_out is not None:
        write_json(json_out, result)
    if not to_stdout(json_out):
        print_result(result)
