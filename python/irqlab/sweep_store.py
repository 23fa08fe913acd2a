"""Where a sweep's rows go: memory, or a Parquet dataset written as runs end,
so that a sweep killed at any moment keeps what it finished and `--resume`
runs only the rest.

A dataset is a directory:

    PATH/_manifest.json        the sweep's definition, columns, and which point keys are done
    PATH/part-000001.parquet   rows of the runs that ended together, sorted by point
    PATH/part-000002.parquet   ...

Every file is written to a temp name beside it (`.NAME.irqlab-partial-XXXX`)
and renamed into place, so a reader sees a part whole or not at all; pyarrow
skips names starting with `.` or `_`, and DuckDB's `PATH/*.parquet` matches
neither the manifest nor a temp file. A run's row reaches a part within
`FLUSH_S` seconds of its end (the first one at once), plus the time the part
takes to write; parts are started at most once per `FLUSH_S`.

The parts, not the manifest, say what is done: a kill between a part's rename
and the manifest's leaves a part the manifest does not list yet, and resuming
counts it. pyarrow and DuckDB take a dataset's columns from its first part (in
name order), and DuckDB refuses a later part that lacks one of them; so the
parts' column sets only grow with the part number, and when a run brings new
columns (another CPU count, say) the new part gets them all and the older parts
are rewritten, newest first, to the same columns. At every moment the first
part's columns are in every part: the dataset reads as one table, with all its
rows.

`--out NAME.parquet` is one file, as before: the dataset lives beside it in
`NAME.parquet.parts/` while the sweep runs and is merged into `NAME.parquet`
(rows in grid order, the same bytes whatever the backend or worker count) when
every run has ended; the directory is then removed."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from . import _core
from ._util import TEMP_MARK, UserError, atomic_write, one_line
from .sweep import Sweep, conform, parquet_bytes, schema, sort_rows

FORMAT = "irqlab.sweep"
VERSION = 1
MANIFEST = "_manifest.json"
#: Held (flock) by the sweep writing a dataset, so that a second one (a
#: `--resume` while the first still runs) is refused instead of duplicating rows.
LOCK = ".irqlab-sweep.lock"
#: A finished run reaches disk within this many seconds.
FLUSH_S = 1.0
_PART = re.compile(r"part-(\d{6,})\.parquet")


def _part_name(seq: int) -> str:
    return f"part-{seq:06d}.parquet"


def is_single_file(out: Path) -> bool:
    return out.suffix.lower() == ".parquet"


def sidecar(out: Path) -> Path:
    """Where the dataset of `--out NAME.parquet` lives until it is merged."""
    return out.with_name(out.name + ".parts")


def _ours_only(name: str) -> bool:
    """A file a dataset may hold that is not data: the lock, a temp file."""
    return name == LOCK or (name.startswith(".") and TEMP_MARK in name)


def _non_empty(p: Path) -> bool:
    try:
        if p.is_dir():
            return any(not _ours_only(c.name) for c in p.iterdir())
        return p.exists() and p.stat().st_size > 0
    except OSError:
        return p.exists()


def _remove_temps(directory: Path, prefix: str = ".") -> None:
    """Temp files of writes a kill interrupted: never data, always ours."""
    if not directory.is_dir():
        return
    for p in directory.iterdir():
        if p.name.startswith(prefix) and TEMP_MARK in p.name:
            with contextlib.suppress(OSError):
                p.unlink()


def _parts(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if _PART.fullmatch(p.name))


def _read(path: Path, columns: list[str] | None = None) -> pa.Table:
    try:
        return pq.read_table(path, columns=columns)
    except (OSError, pa.ArrowException, ValueError) as e:
        raise UserError(f"{path}: cannot read it as Parquet ({one_line(str(e))})") from None


def _differences(mine: dict[str, Any], theirs: Any) -> list[str]:
    if not isinstance(theirs, dict):
        return ["definition"]
    labels = {
        "scenario_sha256": "scenario text",
        "set": "--set",
        "seed": "--seed",
        "grid": "--grid",
        "replications": "--replications",
    }
    return [label for k, label in labels.items() if mine.get(k) != theirs.get(k)]


def _extends(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Whether `mine` is `theirs` with more values on its grid axes (the same
    keys in the same order), so that every run of theirs is one of mine."""
    try:
        old = {k: list(v) for k, v in theirs["grid"]}
        keys = [k for k, _ in theirs["grid"]]
    except (TypeError, ValueError, KeyError):
        return False
    new = dict(mine["grid"])
    return keys == [k for k, _ in mine["grid"]] and all(set(old[k]) <= set(new[k]) for k in keys)


