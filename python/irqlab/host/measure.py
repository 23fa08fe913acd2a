"""`irqlab measure`: will-it-scale-style loops run natively (irqlab-host,
through the extension), in forked processes pinned one per CPU."""

from __future__ import annotations

import collections
import multiprocessing as mp
import os
import signal
import statistics
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from .. import _core
from .._util import UserError
from ..result import document
from .info import host_info

MEASUREMENTS = ("syscall", "sched_yield", "pagefault")


def _doc(name: str, metrics: dict[str, float], series: dict[str, Any], params: dict[str, Any]) -> dict[str, Any]:
    return document(f"measure {name}", None, metrics, series=series, host=host_info(), params=params)


def syscall(calls: int = 1_000_000, runs: int = 5, advance: Callable[[], None] | None = None) -> dict[str, Any]:
    """gettid() `calls` times, `runs` times, on one pinned CPU: median ns per call."""
    _pin(0)
    _core.host_gettid_ns(min(calls, 100_000))  # warm-up
    per_run, shares = [], []
    for _ in range(runs):
        wall, cpu = time.monotonic(), time.thread_time()
        per_run.append(_core.host_gettid_ns(calls))
        shares.append(_share(time.thread_time() - cpu, time.monotonic() - wall))
        if advance:
            advance()
    metrics = {
        "ns_per_call": statistics.median(per_run),
        "ns_per_call_min": min(per_run),
        "ns_per_call_max": max(per_run),
        "cpu_share_min": min(shares),
    }
    return _doc(
        "syscall", metrics, {"ns_per_call": {"t": list(range(runs)), "v": per_run}}, {"calls": calls, "runs": runs}
    )


def _share(cpu_s: float, wall_s: float) -> float:
    """The share of the wall time the loop had its CPU: another load on that
    CPU (or a hypervisor's steal) takes the rest, and the loop's rate with it."""
    return min(1.0, cpu_s / wall_s) if wall_s > 0 else 1.0


#: Under this share of its CPU a task measured a busy host, not this one
#: (`cpu_share_min`; the CLI warns).
BUSY_SHARE = 0.9


def _pin(i: int) -> None:
    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[i % len(cpus)]})


#: Blocked while the tasks are forked (`per_task`). A SIGTERM that came
#: between a fork and the task's reset of its handlers ran the CLI's inherited
#: handler, so the task exited 143 instead of dying of the signal; and one that
#: came to the parent inside fork's after-fork hooks raised there, where Python
#: ignores the exception ("Exception ignored in _releaseLock"), so the
#: terminated command ran on (both seen on a loaded CI machine). Blocked, the
#: signal waits: the task takes it once its handlers are the default ones, the
#: parent once every fork has returned.
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


