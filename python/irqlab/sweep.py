"""Parameter sweeps: a cartesian grid of `--set` overrides, each grid point run
`replications` times, on a local thread pool, a Dask cluster or Ray.

Every run (a grid point and a replication) is identified by `point_key`, and
its seed comes from the sweep's base seed and the replication index only
(`replication_seed`), so different values of a policy parameter see the same
arrivals. Where the results go (memory, or a Parquet dataset that survives a
kill and resumes) is `sweep_store`'s business; this module plans, runs and turns
results into rows."""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import statistics
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from . import _core
from ._util import UserError, one_line, override_key
from .cli.summary import short_window
from .provenance import commit

BACKENDS = ("local", "ray", "dask")
# Histogram statistics copied into the table: latency percentiles are what a
# sweep over moderation or rates is usually for.
HIST_STATS = ("mean", "p50", "p90", "p99", "p99.9", "p99.99", "max")
#: Columns every row has after the grid keys: the seed the run used, its
#: replication index, the grid point's index in grid order, and `point_key`.
BOOKKEEPING = ("seed", "replication", "point", "point_key")
_M64 = 2**64 - 1


def point_key(text: str, overrides: Sequence[str], seed: int) -> str:
    """The identity of one run: a hash of the scenario text, the overrides in
    the order they apply (`--set`s, then the grid's) and the seed it runs with.
    Two runs with the same key give the same result; `--resume` skips a run
    whose key is already in the output."""
    doc = json.dumps([text, list(overrides), seed], ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(doc.encode("utf-8")).hexdigest()[:20]


def _splitmix64(x: int) -> int:
    z = (x + 0x9E3779B97F4A7C15) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    return z ^ (z >> 31)


def replication_seed(base: int, replication: int) -> int:
    """The seed of replication `replication` of a point whose base seed is
    `base` (`--seed`, the scenario's `seed`, or the point's `--grid seed=`
    value). Replication 0 runs with `base` itself, so a one-replication sweep
    runs what `irqlab run --seed BASE` runs; replication r > 0 with a seed mixed
    from (base, r). Nothing else enters: every grid value of a policy parameter
    sees the same arrivals (common random numbers)."""
    if replication == 0:
        return base
    return _splitmix64(base ^ _splitmix64(replication))


@dataclass
class Point:
    """One run: a grid point's coordinates, one replication, and what to hand to the core."""

    index: int  #: the grid point's position in grid order
    replication: int
    coords: dict[str, str]
    overrides: list[str]
    seed: int
    key: str

    def describe(self) -> str:
        where = ", ".join(f"{k}={v}" for k, v in self.coords.items())
        return f"{where}, replication {self.replication}" if self.replication else where


@dataclass
class Sweep:
    text: str
    origin: str
    axes: list[tuple[str, list[str]]]
    sets: list[str] = field(default_factory=list)
    #: `--seed` as given (None: the scenario's own).
    seed: int | None = None
    replications: int = 1
    points: list[Point] = field(default_factory=list)
    #: Run even if a point's estimated events or memory pass the limits.
    force: bool = False
    #: The scenario's `name` (as the first grid point resolves it).
    name: str = ""
    #: Grid points too short to settle (`cli.summary.short_window`), one line each.
    short: list[str] = field(default_factory=list)

    @property
    def keys(self) -> list[str]:
        """The grid keys that become string columns (a seed axis is the `seed` column)."""
        return [k for k, _ in self.axes if k != "seed"]

    def definition(self) -> dict[str, Any]:
        """What makes two sweeps the same sweep (`--resume` refuses another):
        the scenario text, `--set`, `--seed`, the grid and the replications. The
        scenario's path is kept for people, never compared."""
        return {
            "scenario": self.origin,
            "scenario_sha256": hashlib.sha256(self.text.encode("utf-8")).hexdigest(),
            "set": list(self.sets),
            "seed": self.seed,
            "grid": [[k, list(v)] for k, v in self.axes],
            "replications": self.replications,
        }

    def metadata(self) -> dict[str, str]:
        """The Parquet schema metadata of every file a sweep writes."""
        return {
            "irqlab.scenario": self.name,
            "irqlab.version": _core.__version__,
            "irqlab.commit": commit(),
            "irqlab.grid": json.dumps(self.axes),
            "irqlab.sweep": json.dumps(self.definition(), sort_keys=True),
        }


def _split_values(spec: str, raw: str) -> list[str]:
    # Split on commas outside brackets and quotes so that TOML arrays and
    # strings ("[1,2],[3,4]") can be grid values.
    out: list[str] = []
    cur: list[str] = []
    depth, quote = 0, ""
    for ch in raw:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    if quote or depth:
        raise UserError(f"--grid {spec!r}: unbalanced quote or bracket")
    out.append("".join(cur).strip())
    return out


def parse_grid(specs: Sequence[str] | None) -> list[tuple[str, list[str]]]:
    """Parse `--grid KEY=V1,V2,...` options into ordered (key, values) axes."""
    if not specs:
        raise UserError("sweep needs at least one --grid KEY=V1,V2,...")
    axes: list[tuple[str, list[str]]] = []
    for spec in specs:
        key, eq, raw = spec.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UserError(f"--grid {spec!r}: expected KEY=V1,V2,..., e.g. --grid cpu.count=1,2,4")
        values = _split_values(spec, raw)
        if any(v == "" for v in values):
            raise UserError(f"--grid {spec!r}: empty value in the list")
        if len(set(values)) != len(values):
            raise UserError(f"--grid {spec!r}: a value is listed twice")
        if any(k == key for k, _ in axes):
            raise UserError(f"--grid {key}: given twice; list all its values in one --grid")
        if key == "seed":
            for v in values:
                if not v.isdigit() or int(v) >= 2**64:
                    raise UserError(f"--grid seed={raw}: {v!r} is not an integer from 0 to 2^64-1")
        axes.append((key, values))
    return axes


def plan(
    text: str,
    origin: str,
    axes: list[tuple[str, list[str]]],
    sets: list[str],
    seed: int | None,
    force: bool = False,
    replications: int = 1,
) -> Sweep:
    """Expand the grid and validate every point before anything runs, so a typo
    in the last value does not surface after an hour of sweeping. Points come
    in grid order, each point's replications together."""
    if seed is not None and any(k == "seed" for k, _ in axes):
        raise UserError("--seed and --grid seed=... both given; use one")
    if replications < 1:
        raise UserError(f"--replications {replications}: expected at least 1")
    # A grid value would replace the --set of its key without a word (each
    # point's overrides put the grid's last), as a --set given twice would.
    set_for = {override_key(s.partition("=")[0]): s for s in sets}
    for key, _ in axes:
        if (given := set_for.get(override_key(key))) is not None:
            raise UserError(f"--set {given} and --grid {key}=...: both give {key}; give it in one of them")
    runs = math.prod(len(vals) for _, vals in axes) * replications
    if runs > MAX_RUNS:
        raise UserError(
            f"--grid and --replications make {runs:,} runs: expected at most {MAX_RUNS:,} (split the sweep)"
        )
    sweep = Sweep(text, origin, axes, list(sets), seed, replications, force=force)
    keys = [k for k, _ in axes]
    seen: dict[str, Point] = {}
    # Values written two ways (5k/s and 5000/s) are one scenario: caught on the resolved one.
    same: dict[str, str] = {}
    for index, combo in enumerate(itertools.product(*(vals for _, vals in axes))):
        coords = dict(zip(keys, combo))
        # A seed axis goes through the seed argument so that it also wins over
        # the scenario's own `seed`; everything else is a plain override.
        ov = sets + [f"{k}={v}" for k, v in coords.items() if k != "seed"]
        where = ", ".join(f"{k}={v}" for k, v in coords.items())
        try:
            resolved = json.loads(_core.load(text, origin, ov))
            if not force:
                _core.check_budget(text, origin, ov)
        except _core.ScenarioError as e:
            raise UserError(f"{one_line(str(e))} (grid point {where})") from None
        if index == 0:
            sweep.name = str(resolved.get("name", ""))
        if (why := short_window(resolved)) is not None:
            sweep.short.append(f"{why} at {where}" if where else why)
        canonical = json.dumps([resolved, coords.get("seed")], sort_keys=True)
        if canonical in same:
            raise UserError(f"grid points {same[canonical]} and {where} are the same scenario (a value given twice)")
        same[canonical] = where
        # The base seed: the grid's, else --seed, else the scenario's (with the
        # --set overrides; a grid key is never `seed`, so no grid value moves it).
        base = int(coords["seed"]) if "seed" in coords else seed if seed is not None else int(resolved["seed"])
        for r in range(replications):
            s = replication_seed(base, r)
            point = Point(index, r, coords, ov, s, point_key(text, ov, s))
            if point.key in seen:
                raise UserError(
                    f"grid points {seen[point.key].describe()} and {point.describe()} are the same run "
                    "(same overrides and seed)"
                )
            seen[point.key] = point
            sweep.points.append(point)
    # The commit every part will carry, read now, before any work: read first
    # when the first part was written, a Ctrl-C could reach its `git`.
    commit()
    return sweep


#: The most runs one sweep plans (grid points x replications): beyond it, the
#: plan alone would fill memory before anything ran.
MAX_RUNS = 1_000_000


def run_point(
    text: str, origin: str, overrides: list[str], seed: int | None, force: bool = False, stop: Any = None
) -> tuple[bool, str]:
    """Run one point; errors come back as values because a pyo3 exception class
    may not survive pickling between Dask/Ray processes. `stop`: a local run's
    shared `_core.StopFlag` (Ctrl-C)."""
    try:
        result, _ = _core.run(text, origin, overrides, seed, False, stop, force)
        return True, result
    except _core.ScenarioError as e:
        return False, one_line(str(e))


#: How a run ended: ("ok", result JSON), ("error", message) for bad input (not
#: retried), ("crash", message) when its worker raised or died twice.
Status = str
OnDone = Callable[[Point, Status, str], None]
Job = tuple[str, str, list[str], int | None, bool]
_Done = Callable[[int, Status, str], None]


def _crash(e: BaseException) -> str:
    msg = one_line(str(e)) if str(e).strip() else ""
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


def _run_local(jobs: dict[int, Job], workers: int, done: _Done) -> None:
    stop = _core.StopFlag()
    ex = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="irqlab-sweep")
    try:
        # `run_point` is looked up here, at submit time (tests replace it).
        futs: dict[Future[tuple[bool, str]], int] = {ex.submit(run_point, *job, stop): i for i, job in jobs.items()}
        retried: set[int] = set()
        pending = set(futs)
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for f in finished:
                i = futs.pop(f)
                exc = f.exception()
                if exc is None:
                    ok, payload = f.result()
                    done(i, "ok" if ok else "error", payload)
                elif isinstance(exc, KeyboardInterrupt):
                    raise KeyboardInterrupt
                elif i not in retried:
                    # The worker died (a panic in the core, an out-of-memory...):
                    # once may be bad luck; a second time is reported.
                    retried.add(i)
                    again = ex.submit(run_point, *jobs[i], stop)
                    futs[again] = i
                    pending.add(again)
                else:
                    done(i, "crash", _crash(exc))
    except BaseException:
        # Ctrl-C, SIGTERM: points under way end within a few thousand events;
        # the rest never start.
        stop.set()
        raise
    finally:
        ex.shutdown(wait=True, cancel_futures=True)


