"""Shared plumbing of the CLI: user errors, scenario reading, atomic writes, progress."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import secrets
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text


class UserError(Exception):
    """Bad input from the user: reported as one `error:` line, exit code 2."""


def one_line(msg: str) -> str:
    # The core promises one-line messages; this is a safety net so that a
    # multi-line message (a TOML parser excerpt, say) never breaks the contract.
    parts = [ln.strip() for ln in str(msg).splitlines() if ln.strip()]
    return " ".join(parts) if parts else "unknown error"


#: The files this process read as inputs (resolved paths): no output may replace one.
_inputs: set[str] = set()


def note_input(path: str | os.PathLike[str]) -> None:
    """Records a file read as input, so that `write_all` and `refuse_input_outputs`
    can refuse to overwrite it (`--json scenario.toml` replaced the scenario)."""
    with contextlib.suppress(OSError, ValueError):
        _inputs.add(os.path.realpath(path))


def input_problem(path: str | os.PathLike[str] | None) -> str | None:
    """Why an output at `path` would destroy an input of this command (None: it would not)."""
    if path is None or str(path) == "-":
        return None
    # (A FIFO or device read as input is written through, not replaced.)
    real = os.path.realpath(path)
    if real in _inputs and Path(real).is_file():
        return "it is an input of this command; expected another file"
    return None


def refuse_input_outputs(**outputs: str | os.PathLike[str] | None) -> None:
    """Raises UserError, before any work, if an output option names an input
    file (the scenario, a trace, a --set-from file): `--json=...` as `json`."""
    for flag, path in outputs.items():
        why = input_problem(path)
        if why is not None:
            raise UserError(f"--{flag.replace('_', '-')} {path}: {why}")


# The scenarios that ship with the package (`irqlab.SCENARIOS_DIR`; the clone's
# `scenarios/` is a link to it).
BUNDLED = Path(__file__).resolve().parent / "scenarios"


def bundled_names() -> list[str]:
    """Every bundled scenario as `DIR/STEM` (`examples/md1-queue`), sorted."""
    return sorted(p.relative_to(BUNDLED).with_suffix("").as_posix() for p in BUNDLED.glob("*/*.toml"))


def bundled_scenario(path: str | os.PathLike[str]) -> Path | None:
    """The bundled scenario a relative path that does not exist names, if one does:
    the README's `scenarios/examples/md1-queue.toml` typed outside the clone (or
    after `pip install`), `examples/md1-queue`, or `md1-queue` when only one
    bundled file has that stem."""
    return bundled_file(path, ".toml")


def bundled_file(path: str | os.PathLike[str], suffix: str) -> Path | None:
    """`bundled_scenario` for files with `suffix` (`.parquet`: the bundled traces)."""
    p = Path(path)
    if p.is_absolute() or ".." in p.parts:
        return None
    parts = p.parts[1:] if p.parts[:1] == ("scenarios",) else p.parts
    if not parts:
        return None
    rel = Path(*parts)
    if rel.suffix != suffix:
        rel = rel.with_name(rel.name + suffix)
    if (BUNDLED / rel).is_file():
        return BUNDLED / rel
    if len(rel.parts) == 1:
        found = sorted(BUNDLED.glob(f"*/{rel.name}"))
        if len(found) == 1:
            return found[0]
    return None


def _not_found(origin: str) -> UserError:
    import difflib

    if Path(origin).is_absolute() or ".." in Path(origin).parts:
        return UserError(f"{origin}: no such file")
    stem = Path(origin).with_suffix("").as_posix() if origin.endswith(".toml") else Path(origin).as_posix()
    stem = stem.removeprefix("scenarios/")
    names = bundled_names()
    close = difflib.get_close_matches(stem, names, n=1, cutoff=0.6)
    close += difflib.get_close_matches(Path(stem).name, [n.split("/")[1] for n in names], n=1, cutoff=0.6)
    if close:
        hint = close[0] if "/" in close[0] else next(n for n in names if n.endswith("/" + close[0]))
        return UserError(f"{origin}: no such file, nor a bundled scenario of that name (did you mean {hint}?)")
    return UserError(
        f"{origin}: no such file, nor a bundled scenario of that name"
        f" (bundled: DIR/NAME from {BUNDLED}, e.g. {names[0]})"
    )


#: The most a scenario or `--set-from` file may hold. Bundled scenarios are a
#: few KB; /dev/zero or a mistaken multi-GB file was read whole (24 GB, until
#: the OOM killer ended it, with SIGTERM unheard meanwhile; a review).
MAX_INPUT_BYTES = 64 << 20


def read_text_capped(p: Path, what: str) -> str:
    """The UTF-8 text of `p`, refused (one line naming `what`) past `MAX_INPUT_BYTES`."""
    with p.open("rb") as f:
        data = f.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise UserError(f"{what}: more than {MAX_INPUT_BYTES >> 20} MB, expected a file of at most that")
    return data.decode("utf-8")


def read_scenario(path: str | os.PathLike[str]) -> tuple[str, str]:
    """Return (text, origin) of a scenario file, or raise UserError saying why not.
    A relative path that does not exist may name a bundled scenario
    (`bundled_scenario`): then that file is read, and its path is the origin."""
    origin = str(path)
    if not origin.strip():
        raise UserError("an empty scenario path: expected a scenario file (a path, or a bundled name)")
    p = Path(path)
    if not p.exists() and (b := bundled_scenario(p)) is not None:
        p, origin = b, str(b)
    note_input(p)
    try:
        return read_text_capped(p, origin), origin
    except FileNotFoundError:
        raise _not_found(origin) from None
    except IsADirectoryError:
        raise UserError(f"{origin}: is a directory, expected a scenario file") from None
    except PermissionError:
        raise UserError(f"{origin}: permission denied") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{origin}: not UTF-8 text (byte {e.start})") from None
    except OSError as e:
        raise UserError(f"{origin}: cannot read: {e.strerror or e}") from None


def override_key(key: str) -> str:
    """One key however it is spelt: `source[0].rate` is `source.0.rate`."""
    return re.sub(r"\[(\d+)\]", r".\1", key.strip()).strip(".")


def check_overrides(sets: Sequence[str] | None, flag: str = "--set") -> list[str]:
    """Check the KEY=VALUE shape here so the message names the flag the user typed.
    A key given twice with different values is refused: the last one would
    win without a word, and a sweep script that appends a --set for a key it
    already sets would run the wrong point."""
    out = []
    seen: dict[str, tuple[str, str]] = {}
    for s in sets or ():
        key, eq, value = s.partition("=")
        if not eq or not key.strip():
            raise UserError(f"{flag} {s!r}: expected KEY=VALUE, e.g. {flag} duration=10ms")
        # One value with or without its quotes.
        key = override_key(key)
        value = value.strip()
        plain = value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value
        if key in seen and seen[key][1] != plain:
            raise UserError(f"{flag} {key} given twice ({seen[key][0]}, then {value}): give each key once")
        seen[key] = (value, plain)
        out.append(s)
    return out


TEMP_MARK = ".irqlab-partial-"


def _destination(path: str | os.PathLike[str]) -> tuple[Path, bool]:
    """Where `path` really is, and whether it is written through (a FIFO or a
    device: never replaced) rather than replaced atomically. A symlink is
    followed, so the link stays and its target gets the new content."""
    dest = Path(os.path.realpath(path))
    try:
        mode = dest.stat().st_mode
    except OSError:
        return dest, False
    if stat.S_ISDIR(mode):
        raise UserError(f"{path}: is a directory, expected a file to write")
    return dest, not stat.S_ISREG(mode)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # someone else's process: alive
    return True


def _remove_orphans(dest: Path) -> None:
    """Removes the temp files of `dest` that a killed writer left (SIGKILL runs
    no cleanup): those whose writer's PID, in their name, is gone. A live
    writer's (another irqlab writing the same file) are left alone."""
    prefix = f".{dest.name}{TEMP_MARK}"
    try:
        names = [n for n in os.listdir(dest.parent) if n.startswith(prefix)]
    except OSError:
        return
    for name in names:
        pid = name[len(prefix) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                os.unlink(dest.parent / name)


def _temp_for(dest: Path, path: str | os.PathLike[str]) -> tuple[Path, int]:
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        _remove_orphans(dest)
        # The PID lets a later write of the same file tell a dead writer's temp from a live one's.
        tmp = dest.parent / f".{dest.name}{TEMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
        # os.open with 0o666 honours the umask, unlike mkstemp's 0o600.
        return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:
        raise UserError(f"{path}: cannot write: {e.strerror or e}") from None


def output_problem(path: str | os.PathLike[str], kind: str = "file") -> str | None:
    """Why an output at `path` could not be written, found before any work is
    done (None: it can be). `kind`: "file", "directory", or "any" (a sweep's
    `--out`, either). '-' (stdout) is always fine. Writability is tried, not
    read from permission bits (root passes `os.access` where `/proc` refuses)."""
    if str(path) == "-":
        return None
    try:
        return _output_problem(Path(os.path.realpath(path)), kind)
    except OSError as e:
        # A directory on the way that cannot be searched (not root, /root/x.json).
        return f"cannot reach it ({e.strerror or e})"


def _output_problem(p: Path, kind: str) -> str | None:
    # `p` as `_destination` has it: a symlink's target is what gets written, beside it its temp file.
    if p.exists() and not p.is_file() and not p.is_dir():
        return None  # a FIFO or a device (/dev/null): written through, its directory untouched
    if p.exists():
        if kind == "file" and p.is_dir():
            return "is a directory; expected a file"
        if kind == "directory" and not p.is_dir():
            return "exists and is not a directory; expected a directory"
        if kind != "file" and p.is_dir():
            return _can_create_in(p)
    parent = p.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        return f"{parent} is not a directory"
    return _can_create_in(parent)


def _can_create_in(d: Path) -> str | None:
    """None if a file can be created in `d` (one is, and removed at once)."""
    try:
        with tempfile.TemporaryFile(dir=d):
            return None
    except OSError as e:
        return f"cannot write in {d} ({e.strerror or e})"


def same_file(a: str | os.PathLike[str], b: str | os.PathLike[str]) -> bool:
    """Whether two outputs name one destination (through `./`, `..` or symlinks)."""
    if "-" in (str(a), str(b)):
        return False
    return os.path.realpath(a) == os.path.realpath(b)


def streams_to_file(path: str | os.PathLike[str]) -> bool:
    """Whether an output at `path` can be streamed into a temp file beside it
    (a regular file or a new one), rather than written through (a FIFO, a device)."""
    return not _destination(path)[1]


@contextmanager
def staged_file(path: str | os.PathLike[str]) -> Iterator[Path]:
    """A temp file beside `path` (named as `write_all`'s) for a writer that
    streams into it, such as the core's trace; `write_all(..., staged=[(path,
    temp)])` moves it into place with the other outputs. It is removed if it is
    still there when the block ends (a failure, Ctrl-C)."""
    dest, _ = _destination(path)
    tmp, fd = _temp_for(dest, path)
    os.close(fd)
    try:
        yield tmp
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def write_all(
    outputs: Sequence[tuple[str | os.PathLike[str], bytes | str]],
    staged: Sequence[tuple[str | os.PathLike[str], Path]] = (),
) -> None:
    """Write every (path, data) or none: each regular file goes to a temp file
    beside it first (named `.NAME.irqlab-partial-PID-XXXX`, so nobody takes it
    for a result, and the next write of NAME removes it if a SIGKILL left it) and
    replaces its destination only once all are written; a FIFO or device is
    written through, never replaced. `staged` are (path, temp file)
    already written by a streaming writer (`staged_file`): they replace their
    destinations with the others. On any failure, or Ctrl-C, the temp files are
    removed and no file has changed (a FIFO or device written through before a
    later one failed has had its bytes). So a FIFO is written, waiting for its
    reader, before the files are renamed into place, just after it is closed."""
    # Two outputs to one destination would leave only the last: a bug in the caller.
    names = [p for p, _ in outputs] + [p for p, _ in staged]
    for i, a in enumerate(names):
        if any(same_file(a, b) for b in names[i + 1 :]):
            raise UserError(f"{a}: two outputs name this file")
        # The last guard for a command that did not refuse it up front.
        if (why := input_problem(a)) is not None:
            raise UserError(f"{a}: {why}")
    # (The streaming writer synced its file: the core's trace does.)
    streamed = [(_destination(path)[0], tmp, b"", path) for path, tmp in staged]
    written: list[tuple[Path, Path | None, bytes, str | os.PathLike[str]]] = []
    try:
        for path, data in outputs:
            raw = data.encode("utf-8") if isinstance(data, str) else data
            dest, through = _destination(path)
            if through:
                written.append((dest, None, raw, path))
                continue
            tmp, fd = _temp_for(dest, path)
            written.append((dest, tmp, raw, path))
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(raw)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                raise UserError(f"{path}: cannot write: {e.strerror or e}") from None
        # Written through first: a device or FIFO that fails (`/dev/full`) then
        # leaves every file as it was, where a rename cannot be taken back.
        for target, temp, content, name in written:
            if temp is None:
                try:
                    with open(target, "wb") as f:
                        f.write(content)
                except OSError as e:
                    raise UserError(f"{name}: cannot write: {e.strerror or e}") from None
        for target, temp, _content, _name in [*written, *streamed]:
            if temp is not None:
                os.replace(temp, target)
    finally:
        for item in [*written, *streamed]:
            if item[1] is not None:
                with contextlib.suppress(OSError):
                    os.unlink(item[1])


def atomic_write(path: str | os.PathLike[str], data: bytes | str) -> None:
    """Write `data` to `path` so that readers see the old file or the complete new one
    (`write_all` of one output)."""
    write_all([(path, data)])


T = TypeVar("T")


def in_worker(call: Callable[[Any], T], sim_s: float | None = None) -> T:
    """Run `call(stop_flag)` (a core run, GIL released) in a worker thread while
    this thread waits: Ctrl-C reaches Python only in the main thread, and only
    between bytecodes, so a run on the main thread would ignore it until it
    ended. On Ctrl-C the flag stops the core within a few thousand events and
    KeyboardInterrupt goes on up. With `sim_s` (the run's simulated seconds), a
    run still going after `BAR_AFTER_S` shows a bar of simulated time on a
    terminal (never in CI or a pipe)."""
    from . import _core

    flag = _core.StopFlag()
    box: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            box["value"] = call(flag)
        except BaseException as e:  # handed to the waiting thread
            box["error"] = e
        finally:
            done.set()

    # Waited for with an Event, not Thread.join: in CPython 3.11 a Ctrl-C that
    # lands inside join() can mark the thread finished while it still runs
    # (threading._wait_for_tstate_lock releases the worker's own lock), and the
    # interpreter then exits under a core run that is still returning, which
    # aborts the process (SIGABRT instead of exit 130). And in the main thread
    # Ctrl-C only sets the flag (a handler that raises nothing): a
    # KeyboardInterrupt can land anywhere, even in an `except` block between
    # setting the flag and waiting, and a second Ctrl-C there, seen in CI,
    # let the interpreter leave before the run had.
    interrupted: list[bool] = []

    def on_sigint(_signum: int, _frame: object) -> None:
        interrupted.append(True)
        flag.set()

    own = (
        threading.current_thread() is threading.main_thread()
        and signal.getsignal(signal.SIGINT) is signal.default_int_handler
    )
    previous = signal.signal(signal.SIGINT, on_sigint) if own else None
    t = threading.Thread(target=work, name="irqlab-run", daemon=True)
    try:
        t.start()
        try:
            _wait_with_bar(done, flag, sim_s)
        except BaseException:
            # SIGTERM's SystemExit, or Ctrl-C in a thread that is not the main one.
            flag.set()
            _wait_through_interrupts(done)
            raise
    finally:
        if own:
            signal.signal(signal.SIGINT, previous)
    if interrupted:
        raise KeyboardInterrupt
    if "error" in box:
        raise box["error"]
    result: T = box["value"]
    return result


#: How long a run goes before `in_worker` shows its bar: a quick run shows none.
BAR_AFTER_S = 1.0


def _wait_with_bar(done: threading.Event, flag: Any, sim_s: float | None) -> None:
    """Wait for the run; past `BAR_AFTER_S`, show how far its simulated time has got."""
    start = time.monotonic()
    while not done.wait(0.1):
        if sim_s and sim_s > 0 and time.monotonic() - start >= BAR_AFTER_S and progress_enabled():
            break
    else:
        return
    assert sim_s is not None
    from .cli.summary import human_time  # (cli.summary imports this module)

    columns = [
        TextColumn("simulated"),
        BarColumn(bar_width=None),
        TextColumn("{task.description}"),
        TimeElapsedColumn(),
        TextColumn("elapsed,"),
        TimeRemainingColumn(),
        TextColumn("left"),
    ]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("", total=sim_s)
        while not done.wait(0.1):
            now = min(flag.sim_ps() / 1e12, sim_s)
            bar.update(task, completed=now, description=f"{human_time(now * 1e9)} of {human_time(sim_s * 1e9)}")


def _wait_through_interrupts(done: threading.Event) -> None:
    """Wait for a stopped run to return, even through more interrupts: it stops
    within a few thousand events, and leaving before it has would abort."""
    while True:
        try:
            if done.wait(0.1):
                return
        except BaseException:
            continue


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def progress_enabled() -> bool:
    """Progress bars only for a person at a terminal: never in CI logs or pipes."""
    if _in_ci():
        return False
    return sys.stderr.isatty()


def _duration(s: float) -> str:
    s = max(0, round(s))
    if s >= 3600:
        return f"{s // 3600}h{s % 3600 // 60:02d}m"
    return f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class _Rate(ProgressColumn):
    """Items per second, as `12.3 points/s`."""

    def __init__(self, unit: str) -> None:
        super().__init__()
        self.unit = unit

    def render(self, task: Task) -> Text:
        from .cli.summary import human_rate  # (cli.summary imports this module)

        speed = task.finished_speed or task.speed
        rate = human_rate(speed, f"{self.unit}/s") if speed else f"- {self.unit}/s"
        return Text(rate, style="progress.data.speed")


@contextmanager
def progress(
    label: str, total: int, *, unit: str | None = None, lines: bool = False, quiet: bool = False
) -> Iterator[Callable[[], None]]:
    """Yield an `advance()` callable (call it in one thread): a rich bar on stderr
    at a terminal, else a no-op. With `unit`, the bar also shows the rate (`unit`/s)
    and the time left; with `lines`, a stderr that is not a terminal (a pipe, a
    file; never CI) gets a plain line every `PLAIN_EVERY_S` seconds and one at
    the end. `quiet`: nothing at all."""
    if quiet or total <= 0 or _in_ci() or not (sys.stderr.isatty() or lines):
        yield lambda: None
        return
    if not sys.stderr.isatty():
        yield _plain_lines(label, total, unit or "items")
        return
    # The bar takes what the other columns leave: the line fits an 80-column terminal.
    columns: list[Any] = [TextColumn("{task.description}"), BarColumn(bar_width=None), MofNCompleteColumn()]
    if unit:
        columns += [_Rate(unit), TimeElapsedColumn(), TextColumn("elapsed,"), TimeRemainingColumn(), TextColumn("left")]
    else:
        columns.append(TimeElapsedColumn())
    bar = Progress(*columns, console=Console(stderr=True), transient=True)
    with bar:
        task = bar.add_task(label, total=total)
        yield lambda: bar.advance(task)


#: How often `progress(lines=True)` writes a line when stderr is not a terminal.
PLAIN_EVERY_S = 10.0


def _plain_lines(label: str, total: int, unit: str) -> Callable[[], None]:
    start = last = time.monotonic()
    done = 0

    def advance() -> None:
        nonlocal done, last
        done += 1
        now = time.monotonic()
        if now - last < PLAIN_EVERY_S and done < total:
            return
        last = now
        rate = done / (now - start) if now > start else 0.0
        left = f", about {_duration((total - done) / rate)} left" if rate and done < total else ""
        msg = f"{label}: {done}/{total} {unit}, {rate:.3g}/s, {_duration(now - start)} elapsed{left}\n"
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(msg)
            sys.stderr.flush()

    return advance


def duration_s(text: str, origin: str, overrides: list[str]) -> float:
    """A scenario's simulated duration (warm-up included), in seconds."""
    from . import _core

    duration: str = json.loads(_core.load(text, origin, overrides))["duration"]
    return time_ns(duration) / 1e9


def time_ns(t: str) -> float:
    """A time as scenarios write it ("40ns", "1500ps", "0s"), in ns: parsed by the
    core's own parser, so Python and Rust never disagree on a unit."""
    from . import _core

    return _core.parse_time_ps(t) / 1e3


#: `irqlab measure` metrics that time a whole pass of a loop (user work, entry,
#: kernel work, exit): put on a task's body they set its `per_op`, so the model's
#: own entry and exit costs are not added on top of a measured whole call.
WHOLE_PASS = tuple(f"{m}{end}" for m in ("ns_per_call", "ns_per_op", "ns_per_fault") for end in ("", "_min", "_max"))
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


def check_measured(
    text: str,
    origin: str,
    before: Sequence[str],
    measured: Sequence[str],
    after: Sequence[str],
    specs: Sequence[str] | None,
) -> None:
    """A measured value the scenario refuses is named by its `--set-from`, where the
    core named it as a `--set` the user never typed (`--set source.0.handler=-5ns`).
    `measured` is `set_from(specs)`, one override per spec, applied between `before`
    (a variant's) and `after` (the user's `--set`s). Checked as the run applies them,
    all together: the core compares keys with each other (a `per_op` against its
    `cpu.exception_entry`), so a value refused alone may be right with the rest.
    Only when the whole is refused and the rest alone is not is the first
    `--set-from` that breaks it named; otherwise the core's own error stands."""
    from . import _core

    def refusal(overrides: list[str]) -> str | None:
        try:
            _core.load(text, origin, overrides)
        except _core.ScenarioError as e:
            return one_line(str(e))
        return None

    if not measured or refusal([*before, *measured, *after]) is None or refusal([*before, *after]) is not None:
        return
    for k, (ov, spec) in enumerate(zip(measured, specs or [], strict=True)):
        why = refusal([*before, *measured[: k + 1], *after])
        if why is not None:
            why = why.removeprefix(f"{origin}: ").removeprefix(f"--set {ov}: ")
            raise UserError(f"--set-from {spec} (measured: {ov}): {why}")


def refuse_set_and_set_from(sets: Sequence[str] | None, specs: Sequence[str] | None) -> None:
    """A --set of a key a --set-from also sets (or of `task.N.body` when the
    measured whole pass sets `task.N.per_op`, which takes over from the body)
    would be overridden without a word: refuse the pair."""
    for spec in specs or []:
        asked = spec.rpartition("=")[2].strip()
        target = _set_from_targets([spec])[0][0]
        for s in sets or []:
            k = s.partition("=")[0].strip()
            if k in (asked, target):
                raise UserError(
                    f"--set {s} and --set-from {spec} both set {target}"
                    + (f" (the measured whole pass replaces {k})" if k != target else "")
                    + ": expected one of them"
                )


def measured_keys(specs: Sequence[str] | None) -> dict[str, str]:
    """The keys `--set-from` sets, and where each value comes from (`FILE:METRIC`)."""
    return {key: f"{path}:{metric}" for key, metric, path in _set_from_targets(specs)}


# `--set-from FILE:host.cpuidle=cpu.idle_state`: the idle states a measurement's host had.
HOST_CPUIDLE = "host.cpuidle"


def _idle_states(doc: Any, path: str) -> str:
    """The enabled idle states of the host that `doc` (an `irqlab measure` or
    `host monitor` result) was measured on, as `cpu.idle_state`'s TOML value:
    sysfs's `latency` and `residency` (µs) are the states' exit latency and
    target residency."""
    host = doc.get("host") if isinstance(doc, dict) else None
    idle = host.get("cpuidle") if isinstance(host, dict) else None
    states = idle.get("states") if isinstance(idle, dict) else None
    if not isinstance(states, list):
        raise UserError(
            f"--set-from {path}: no host.cpuidle (the host had no cpuidle, or this is not the --json of "
            "irqlab measure or host monitor)"
        )
    out = []
    for st in states:
        if not isinstance(st, dict) or st.get("disabled"):
            continue
        name, lat, res = st.get("name"), st.get("latency_us"), st.get("residency_us")
        if not (isinstance(name, str) and name and all(type(v) is int and v >= 0 for v in (lat, res))):
            raise UserError(
                f"--set-from {path}: host.cpuidle state {st!r}: expected a name, latency_us and residency_us"
            )
        # (A metric's name part: "haltpoll idle" reads cpuidle.haltpoll_idle.wakes_per_s.)
        label = "_".join(name.split())
        out.append(f'{{name = {json.dumps(label)}, exit = "{lat}us", residency = "{res}us"}}')
    if not out:
        raise UserError(f"--set-from {path}: host.cpuidle has no enabled state")
    return "[" + ", ".join(out) + "]"


def set_from(specs: Sequence[str] | None) -> list[str]:
    """`--set-from FILE:METRIC=KEY.PATH`: a value from a result JSON (e.g. `irqlab
    measure syscall --json`) becomes the override `KEY.PATH=VALUE`; metrics in
    ns (`ns_per_call`) get their unit, so a measured cost sets a scenario cost. A
    whole pass (`WHOLE_PASS`) put on `task.N.body` sets `task.N.per_op` instead:
    the body becomes what the measured call leaves after the modelled user work,
    entry and exit. `host.cpuidle` is not a metric: it sets `cpu.idle_state` to
    the measured host's enabled idle states."""
    out = []
    for key, metric, path in _set_from_targets(specs):
        note_input(path)
        try:
            doc = json.loads(read_text_capped(Path(path), f"--set-from {path}"))
        except OSError as e:
            raise UserError(f"--set-from {path}: cannot read it ({e.strerror})") from None
        except ValueError:
            raise UserError(f"--set-from {path}: not JSON (expected the --json output of an irqlab command)") from None
        if metric == HOST_CPUIDLE:
            out.append(f"{key}={_idle_states(doc, path)}")
            continue
        metrics = doc.get("metrics") if isinstance(doc, dict) else None
        if not isinstance(metrics, dict):
            metrics = {}
        value = metrics.get(metric)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            if metric in metrics:
                # As the file writes it (`true`, `null`), not as Python would (`True`, `None`).
                shown = json.dumps(value)
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                raise UserError(f"--set-from {path}: metric {metric!r} is {shown}, expected a number")
            numeric = sorted(k for k, v in metrics.items() if isinstance(v, (int, float)))
            known = ", ".join(numeric) or "(no numeric metrics)"
            raise UserError(f"--set-from {path}: no metric {metric!r}; it has: {known}")
        v = float(value)
        if not math.isfinite(v):
            raise UserError(f"--set-from {path}: metric {metric!r} is {v}, expected a finite number")
        # A whole number stays one (3, not 3.0, which a count refuses).
        text = str(int(v)) if v.is_integer() and abs(v) < 2**53 else repr(v)
        out.append(f"{key}={text}ns" if metric.startswith("ns_") or metric.endswith("_ns") else f"{key}={text}")
    return out


@contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C or SIGTERM during the block takes effect at its end: for the steps
    that must not stop half-way (a sweep writing its last part, merging its
    file and removing its parts). An interrupt there had left a temp file, or a
    finished file beside half its parts (an audit). Only in the main thread,
    where Python runs signal handlers."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []

    def hold(signum: int, _frame: object) -> None:
        held.append(signum)

    old = {sig: signal.signal(sig, hold) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if held:
            # What would have happened then happens now: the handler in place
            # (the CLI's raises Terminated for SIGTERM), or Python's Ctrl-C.
            first = signal.Signals(held[0])
            handler = old[first]
            if callable(handler):
                handler(first, None)
            elif first == signal.SIGINT:
                raise KeyboardInterrupt
