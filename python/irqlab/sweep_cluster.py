"""The sweep's cluster backends, Dask and Ray, with points batched into tasks.

A remote task costs scheduling, serialisation and a round trip: tens of
milliseconds on a local cluster, more on a real one. A point of a quick sweep
runs in milliseconds, so one task per point would spend most of the sweep on
overhead. Points are therefore sent in batches sized from the wall time of
the points done so far, so that a task runs for about `TARGET_TASK_S`
(joblib's auto-batching does the same). A point's result does not depend on
its batch: each runs alone, from its own scenario and seed."""

from __future__ import annotations

import functools
import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from ._util import UserError, one_line
from .sweep import Job, _crash, run_point

#: How long a task should run: long beside a task's overhead, short enough
#: that the last tasks do not leave workers idle for long.
TARGET_TASK_S = 1.0

Done = Callable[[int, str, str], None]


def run_batch(jobs: list[Job]) -> list[tuple[bool, str, float]]:
    """Run points one after the other in one task: each one's (ok, payload) and wall seconds."""
    out = []
    for job in jobs:
        t0 = time.perf_counter()
        ok, payload = run_point(*job)
        out.append((ok, payload, time.perf_counter() - t0))
    return out


class Batches:
    """Hands out point indices in batches. Until a point has been timed a batch
    holds one point; then a batch holds as many points as
    take `target_s` at the mean wall time per point seen so far, but never more
    than an equal share of what is left among the workers, so that the end of
    the sweep stays balanced."""

    def __init__(self, order: list[int], workers: int, target_s: float = TARGET_TASK_S) -> None:
        self._left = list(reversed(order))
        self._workers = max(1, workers)
        self._target = target_s
        self._seconds = 0.0
        self._points = 0

    def record(self, seconds: float) -> None:
        """A point of a finished batch took `seconds` of wall time."""
        self._seconds += max(0.0, seconds)
        self._points += 1

    def size(self) -> int:
        """How many points the next batch holds."""
        if not self._left:
            return 0
        if self._points == 0:
            return 1
        per_point = self._seconds / self._points
        want = math.ceil(self._target / per_point) if per_point > 0 else len(self._left)
        share = math.ceil(len(self._left) / self._workers)
        return max(1, min(want, share))

    def next(self) -> list[int]:
        """The next batch's point indices (empty when every point is out)."""
        return [self._left.pop() for _ in range(self.size())]

    def exhausted(self) -> bool:
        return not self._left


class _InFlight:
    """The batches out on a cluster: keeps two per worker under way (one to run,
    one queued, so a worker never waits for the driver), and hands each
    finished batch's results to `done` point by point."""

    def __init__(self, jobs: dict[int, Job], workers: int, done: Done, submit: Callable[[list[Job]], Any]) -> None:
        self._jobs, self._done, self._submit = jobs, done, submit
        self._batches = Batches(list(jobs), workers)
        self._limit = 2 * max(1, workers)
        self.tasks: dict[Any, list[int]] = {}

    def fill(self) -> None:
        while not self._batches.exhausted() and len(self.tasks) < self._limit:
            batch = self._batches.next()
            self.tasks[self._submit([self._jobs[i] for i in batch])] = batch

    def finished(self, task: Any, results: Callable[[], list[tuple[bool, str, float]]]) -> None:
        """Task `task` ended; `results()` gives its points' results or raises (a crash, after its retry)."""
        batch = self.tasks.pop(task)
        try:
            got = results()
        except Exception as e:
            for i in batch:
                self._done(i, "crash", _crash(e))
        else:
            for i, (ok, payload, seconds) in zip(batch, got, strict=True):
                self._batches.record(seconds)
                self._done(i, "ok" if ok else "error", payload)
        self.fill()


def run_dask(jobs: dict[int, Job], workers: int, address: str | None, done: Done) -> None:
    try:
        from dask.distributed import Client, LocalCluster
        from dask.distributed import as_completed as dask_completed
    except ImportError:
        raise UserError("--backend dask needs dask[distributed]: pip install 'irqlab[dask]'") from None
    cluster = None
    try:
        if address:
            client = _dask_client(Client, address)
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
        running = dask_completed()

        def submit(batch: list[Job]) -> Any:
            # retries=1: a batch whose worker raised or died runs once more.
            f = client.submit(run_batch, batch, pure=False, retries=1)
            running.add(f)
            return f.key

        flight = _InFlight(jobs, workers, done, submit)
        flight.fill()
        for f in running:
            flight.finished(f.key, f.result)
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


#: How long a Dask scheduler has to answer (a listener that is not one may never).
DASK_CONNECT_S = 10.0