def execute(
    sweep: Sweep, points: Sequence[Point], backend: str, workers: int, address: str | None, on_done: OnDone
) -> None:
    """Run `points` (all or some of `sweep.points`); `on_done(point, status,
    payload)` is called in this thread as each one ends, in completion order."""
    jobs: dict[int, Job] = {
        i: (sweep.text, sweep.origin, p.overrides, p.seed, sweep.force) for i, p in enumerate(points)
    }

    def done(i: int, status: Status, payload: str) -> None:
        on_done(points[i], status, payload)

    if not jobs:
        return
    if backend == "local":
        _run_local(jobs, workers, done)
    elif backend == "dask":
        from .sweep_cluster import run_dask

        run_dask(jobs, workers, address, done)
    elif backend == "ray":
        from .sweep_cluster import run_ray

        run_ray(jobs, workers, address, done)
    else:
        raise UserError(f"--backend {backend!r}: unknown backend, expected one of {', '.join(BACKENDS)}")


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def to_row(sweep: Sweep, point: Point, result: dict[str, Any]) -> dict[str, Any]:
    """One table row: grid keys (strings), the bookkeeping columns, then every
    metric and histogram statistic (floats). A metric that shares its name with
    a grid key or a bookkeeping column keeps both, as `metric.NAME`."""
    row: dict[str, Any] = {k: point.coords[k] for k in sweep.keys}
    row.update(seed=int(result["seed"]), replication=point.replication, point=point.index, point_key=point.key)
    fixed = set(row)

    def put(name: str, v: Any) -> None:
        row["metric." + name if name in fixed else name] = _num(v)

    for m, v in result.get("metrics", {}).items():
        put(m, v)
    for h, stats in result.get("histograms", {}).items():
        # A histogram with nothing in it has no percentiles: null, not the
        # core's 0 ns, which went into means and plots as a real latency.
        empty = not isinstance(stats, dict) or stats.get("count") == 0
        for s in HIST_STATS:
            put(f"{h}.{s}", None if empty else stats.get(s))
    return row