def _check_definition(where: Path, sweep: Sweep, theirs: Any) -> bool:
    """Refuses another sweep's output; True if `theirs` is this sweep with
    fewer grid values (an extended sweep runs only the new points)."""
    mine = sweep.definition()
    diff = _differences(mine, theirs)
    if not diff:
        return False
    if diff == ["--grid"] and _extends(mine, theirs):
        return True
    verb = "differs" if len(diff) == 1 else "differ"
    hint = "; only adding values to its axes extends a sweep" if diff == ["--grid"] else ""
    raise UserError(
        f"--resume: {where} holds another sweep ({', '.join(diff)} {verb}{hint}); "
        "rerun with its definition or choose another --out"
    )


def _check_maker(where: Path, mine: dict[str, str], schema_: pa.Schema) -> None:
    """Refuse to resume runs another irqlab made: a row's key hashes the
    scenario, overrides and seed, not the model, so a resumed sweep would mix
    results of two models under one version."""
    meta = schema_.metadata or {}
    for key in ("irqlab.version", "irqlab.commit"):
        theirs = meta.get(key.encode())
        if theirs is not None and theirs.decode() != mine[key]:
            raise UserError(
                f"--resume: {where} was written by {key} {theirs.decode()}, this is {mine[key]}: "
                "its runs may not match this model's; rerun without --resume into another --out"
            )


def json_or_none(raw: str | bytes | None) -> Any:
    """A metadata value's JSON, or None if it is absent or not JSON."""
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _definition_in(table_or_schema: pa.Schema) -> Any:
    return json_or_none((table_or_schema.metadata or {}).get(b"irqlab.sweep"))