def _dask_client(client_class: Any, address: str) -> Any:
    """A Dask client of the scheduler at `address`, or one `error:` line within
    seconds. Something that listens there but is not a scheduler made
    `Client` hang without output (a silent listener: its handshake has no
    timeout) or raise from deep inside (an HTTP server's reply read as a frame
    length: a 3 EiB allocation); so it connects on a daemon thread, given
    `DASK_CONNECT_S`, and any failure is the same line."""
    expected = "expected a Dask scheduler's tcp://HOST:PORT (8786)"
    _reachable(address, "a Dask scheduler", expected)
    box: dict[str, Any] = {}

    def connect() -> None:
        try:
            box["client"] = client_class(address, timeout=f"{DASK_CONNECT_S:g}s")
        except BaseException as e:
            box["error"] = e

    t = threading.Thread(target=connect, name="irqlab-dask-connect", daemon=True)
    t.start()
    t.join(DASK_CONNECT_S + 5)
    if t.is_alive():
        raise UserError(f"--address {address}: no Dask scheduler answered in {DASK_CONNECT_S:g} s; {expected}")
    if "error" in box:
        e = box["error"]
        raise UserError(
            f"--address {address}: not a Dask scheduler ({type(e).__name__}: {one_line(str(e))}); {expected}"
        )
    return box["client"]


#: What a Ray --address should be, for the errors that refuse one.
_RAY_EXPECTED = "expected the head node's HOST:PORT (GCS, 6379) or ray://HOST:10001"


def _host_port(address: str) -> tuple[str, int] | None:
    """HOST and PORT of `[scheme://]HOST:PORT`, or None for a form the backend
    resolves itself ("auto", a bare host): its own error stands for those."""
    host, sep, port = address.split("://", 1)[-1].rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def _reachable(address: str, what: str, expected: str) -> None:
    """Refuse an address nothing listens on, within seconds: `ray.init` would
    retry for minutes, printing its own log lines, and not stop for SIGTERM;
    Dask's client waits out its 30 s connect timeout."""
    if (hp := _host_port(address)) is None:
        return
    try:
        socket.create_connection(hp, timeout=5.0).close()
    except OSError as e:
        raise UserError(f"--address {address}: cannot reach {what} there ({e.strerror or e}); {expected}") from None


#: The client preface of HTTP/2 (RFC 9113, 3.4) and an empty SETTINGS frame.
_H2_HELLO = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])


def _speaks_grpc(address: str, timeout_s: float = 5.0) -> None:
    """Refuse a Ray address where something listens that is not Ray: a Ray
    head's GCS (and the Ray Client server) is gRPC, so it answers an HTTP/2
    client preface with a SETTINGS frame at once. `ray.init` against anything
    else retried for minutes, printing its own log lines (a review)."""
    if (hp := _host_port(address)) is None:
        return
    head = b""
    try:
        with socket.create_connection(hp, timeout=timeout_s) as c:
            c.settimeout(timeout_s)
            c.sendall(_H2_HELLO)
            while len(head) < 9 and (got := c.recv(9 - len(head))):
                head += got
    except OSError:
        pass
    # A frame header: 3 bytes of length, type 4 (SETTINGS), flags, stream 0.
    if len(head) < 9 or head[3] != 4 or int.from_bytes(head[5:9], "big") & 0x7FFFFFFF != 0:
        raise UserError(
            f"--address {address}: something listens there but it is not a Ray cluster "
            f"(no gRPC answer in {timeout_s:g} s); {_RAY_EXPECTED}"
        )


def run_ray(jobs: dict[int, Job], workers: int, address: str | None, done: Done) -> None:
    try:
        import ray
    except ImportError:
        raise UserError("--backend ray needs ray, which is not installed: pip install 'irqlab[ray]'") from None
    if address:
        _reachable(address, "a Ray cluster", _RAY_EXPECTED)
        _speaks_grpc(address)
    # Ray's own INFO and WARNING lines ("Started a local Ray instance") are not
    # the sweep's output: only its errors reach stderr.
    try:
        if address:
            ray.init(address=address, ignore_reinit_error=True, log_to_driver=False, logging_level=logging.ERROR)
        else:
            ray.init(
                num_cpus=workers,
                include_dashboard=False,
                ignore_reinit_error=True,
                log_to_driver=False,
                logging_level=logging.ERROR,
            )
    except (ConnectionError, OSError, ValueError, RuntimeError) as e:
        where = f"--address {address}" if address else "--backend ray"
        raise UserError(f"{where}: cannot start or reach Ray ({one_line(str(e))})") from None
    try:
        # One retry when the worker process dies or the task raises.
        remote = ray.remote(max_retries=1, retry_exceptions=True)(run_batch)
        flight = _InFlight(jobs, workers, done, lambda batch: remote.remote(batch))
        flight.fill()
        while flight.tasks:
            ready, _ = ray.wait(list(flight.tasks), num_returns=1)
            for r in ready:
                flight.finished(r, functools.partial(ray.get, r))
    finally:
        ray.shutdown()