def _column_order(name: str) -> tuple[int, str, int]:
    # Metrics by name, then each histogram's statistics in HIST_STATS order.
    for i, s in sorted(enumerate(HIST_STATS), key=lambda e: -len(e[1])):
        if name.endswith("." + s):
            return (1, name[: -len(s) - 1], i)
    return (0, name, 0)


def schema(sweep: Sweep, names: Iterable[str]) -> pa.Schema:
    """The table schema for rows whose columns are `names`: a function of the set
    of names only, so every writer and every order of completion agree."""
    fields = [pa.field(k, pa.string()) for k in sweep.keys]
    fields += [
        pa.field("seed", pa.uint64()),
        pa.field("replication", pa.int64()),
        pa.field("point", pa.int64()),
        pa.field("point_key", pa.string()),
    ]
    fixed = {f.name for f in fields}
    fields += [pa.field(n, pa.float64()) for n in sorted(set(names) - fixed, key=_column_order)]
    return pa.schema(fields, metadata=sweep.metadata())


def conform(table: pa.Table, target: pa.Schema) -> pa.Table:
    """`table` with exactly the columns of `target` (missing ones null), in its order and types."""
    cols = [
        table.column(f.name).cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
        for f in target
    ]
    return pa.Table.from_arrays(cols, schema=target)