@contextmanager
def _stop_signals_held() -> Iterator[None]:
    """Forks under it: the stop signals are blocked in this thread (what a
    forked task inherits), and one that reaches the process anyway (through
    another thread) is only noted; it is raised again once the block is over,
    in plain code, where its handler's exception unwinds as it should."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread may set handlers, and only it runs them
        return
    noted: list[int] = []
    held = {sig: signal.signal(sig, lambda signum, _frame: noted.append(signum)) for sig in _STOP_SIGNALS}
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for sig, handler in held.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        if noted:
            signal.raise_signal(noted[0])


def _worker(kind: str, i: int, barrier: Any, q: Any, warmup: float, interval: float, intervals: int, mb: int) -> None:
    # A task's loop runs in Rust and looks at no Python signal handler until it
    # returns (up to --seconds): with the CLI's handlers, inherited by fork, a
    # SIGTERM or Ctrl-C left it running and holding the command's stderr, so a
    # terminated measure's output stayed open (a CI run waited a minute on it).
    # The default action ends a task at once; it has nothing to clean up.
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    # Forked with both blocked (`per_task`): one sent meanwhile is taken now, by the default action.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    try:
        _pin(i)
        barrier.wait()
        run: Callable[[float], tuple[int, int, int]]
        if kind == "sched_yield":
            run = _core.host_sched_yield_ops
        else:
            run = lambda s: _core.host_page_faults(s, mb << 20)  # noqa: E731
        run(warmup)
        wall, cpu = time.monotonic(), time.thread_time()
        counts = [run(interval) for _ in range(intervals)]
        share = _share(time.thread_time() - cpu, time.monotonic() - wall)
        q.put((i, counts, None, sorted(os.sched_getaffinity(0)), share))
    except Exception as e:  # reported by the parent as one line
        # The native loops' own errors say what failed (`mmap of N bytes failed: …`).
        why = str(e) if type(e) is RuntimeError and str(e) else f"{type(e).__name__}: {e}"
        q.put((i, [], why, [], 0.0))


def _next_result(q: Any, procs: list[Any], done: dict[int, Any], kind: str, deadline: float) -> Any:
    """The next task's result. A task that died without one (SIGKILL, the OOM
    killer) is one error line at once, where waiting for its result hung for a
    minute and then raised `queue.Empty`."""
    import queue

    while True:
        try:
            return q.get(timeout=0.2)
        except queue.Empty:
            pass
        for i, p in enumerate(procs):
            if i not in done and p.exitcode is not None and p.exitcode != 0:
                how = f"killed by signal {-p.exitcode}" if p.exitcode < 0 else f"exit {p.exitcode}"
                raise UserError(f"measure {kind}: task {i} died ({how}) before it reported; no result")
        if time.monotonic() > deadline:
            raise UserError(f"measure {kind}: no result from every task in time; no result")


def _reap(procs: list[Any], grace: float) -> None:
    """Lets the tasks exit within `grace` seconds in all, then kills the rest
    and reaps them. (Each was joined for 5 s in turn: after a SIGTERM, 4,096
    tasks waiting at the barrier kept the command for hours.)"""
    end = time.monotonic() + grace
    started = [p for p in procs if p.pid is not None]
    for p in started:
        p.join(timeout=max(0.0, end - time.monotonic()))
    for p in started:
        if p.is_alive():
            p.kill()
    for p in started:
        p.join(timeout=5)


def per_task(
    kind: str,
    tasks: int,
    warmup: float,
    interval: float,
    intervals: int,
    mb: int = 128,
    advance: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """N forked processes, one per CPU (round-robin past the CPU count), all
    starting together; counts per fixed interval after a warm-up."""
    ctx = mp.get_context("fork")
    barrier, q = ctx.Barrier(tasks), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(kind, i, barrier, q, warmup, interval, intervals, mb), daemon=True)
        for i in range(tasks)
    ]
    counts: dict[int, list[tuple[int, int, int]]] = {}
    pinned: dict[int, list[int]] = {}
    shares: dict[int, float] = {}
    finished = False
    try:
        with _stop_signals_held():
            for p in procs:
                p.start()
        deadline = time.monotonic() + warmup + interval * intervals + 60
        for _ in range(tasks):
            i, c, failure, cpus, share = _next_result(q, procs, counts, kind, deadline)
            if failure:
                raise UserError(f"measure {kind}: task {i} failed: {failure}")
            counts[i] = c
            pinned[i] = cpus
            shares[i] = share
            if advance:
                advance()
        finished = True
    finally:
        _reap(procs, grace=5.0 if finished else 0.0)

    # Each loop checks the clock only between batches (a 128 MB pass takes tens of
    # ms), so a rate is its count over the time it really took, not the interval.
    def rate(c: tuple[int, int, int], k: int = 0) -> float:
        return c[k] / (c[1] / 1e9) if c[1] else 0.0

    totals = [sum(rate(counts[i][k]) for i in range(tasks)) for k in range(intervals)]
    name = "ops_per_s" if kind == "sched_yield" else "faults_per_s"
    total = statistics.median(totals)
    metrics = {name: total, f"{name}_per_task": total / tasks, "tasks": float(tasks)}
    per_task_rates = [statistics.median(rate(x) for x in c) for _, c in sorted(counts.items())]
    metrics[f"{name}_per_task_min"] = min(per_task_rates)
    metrics[f"{name}_per_task_max"] = max(per_task_rates)
    # Each task's share of its CPU over what its CPU's own tasks leave it (more
    # tasks than CPUs share them by design): the lowest, 1 on a quiet host.
    on_cpu = collections.Counter(tuple(c) for c in pinned.values())
    metrics["cpu_share_min"] = min(min(1.0, shares[i] * on_cpu[tuple(pinned[i])]) for i in range(tasks))
    # One pass of the loop, whole: what a scenario's task.N.per_op takes.
    op = "ns_per_op" if kind == "sched_yield" else "ns_per_fault"
    metrics[op] = statistics.median(c[1] / c[0] for cs in counts.values() for c in cs if c[0])
    if kind == "pagefault":
        # Pages written are will-it-scale's ops; with transparent huge pages one
        # fault maps up to 512 of them.
        metrics["minor_faults_per_s"] = statistics.median(
            sum(rate(counts[i][k], 2) for i in range(tasks)) for k in range(intervals)
        )
        metrics["pages_per_fault"] = total / metrics["minor_faults_per_s"] if metrics["minor_faults_per_s"] else 0.0
    series = {name: {"t": [interval * (k + 1) for k in range(intervals)], "v": totals}}
    return _doc(
        kind,
        metrics,
        series,
        {
            "tasks": tasks,
            "warmup_s": warmup,
            "interval_s": interval,
            "intervals": intervals,
            "task_cpus": [pinned[i] for i in range(tasks)],
            **({"mb": mb} if kind == "pagefault" else {}),
        },
    )
