"""Parameter sweeps: a cartesian grid of `--set` overrides run on a local thread
pool, a Dask cluster or Ray, collected into one Parquet table in grid order."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from . import _core
from ._util import UserError, one_line
from .provenance import commit

BACKENDS = ("local", "ray", "dask")
# Histogram statistics copied into the table: latency percentiles are what a
# sweep over moderation or rates is usually for.
HIST_STATS = ("mean", "p50", "p90", "p99", "p99.9", "p99.99", "max")


@dataclass
class Point:
    """One grid point: its coordinates and what to hand to the core."""

    coords: dict[str, str]
    overrides: list[str]
    seed: int | None

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.coords.items())


@dataclass
class Sweep:
    text: str
    origin: str
    axes: list[tuple[str, list[str]]]
    points: list[Point] = field(default_factory=list)
    #: Run even if a point's estimated events or memory pass the limits.
    force: bool = False


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
    text: str, origin: str, axes: list[tuple[str, list[str]]], sets: list[str], seed: int | None, force: bool = False
) -> Sweep:
    """Expand the grid and validate every point before anything runs, so a typo
    in the last value does not surface after an hour of sweeping."""
    if seed is not None and any(k == "seed" for k, _ in axes):
        raise UserError("--seed and --grid seed=... both given; use one")
    sweep = Sweep(text, origin, axes, force=force)
    keys = [k for k, _ in axes]
    for combo in itertools.product(*(vals for _, vals in axes)):
        coords = dict(zip(keys, combo))
        # A seed axis goes through the seed argument so that it also wins over
        # the scenario's own `seed`; everything else is a plain override.
        ov = sets + [f"{k}={v}" for k, v in coords.items() if k != "seed"]
        pseed = int(coords["seed"]) if "seed" in coords else seed
        point = Point(coords, ov, pseed)
        try:
            _core.load(text, origin, ov)
            if not force:
                _core.check_budget(text, origin, ov)
        except _core.ScenarioError as e:
            raise UserError(f"{one_line(str(e))} (grid point {point.describe()})") from None
        sweep.points.append(point)
    return sweep


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


Advance = Callable[[], None]
Job = tuple[str, str, list[str], int | None, bool]


def _run_local(jobs: list[Job], workers: int, advance: Advance) -> list[tuple[bool, str]]:
    out: list[Any] = [None] * len(jobs)
    stop = _core.StopFlag()
    ex = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="irqlab-sweep")
    try:
        futs = {ex.submit(run_point, *job, stop): i for i, job in enumerate(jobs)}
        for f in as_completed(futs):
            out[futs[f]] = f.result()
            advance()
    except KeyboardInterrupt:
        # Points under way end within a few thousand events; the rest never start.
        stop.set()
        raise
    finally:
        ex.shutdown(wait=True, cancel_futures=True)
    return out


def _run_dask(jobs: list[Job], workers: int, address: str | None, advance: Advance) -> list[tuple[bool, str]]:
    try:
        import logging

        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as dask_completed
    except ImportError:
        raise UserError("--backend dask needs dask[distributed]: pip install 'irqlab[dask]'") from None
    cluster = None
    try:
        if address:
            client = Client(address)
        else:
            # Threads are enough locally: the core releases the GIL while it runs.
            cluster = LocalCluster(
                n_workers=1,
                threads_per_worker=workers,
                processes=False,
                dashboard_address=None,
                silence_logs=logging.ERROR,
            )
            client = Client(cluster)
    except (OSError, ValueError, TimeoutError) as e:
        # distributed says "missing port number in address" for a malformed address.
        where = f"--address {address}" if address else "--backend dask"
        raise UserError(
            f"{where}: cannot reach a Dask scheduler ({one_line(str(e))}); expected tcp://HOST:PORT"
        ) from None
    try:
        futs = [client.submit(run_point, *job, pure=False) for job in jobs]
        index = {f.key: i for i, f in enumerate(futs)}
        out: list[Any] = [None] * len(jobs)
        for f, res in dask_completed(futs, with_results=True):
            out[index[f.key]] = tuple(res)
            advance()
        return out
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


def _run_ray(jobs: list[Job], workers: int, address: str | None, advance: Advance) -> list[tuple[bool, str]]:
    try:
        import ray
    except ImportError:
        raise UserError("--backend ray needs ray, which is not installed: pip install 'irqlab[ray]'") from None
    try:
        if address:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False)
        else:
            ray.init(num_cpus=workers, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    except (ConnectionError, OSError, ValueError, RuntimeError) as e:
        where = f"--address {address}" if address else "--backend ray"
        raise UserError(f"{where}: cannot start or reach Ray ({one_line(str(e))})") from None
    try:
        remote = ray.remote(run_point)
        refs = [remote.remote(*job) for job in jobs]
        index = {r.hex(): i for i, r in enumerate(refs)}
        out: list[Any] = [None] * len(jobs)
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for r in done:
                out[index[r.hex()]] = tuple(ray.get(r))
                advance()
        return out
    finally:
        ray.shutdown()


def execute(sweep: Sweep, backend: str, workers: int, address: str | None, advance: Advance) -> list[dict[str, Any]]:
    """Run every point; results come back in grid order whatever the completion order."""
    jobs: list[Job] = [(sweep.text, sweep.origin, p.overrides, p.seed, sweep.force) for p in sweep.points]
    if backend == "local":
        raw = _run_local(jobs, workers, advance)
    elif backend == "dask":
        raw = _run_dask(jobs, workers, address, advance)
    elif backend == "ray":
        raw = _run_ray(jobs, workers, address, advance)
    else:
        raise UserError(f"--backend {backend!r}: unknown backend, expected one of {', '.join(BACKENDS)}")
    results = []
    for point, (ok, payload) in zip(sweep.points, raw):
        if not ok:
            raise UserError(f"{payload} (grid point {point.describe()})")
        results.append(json.loads(payload))
    return results


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def to_table(sweep: Sweep, results: list[dict[str, Any]]) -> pa.Table:
    """One row per grid point: grid keys (strings), seed, metrics and histogram
    statistics (floats). Columns are sorted so that the schema is deterministic."""
    cols: dict[str, pa.Array] = {}
    for key, _ in sweep.axes:
        if key != "seed":
            cols[key] = pa.array([p.coords[key] for p in sweep.points], pa.string())
    cols["seed"] = pa.array([int(r["seed"]) for r in results], pa.uint64())
    metrics = sorted({m for r in results for m in r.get("metrics", {})})
    hists = sorted({h for r in results for h in r.get("histograms", {})})
    numeric: dict[str, list[float | None]] = {}
    for m in metrics:
        numeric[m] = [_num(r.get("metrics", {}).get(m)) for r in results]
    for h in hists:
        for s in HIST_STATS:
            numeric[f"{h}.{s}"] = [_num(r.get("histograms", {}).get(h, {}).get(s)) for r in results]
    for name, vals in numeric.items():
        # A metric that shares its name with a grid key keeps both, distinguishably.
        cols["metric." + name if name in cols else name] = pa.array(vals, pa.float64())
    table = pa.table(cols)
    meta = {
        "irqlab.scenario": results[0].get("scenario", "") if results else "",
        "irqlab.version": _core.__version__,
        "irqlab.commit": commit(),
        "irqlab.grid": json.dumps(sweep.axes),
    }
    return table.replace_schema_metadata(meta)


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    data: bytes = sink.getvalue().to_pybytes()
    return data