def sort_rows(table: pa.Table) -> pa.Table:
    """Grid order (then replication), whatever the order the runs ended in."""
    return table.sort_by([("point", "ascending"), ("replication", "ascending")]).combine_chunks()


def to_table(sweep: Sweep, rows: Sequence[dict[str, Any]]) -> pa.Table:
    """Rows as one table in grid order, with the columns of all of them."""
    names = {n for r in rows for n in r}
    return sort_rows(pa.Table.from_pylist(list(rows), schema=schema(sweep, names)))


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data: bytes = sink.getvalue().to_pybytes()
    return data


# --- replications: mean and a Student-t confidence interval -----------------


def _betacf(a: float, b: float, x: float) -> float:
    # The incomplete beta function's continued fraction (modified Lentz).
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        even = m * (b - m) * x / ((a + m2 - 1) * (a + m2))
        odd = -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1))
        for num in (even, odd):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: int) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    tail = 0.5 * _betai(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: int) -> float:
    """The `p` quantile (0.5 < p < 1) of Student's t with `df` degrees of freedom."""
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        lo, hi = hi, hi * 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def mean_ci(values: Sequence[float], level: float = 0.95) -> tuple[float, float | None]:
    """The mean of `values` and the half-width of its `level` confidence interval
    (Student t, n - 1 degrees of freedom); no interval for fewer than 2 values."""
    n = len(values)
    if n == 0:
        return math.nan, None
    mean = statistics.fmean(values)
    if n < 2:
        return mean, None
    return mean, t_quantile(0.5 + level / 2.0, n - 1) * statistics.stdev(values) / math.sqrt(n)


def summarize(
    table: pa.Table, keys: Sequence[str], metrics: Sequence[str], seed_axis: bool = False
) -> list[dict[str, Any]]:
    """Per grid point (in grid order): its coordinates, the number of
    replications `n`, for each metric `(mean, 95 % CI half-width)` over the
    replications that have a value, and in `counts` how many had one (a
    percentile of an empty histogram has none). With a seed axis, its value is
    the point's `seed`: the seed replication 0 ran (`replication_seed(base, 0)`
    is the base)."""
    cols = {c: table.column(c).to_pylist() for c in [*keys, "point", "seed", "replication", *metrics]}
    groups: dict[int, list[int]] = {}
    for i, p in enumerate(cols["point"]):
        groups.setdefault(p, []).append(i)
    out = []
    for p in sorted(groups):
        rows = groups[p]
        entry: dict[str, Any] = {k: cols[k][rows[0]] for k in keys}
        if seed_axis:
            first = [i for i in rows if cols["replication"][i] == 0]
            entry["seed"] = cols["seed"][first[0]] if first else None
        entry["n"] = len(rows)
        entry["counts"] = {}
        for m in metrics:
            vals = [cols[m][i] for i in rows if cols[m][i] is not None and math.isfinite(cols[m][i])]
            entry[m] = mean_ci(vals)
            entry["counts"][m] = len(vals)
        out.append(entry)
    return out