class Store:
    """Collects a sweep's rows: `add` as runs end (from any thread), `close`
    when no more come (always: it writes what is pending), then `table`.
    `out` None keeps them in memory."""

    def __init__(self, sweep: Sweep, out: Path | None, resume: bool) -> None:
        self.sweep = sweep
        self.out = out
        self.final: Path | None = None  # the single file, for NAME.parquet
        self.dir: Path | None = None  # the dataset
        self.done: set[str] = set()  # point keys already in the output before this run
        self._order = {p.key: (p.index, p.replication) for p in sweep.points}
        self._rows: list[dict[str, Any]] = []  # in memory, or pending a flush
        self._names: set[str] = set()  # every column seen
        self._written: set[str] = set()  # the columns the parts have
        self._parts: dict[str, list[str]] = {}  # part name -> its point keys
        self._seq = 0
        self._complete_file = False  # --resume of a NAME.parquet that is already whole
        self.nothing_to_resume = False  # --resume found no results at --out
        self._lock = threading.Lock()  # _rows, _names, _error
        self._io = threading.Lock()  # one flush at a time
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._flusher: threading.Thread | None = None
        self._last_flush = -FLUSH_S
        self._error: BaseException | None = None
        self._lock_fd: int | None = None
        if out is None:
            if resume:
                raise UserError("--resume needs --out: the results to resume")
            return
        if is_single_file(out):
            self.final, self.dir = out, sidecar(out)
        else:
            self.dir = out
        try:
            self._open(resume)
        except BaseException:
            self.release()
            raise

    # --- opening ---------------------------------------------------------

    def _open(self, resume: bool) -> None:
        assert self.out is not None and self.dir is not None
        # Refused here, before any work: a file (empty, so not a finished
        # sweep's) or a dangling symlink failed only at the first write, after
        # the runs (an audit).
        if self.final is None and (self.out.exists() or self.out.is_symlink()) and not self.out.is_dir():
            what = "a symbolic link to nothing" if not self.out.exists() else "a file"
            raise UserError(f"--out {self.out} is {what}: expected a directory (a Parquet dataset) or NAME.parquet")
        if self.final is not None:
            # A merge that a kill interrupted leaves a temp file beside NAME.parquet.
            _remove_temps(self.final.parent, f".{self.final.name}{TEMP_MARK}")
        if not resume:
            if self.final is not None and _non_empty(self.dir):
                raise UserError(f"--out {self.out}: an unfinished sweep is in {self.dir}; use --resume or remove it")
            target = self.final if self.final is not None else self.dir
            if _non_empty(target):
                raise UserError(f"--out {self.out} exists; use --resume or remove it")
            return
        if _non_empty(self.dir):
            self._load_dataset()
        elif self.final is not None and _non_empty(self.final):
            self._load_final()
        else:
            # Nothing there: the sweep starts (a script may --resume every
            # time), and the CLI says so, since a misspelt --out looks the same.
            self.nothing_to_resume = True

    def _load_final(self) -> None:
        assert self.final is not None and self.dir is not None
        if self.final.is_dir():
            raise UserError(f"--out {self.final}: is a directory, expected a Parquet file")
        meta = _read_schema(self.final)
        theirs = _definition_in(meta)
        if theirs is None:
            raise UserError(f"--resume: {self.final} was not written by a resumable sweep; choose another --out")
        extended = _check_definition(self.final, self.sweep, theirs)
        _check_maker(self.final, self.sweep.metadata(), meta)
        keys = _read(self.final, ["point_key"]).column("point_key").to_pylist()
        if not extended:
            self.done = set(keys)
            if self.done != set(self._order):
                raise UserError(f"--resume: {self.final} holds other points than this sweep; choose another --out")
            self._complete_file = True
            return
        # More grid values: its rows become the first part of the dataset beside
        # it, as if this sweep had written them, and the merge at the end replaces
        # the file. (Killed before then, the file is as it was and the dataset
        # resumes.)
        if any(k not in self._order for k in keys):
            raise UserError(f"--resume: {self.final} holds a point this sweep does not have; choose another --out")
        self._take_lock()
        table = self._renumbered(_read(self.final))
        self._written = set(table.column_names)
        self._names.update(self._written)
        self._seq = 1
        atomic_write(self.dir / _part_name(1), parquet_bytes(conform(table, schema(self.sweep, self._written))))
        self._parts[_part_name(1)] = list(keys)
        self.done = set(keys)
        self._write_manifest()

    def _load_dataset(self) -> None:
        d = self.dir
        assert d is not None
        if not d.is_dir():
            raise UserError(f"--out {d}: exists and is not a sweep dataset (a directory); choose another --out")
        self._take_lock(loading=True)
        manifest = None
        mpath = d / MANIFEST
        if mpath.exists():
            try:
                manifest = json.loads(mpath.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                manifest = None
            if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
                raise UserError(f"--resume: {mpath} is not an irqlab sweep manifest")
            if not isinstance(manifest.get("version"), int) or manifest["version"] > VERSION:
                raise UserError(
                    f"--resume: {mpath} has format version {manifest.get('version')}; this irqlab reads {VERSION}"
                )
        parts = _parts(d)
        if manifest is None and not parts:
            if not _non_empty(d):
                return  # killed before its first part: nothing to resume
            raise UserError(f"--resume: {d} is not an irqlab sweep dataset (no {MANIFEST}, no part files)")
        if manifest is not None:
            _check_definition(d, self.sweep, manifest.get("sweep"))
        mine = self.sweep.metadata()  # once: the commit comes from two git calls
        older: list[Path] = []  # parts written before the grid was extended
        for part in parts:
            meta = _read_schema(part)
            theirs = _definition_in(meta)
            if theirs is not None and _check_definition(d, self.sweep, theirs):
                older.append(part)
            _check_maker(part, mine, meta)
            keys = _read(part, ["point_key"]).column("point_key").to_pylist()
            for k in keys:
                if k not in self._order:
                    raise UserError(f"--resume: {part} holds a point this sweep does not have; choose another --out")
                if k in self.done:
                    raise UserError(f"--resume: point {k} is in two parts of {d}; remove one of them")
            self.done.update(keys)
            self._parts[part.name] = list(keys)
            self._names.update(meta.names)
            self._written.update(meta.names)
            m = _PART.fullmatch(part.name)
            assert m is not None
            self._seq = max(self._seq, int(m.group(1)))
        # A kill during a rewrite leaves parts with fewer columns: finish it.
        # Parts from before an extension get this grid's point numbers and definition.
        if parts and any(set(_read_schema(p).names) != self._written for p in parts):
            self._rewrite(parts, schema(self.sweep, self._written))
        elif older:
            self._rewrite(older, schema(self.sweep, self._written))
        if parts:
            self._write_manifest()

    def _take_lock(self, loading: bool = False) -> None:
        """Hold the dataset's lock from the first write (or the resume's reading) to
        the end. Taken, the parts are ours to account for: any we do not know of
        came from another sweep since this one checked `--out`."""
        if self._lock_fd is not None:
            return
        d = self.dir
        assert d is not None
        try:
            d.mkdir(parents=True, exist_ok=True)
            fd = os.open(d / LOCK, os.O_RDWR | os.O_CREAT, 0o666)
        except OSError as e:
            raise UserError(f"--out {d}: cannot write: {e.strerror or e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            raise UserError(f"--out {d}: another irqlab sweep is writing it") from None
        self._lock_fd = fd
        if not loading and any(p.name not in self._parts for p in _parts(d)):
            self.release()
            raise UserError(f"--out {d}: another sweep wrote to it meanwhile; use --resume or remove it")
        _remove_temps(d)

    def release(self) -> None:
        """Let another sweep write the dataset (at the end of this one, whatever happened)."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    # --- writing ---------------------------------------------------------

    def add(self, row: dict[str, Any]) -> None:
        with self._lock:
            if self._error is not None:
                raise self._error
            self._rows.append(row)
            self._names.update(row)
        if self.dir is not None:
            if self._flusher is None:
                self._flusher = threading.Thread(target=self._flush_loop, name="irqlab-sweep-flush", daemon=True)
                self._flusher.start()
            self._wake.set()

    def _flush_loop(self) -> None:
        while not self._closing.is_set():
            self._wake.wait()
            self._wake.clear()
            delay = self._last_flush + FLUSH_S - time.monotonic()
            if delay > 0 and self._closing.wait(delay):
                return  # close() flushes the rest
            try:
                self.flush()
            except BaseException as e:  # handed to the main thread by add() and close()
                with self._lock:
                    self._error = e
                return

    def flush(self) -> None:
        """Write the pending rows as a new part, then the manifest."""
        if self.dir is None:
            return
        with self._io:
            with self._lock:
                rows, self._rows = self._rows, []
                names = set(self._names)
            if not rows:
                return
            # From the start of the write, not its end: a row that comes while a
            # part is written then waits FLUSH_S at most, not FLUSH_S on top of
            # the write (a review measured 1.5 s for the README's "a second").
            self._last_flush = time.monotonic()
            try:
                self._write_part(rows, names)
            except BaseException:
                with self._lock:
                    self._rows[:0] = rows
                raise

    def _write_part(self, rows: list[dict[str, Any]], names: set[str]) -> None:
        d = self.dir
        assert d is not None
        grew = bool(self._written) and not names <= self._written
        target = schema(self.sweep, names | self._written)
        table = sort_rows(pa.Table.from_pylist(rows, schema=target))
        older = _parts(d) if grew else []
        self._take_lock()
        self._seq += 1
        name = _part_name(self._seq)
        atomic_write(d / name, parquet_bytes(table))
        self._parts[name] = [str(r["point_key"]) for r in rows]
        self._written |= names
        if grew:
            self._rewrite(older, target)
        self._write_manifest()

    def _rewrite(self, parts: list[Path], target: pa.Schema) -> None:
        # Newest first: at every moment each part has at least the first one's columns.
        for part in sorted(parts, reverse=True):
            atomic_write(part, parquet_bytes(conform(self._renumbered(_read(part)), target)))

    def _renumbered(self, table: pa.Table) -> pa.Table:
        """`table` with each row's `point` its place in this sweep's grid (an
        extended grid numbers its points anew), found from `point_key`."""
        if "point" not in table.column_names:
            return table
        points = pa.array([self._order[k][0] for k in table.column("point_key").to_pylist()], pa.int64())
        return table.set_column(table.column_names.index("point"), "point", points)

    def _write_manifest(self) -> None:
        assert self.dir is not None
        done = sorted((k for keys in self._parts.values() for k in keys), key=lambda k: self._order[k])
        target = schema(self.sweep, self._written)
        doc = {
            "format": FORMAT,
            "version": VERSION,
            "irqlab": _core.__version__,
            "sweep": self.sweep.definition(),
            "points": len(self.sweep.points),
            "columns": [[f.name, str(f.type)] for f in target],
            "parts": {name: len(keys) for name, keys in sorted(self._parts.items())},
            "done": done,
        }
        atomic_write(self.dir / MANIFEST, json.dumps(doc, indent=1) + "\n")

    def close(self) -> None:
        """Stop the background writer and write every pending row (on success,
        an error, Ctrl-C or SIGTERM alike)."""
        self._closing.set()
        self._wake.set()
        if self._flusher is not None:
            self._flusher.join()
        with self._lock:
            error, self._error = self._error, None
        if error is not None:
            raise error
        self.flush()

    # --- reading ---------------------------------------------------------

    def table(self) -> pa.Table:
        """Every row (from before this run too) in grid order, with every column."""
        if self.dir is None:
            return self._memory_table()
        if self._complete_file:
            assert self.final is not None
            return _read(self.final)
        if not self._parts:
            return pa.Table.from_pylist([], schema=schema(self.sweep, []))
        target = schema(self.sweep, self._written)
        parts = [conform(self._renumbered(_read(self.dir / p)), target) for p in sorted(self._parts)]
        return sort_rows(pa.concat_tables(parts))

    def _memory_table(self) -> pa.Table:
        return sort_rows(pa.Table.from_pylist(self._rows, schema=schema(self.sweep, self._names)))

    def finish(self) -> pa.Table:
        """After a sweep where every run ended: merge `NAME.parquet`'s dataset into
        the file and remove the directory. Returns every row."""
        table = self.table()
        if self.final is not None and not self._complete_file:
            atomic_write(self.final, parquet_bytes(table.replace_schema_metadata(self.sweep.metadata())))
            self._remove_dataset()
        return table

    def _remove_dataset(self) -> None:
        d = self.dir
        assert d is not None
        if not d.is_dir():
            return
        for p in [*_parts(d), d / MANIFEST, d / LOCK]:
            with contextlib.suppress(OSError):
                p.unlink()
        self._parts = {}  # merged into the file: nothing is kept apart any more (`kept`)
        self.release()
        with contextlib.suppress(OSError):
            d.rmdir()  # left in place if someone put other files there

    def kept(self) -> Path | None:
        """Where the runs that ended are kept after a failed sweep: the dataset, if any part was written."""
        return self.dir if self.dir is not None and self._parts else None


def _read_schema(path: Path) -> pa.Schema:
    try:
        return pq.read_schema(path)
    except (OSError, pa.ArrowException, ValueError) as e:
        raise UserError(f"{path}: cannot read it as Parquet ({one_line(str(e))})") from None


def unfinished_note(path: Path) -> str | None:
    """One line for stderr when RESULTS holds only some of its sweep's runs: a
    NAME.parquet not written yet, whose runs so far `results_source` reads from
    its parts, or a dataset directory whose manifest lists fewer runs done than
    the sweep has. A killed sweep's partial results must not pass for the whole."""
    if path.is_dir():
        try:
            doc = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        points, done = (doc.get("points"), doc.get("done")) if isinstance(doc, dict) else (None, None)
        if not isinstance(points, int) or not isinstance(done, list) or len(done) >= points:
            return None
        # NAME.parquet.parts is NAME.parquet's dataset: that is the --out to resume
        # (resuming into the parts would never write NAME.parquet; an audit).
        out = path.with_name(path.name.removesuffix(".parts")) if path.name.endswith(".parquet.parts") else path
        return (
            f"{path} holds {len(done)} of its sweep's {points} runs (the sweep is running, or was stopped); "
            f"sweep again with --out {out} --resume to finish it"
        )
    if path.exists() or not is_single_file(path) or not sidecar(path).is_dir():
        return None
    return (
        f"{path} is not written yet (its sweep is running, or was stopped): reading the runs that ended, "
        f"in {sidecar(path)}; sweep again with --out {path} --resume to finish it"
    )


def results_source(path: Path) -> tuple[str, bool]:
    """What `irqlab query` reads for RESULTS: (a path or glob, whether it is a
    dataset of parts). A `NAME.parquet` whose sweep is still running (or was
    killed) is read from its `NAME.parquet.parts/` dataset."""
    if path.is_dir():
        if not _parts(path):
            raise UserError(f"{path}: no part-*.parquet files: not a sweep dataset, or no run has ended yet")
        return str(path / "part-*.parquet"), True
    if path.exists():
        return str(path), False
    if is_single_file(path) and sidecar(path).is_dir():
        return results_source(sidecar(path))
    raise UserError(f"{path}: no such file or directory")
