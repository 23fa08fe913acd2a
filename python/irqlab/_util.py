"""Shared plumbing of the CLI: user errors, scenario reading, atomic writes, progress."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class UserError(Exception):
    """Bad input from the user: reported as one `error:` line, exit code 2."""


def one_line(msg: str) -> str:
    # The core promises one-line messages; this is a safety net so that a
    # multi-line message (a TOML parser excerpt, say) never breaks the contract.
    parts = [ln.strip() for ln in str(msg).splitlines() if ln.strip()]
    return " ".join(parts) if parts else "unknown error"


def read_scenario(path: str | os.PathLike[str]) -> tuple[str, str]:
    """Return (text, origin) of a scenario file, or raise UserError saying why not."""
    origin = str(path)
    p = Path(path)
    try:
        return p.read_text(encoding="utf-8"), origin
    except FileNotFoundError:
        raise UserError(f"{origin}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{origin}: is a directory, expected a scenario file") from None
    except PermissionError:
        raise UserError(f"{origin}: permission denied") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{origin}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise UserError(f"{origin}: cannot read: {e.strerror or e}") from None


def check_overrides(sets: Sequence[str] | None, flag: str = "--set") -> list[str]:
    """Check the KEY=VALUE shape here so the message names the flag the user typed."""
    out = []
    for s in sets or ():
        key, eq, _ = s.partition("=")
        if not eq or not key.strip():
            raise UserError(f"{flag} {s!r}: expected KEY=VALUE, e.g. {flag} duration=10ms")
        out.append(s)
    return out


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Write `data` to `path` so that readers see the old file or the complete new one.

    The temp file lives in the destination directory because os.replace is only
    atomic within one file system.
    """
    dest = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.parent / f".{dest.name}.{secrets.token_hex(4)}.tmp"
        # os.open with 0o666 honours the umask, unlike mkstemp's 0o600.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise UserError(f"{path}: cannot write: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, dest)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError):
            raise UserError(f"{path}: cannot write: {e.strerror or e}") from None
        raise


def progress_enabled() -> bool:
    """Progress bars only for a person at a terminal: never in CI logs or pipes."""
    if os.environ.get("CI", "").strip().lower() in ("1", "true", "yes"):
        return False
    return sys.stderr.isatty()


@contextmanager
def progress(label: str, total: int) -> Iterator[Callable[[], None]]:
    """Yield an `advance()` callable; a rich bar on stderr if enabled, else a no-op."""
    if not progress_enabled() or total <= 0:
        yield lambda: None
        return
    bar = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


def time_ns(t: str) -> float:
    """A time as scenarios write it ("40ns", "1500ps", "0s"), in ns: parsed by the
    core's own parser, so Python and Rust never disagree on a unit."""
    from . import _core

    return _core.parse_time_ps(t) / 1e3


#: `irqlab measure` metrics that time a whole pass of a loop (user work, entry,
#: kernel work, exit): put on a task's body they set its `per_op`, so the model's
#: own entry and exit costs are not added on top of a measured whole call.
WHOLE_PASS = ("ns_per_call", "ns_per_op", "ns_per_fault")
_BODY = re.compile(r"task\.(\d+)\.body")


def _set_from_targets(specs: Sequence[str] | None) -> list[tuple[str, str, str]]:
    """(key, metric, file) per `--set-from FILE:METRIC=KEY.PATH`, with a whole
    pass aimed at `task.N.body` re-aimed at `task.N.per_op`."""
    out = []
    for spec in specs or []:
        src, sep, key = spec.rpartition("=")
        path, sep2, metric = src.rpartition(":")
        if not (sep and sep2 and path and metric and key):
            raise UserError(
                f"--set-from {spec!r}: expected FILE:METRIC=KEY.PATH, like syscall.json:ns_per_call=task.0.body"
            )
        key = key.strip()
        m = _BODY.fullmatch(key)
        if m and metric in WHOLE_PASS:
            key = f"task.{m.group(1)}.per_op"
        out.append((key, metric, path))
    return out


def measured_keys(specs: Sequence[str] | None) -> dict[str, str]:
    """The keys `--set-from` sets, and where each value comes from (`FILE:METRIC`)."""
    return {key: f"{path}:{metric}" for key, metric, path in _set_from_targets(specs)}


def set_from(specs: Sequence[str] | None) -> list[str]:
    """`--set-from FILE:METRIC=KEY.PATH`: a value from a result JSON (e.g. `irqlab
    measure syscall --json`) becomes the override `KEY.PATH=VALUE`; metrics in
    ns (`ns_per_call`) get their unit, so a measured cost sets a scenario cost. A
    whole pass (`WHOLE_PASS`) put on `task.N.body` sets `task.N.per_op` instead:
    the body becomes what the measured call leaves after the modelled user work,
    entry and exit."""
    out = []
    for key, metric, path in _set_from_targets(specs):
        try:
            doc = json.loads(Path(path).read_text(encoding="utf-8"))
        except OSError as e:
            raise UserError(f"--set-from {path}: cannot read it ({e.strerror})") from None
        except ValueError:
            raise UserError(f"--set-from {path}: not JSON (expected the --json output of an irqlab command)") from None
        metrics = doc.get("metrics") if isinstance(doc, dict) else None
        if not isinstance(metrics, dict) or not isinstance(metrics.get(metric), (int, float)):
            known = ", ".join(sorted(metrics)) if isinstance(metrics, dict) else "(no metrics)"
            raise UserError(f"--set-from {path}: no metric {metric!r}; it has: {known}")
        v = float(metrics[metric])
        out.append(f"{key}={v!r}ns" if metric.startswith("ns_") or metric.endswith("_ns") else f"{key}={v!r}")
    return out
