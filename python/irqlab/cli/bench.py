"""`irqlab bench`: engine speed on the reference scenario or another one."""

from __future__ import annotations

import json
import math
import resource
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Annotated

import typer

from .. import SCENARIOS_DIR, _core
from .._util import UserError, check_overrides, duration_s, one_line, read_scenario, refuse_input_outputs
from ..result import document
from . import ForceOpt, JsonOpt, SetOpt, app, user_errors
from .render import emit, err


@app.command()
@user_errors
def bench(
    json_out: JsonOpt = None,
    repeat: Annotated[int, typer.Option("--repeat", help="Runs (1 to 1000); the fastest is reported.")] = 1,
    scenario: Annotated[
        Path | None, typer.Option("--scenario", help="Time this scenario instead of the reference model.")
    ] = None,
    set_: SetOpt = None,
    scale: Annotated[
        str | None,
        typer.Option(
            "--scale",
            help="CPU counts, e.g. 1,64,2048: the reference load spread over each (32 sources per CPU, "
            "the same interrupts), and a table of events per wall-second (--repeat: rounds over every size).",
            show_default=False,
        ),
    ] = None,
    force: ForceOpt = False,
    peer: Annotated[
        list[str] | None,
        typer.Option(
            "--peer",
            help="A peer of the reference model to time beside it, as a command that prints JSON with "
            "interrupts_per_wall_s (e.g. 'python3 ../shared/bench/simpy_reference.py 0.5'); repeatable. "
            "Its runs alternate with irqlab's, the fastest of --repeat each, and the ratio is reported.",
        ),
    ] = None,
) -> None:
    """Measure engine speed on the reference scenario (bench/reference.toml) or another one.

    Every count is over the whole simulated run, as the wall time is: the
    scenario's warm-up is run as measured time (warmup = 0), so that
    interrupts, events and simulated seconds per wall-second agree.
    """
    if not 1 <= repeat <= MAX_REPEAT:
        raise UserError(f"--repeat {repeat}: expected a number of runs from 1 to {MAX_REPEAT}")
    if scale is not None:
        if scenario is not None or set_:
            raise UserError("--scale times its own scenarios: give it without --scenario or --set")
        return _scale(_cpu_counts(scale), repeat, json_out)
    if peer and (scenario is not None or set_):
        raise UserError("--peer times the reference model's peers: give it without --scenario or --set")
    peers = [_peer_command(p) for p in peer or []]
    path = scenario if scenario is not None else SCENARIOS_DIR / "bench" / "reference.toml"
    text, origin = read_scenario(path)
    refuse_input_outputs(json=json_out)
    if scenario is None:
        origin = "bench/reference.toml"
    # The report counts interrupts after the warm-up only, and the wall time
    # covers it too: a warm-up of 90 % read 10x fewer interrupts per wall-second.
    overrides = [*check_overrides(set_), "warmup=0s"]
    walls: list[float] = []
    peer_runs: list[list[float]] = [[] for _ in peers]
    for _ in range(repeat):
        # Interleaved, so that a change in the machine's load hits both sides.
        t0 = time.perf_counter()
        raw, _trace = _core.run(text, origin, overrides, None, False, None, force)
        walls.append(time.perf_counter() - t0)
        for i, (cmd, shown) in enumerate(peers):
            peer_runs[i].append(_run_peer(cmd, shown))
    wall = min(walls)
    peer_rates = [max(runs) for runs in peer_runs]
    res = json.loads(raw)
    m = res["metrics"]
    metrics = {
        "interrupts": m["interrupts"],
        "events": m["events"],
        "wall_s": wall,
        "interrupts_per_wall_s": m["interrupts"] / wall,
        "events_per_wall_s": m["events"] / wall,
        "sim_s_per_wall_s": duration_s(text, origin, overrides) / wall,
        "peak_rss_mb": peak_rss_mb(),
    }
    for i, rate in enumerate(peer_rates):
        metrics[f"peer.{i}.interrupts_per_wall_s"] = rate
        metrics[f"peer.{i}.irqlab_times"] = metrics["interrupts_per_wall_s"] / rate
        # Each round's irqlab run against the peer's run beside it: on a host whose
        # speed swings (this VM's by up to 40 %), the two fastest may come from
        # different rounds, where a round's pair met the same speed.
        metrics[f"peer.{i}.irqlab_times_median_round"] = statistics.median(
            m["interrupts"] / w / r for w, r in zip(walls, peer_runs[i], strict=True)
        )
    for i, (_, shown) in enumerate(peers):
        # The median round first: each round's two runs met the same machine,
        # where the fastest of irqlab's 0.1 s runs can find a quiet moment that
        # a peer's 20 s run cannot (an audit).
        err.print(
            f"peer {i} ({shown}): {peer_rates[i]:,.0f} interrupts per wall-second at its fastest; "
            f"irqlab {metrics[f'peer.{i}.irqlab_times_median_round']:,.1f}x at the median of {repeat} rounds "
            f"(each round's runs side by side; {metrics[f'peer.{i}.irqlab_times']:,.1f}x fastest against fastest)",
            markup=False,
            soft_wrap=True,
        )
    doc = document(res["scenario"], res["seed"], metrics)
    emit(doc, json_out)


def _peer_command(spec: str) -> tuple[list[str], str]:
    """A --peer as argv, and how to name it."""
    try:
        argv = shlex.split(spec)
    except ValueError as e:
        raise UserError(f"--peer {spec!r}: {e}; expected a command line") from None
    if not argv:
        raise UserError("--peer '': expected a command line that prints JSON with interrupts_per_wall_s")
    return argv, " ".join(Path(a).name if "/" in a else a for a in argv)


def _run_peer(argv: list[str], shown: str) -> float:
    """One run of a peer: its interrupts per wall-second, or a one-line error."""
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=PEER_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise UserError(f"--peer {shown}: {one_line(str(e))}") from None
    if p.returncode != 0:
        last = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"--peer {shown}: exit {p.returncode}: {one_line(last)}")
    try:
        raw = json.loads(p.stdout)["interrupts_per_wall_s"]
        if isinstance(raw, bool):  # JSON true is not a rate (float(True) is 1)
            raise TypeError(raw)
        rate = float(raw)
    except (ValueError, KeyError, TypeError):
        raise UserError(f"--peer {shown}: expected JSON with interrupts_per_wall_s on stdout") from None
    # (Infinity, which Python's json reads, would go into --json as invalid JSON.)
    if not (rate > 0 and math.isfinite(rate)):
        raise UserError(f"--peer {shown}: interrupts_per_wall_s {rate}: expected a finite number above 0")
    return rate


#: The most --repeat takes, as `measure --runs`: a number past it is a typo, not a plan.
MAX_REPEAT = 1000


#: How long one peer run may take (SimPy's twin takes a few seconds).
PEER_TIMEOUT_S = 600


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, in MB (Python and all)."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


#: Where `--scale` stops: a scenario's most CPUs (`platform.cpus`, scenario/validate.rs MAX_CPUS).
MAX_SCALE_CPUS = 4096


def _cpu_counts(text: str) -> list[int]:
    counts: list[int] = []
    for part in text.split(","):
        try:
            n = int(part.strip())
        except ValueError:
            n = 0
        if not 1 <= n <= MAX_SCALE_CPUS:
            raise UserError(
                f"--scale {text}: expected CPU counts from 1 to {MAX_SCALE_CPUS}, comma-separated (1,64,2048)"
            )
        counts.append(n)
    return sorted(set(counts))


def _scale(counts: list[int], repeat: int, json_out: JsonOpt) -> None:
    """The same interrupts on ever more CPUs and sources: how the cost per event
    grows with the machine (issue 18).

    The sizes are run in rounds, every size once a round, and each size's
    fastest run is reported. This machine's speed swings by up to 40 % over
    tens of seconds (a shared host): timing all of one size and then all of
    the next would put a swing between two sizes into their ratio, where in
    rounds every size meets it alike. The first round goes smallest first, so
    that the process's peak memory after each size is that size's (memory
    grows with the size).

    Each size is also run for 1 ns of simulated time: the run's fixed cost
    (building the machine, 65,536 sources at 2,048 CPUs; its report; tearing
    it down), which the end-to-end figure pays once for a run of only ~10^6
    events. The rest is the event loop, shown on its own so that a reader can
    tell which one grew."""
    from rich import box
    from rich.table import Table

    from .render import err, fmt, out, to_stdout, write_json

    texts = {cpus: _core.scale_scenario(cpus) for cpus in counts}
    wall = dict.fromkeys(counts, math.inf)
    setup = dict.fromkeys(counts, math.inf)
    events: dict[int, float] = {}
    rss: dict[int, float] = {}
    # The process before any run (Python, the CLI, the extension): each size's
    # own memory is its peak over this (the 1-CPU figure was almost all Python).
    rss_start = peak_rss_mb()
    for round_ in range(repeat):
        for cpus in counts:
            text = texts[cpus]
            t0 = time.perf_counter()
            raw, _trace = _core.run(text, f"scale-{cpus}", [], None, False)
            w = time.perf_counter() - t0
            wall[cpus] = min(wall[cpus], w)
            t0 = time.perf_counter()
            _core.run(text, f"scale-{cpus}", ["duration=1ns"], None, False)
            setup[cpus] = min(setup[cpus], time.perf_counter() - t0)
            n = events[cpus] = json.loads(raw)["metrics"]["events"]  # the same every round: same seed
            if round_ == 0:
                rss[cpus] = peak_rss_mb()
            if not to_stdout(json_out):
                err.print(f"round {round_ + 1}/{repeat}, {cpus} CPUs: {n / w / 1e6:.2f} M events/s", markup=False)
    rows: list[dict[str, float]] = []
    for cpus in counts:
        loop = max(wall[cpus] - setup[cpus], 1e-9)
        rows.append(
            {
                "cpus": cpus,
                "sources": 32 * cpus,
                "events": events[cpus],
                "wall_s": wall[cpus],
                "events_per_wall_s": events[cpus] / wall[cpus],
                "setup_s": setup[cpus],
                "loop_events_per_wall_s": events[cpus] / loop,
                "peak_rss_mb": rss[cpus],
                "run_rss_mb": max(rss[cpus] - rss_start, 0.0),
            }
        )
    base, loop_base = rows[0]["events_per_wall_s"], rows[0]["loop_events_per_wall_s"]
    for r in rows:
        r["vs_smallest"] = r["events_per_wall_s"] / base
        r["loop_vs_smallest"] = r["loop_events_per_wall_s"] / loop_base
    doc = document("scale", 1, {}, tables={"scale": rows})
    if json_out is not None:
        write_json(json_out, doc)
    if to_stdout(json_out):
        return
    t = Table(
        title=f"events per wall-second as the machine grows, 32 sources per CPU (fastest of {repeat} rounds)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
    )
    cols = ("CPUs", "events", "wall s", "M ev/s", "vs 1st", "setup ms", "loop M/s", "loop 1st", "RSS MB", "run MB")
    for col in cols:
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(
            fmt(r["cpus"]),
            f"{r['events'] / 1e6:.2f}M",
            f"{r['wall_s']:.3f}",
            f"{r['events_per_wall_s'] / 1e6:.2f}",
            f"{r['vs_smallest']:.0%}",
            f"{r['setup_s'] * 1e3:.1f}",
            f"{r['loop_events_per_wall_s'] / 1e6:.2f}",
            f"{r['loop_vs_smallest']:.0%}",
            f"{r['peak_rss_mb']:.0f}",
            f"{r['run_rss_mb']:.0f}",
        )
    out.print(t)
    err.print(
        "vs 1st: events/s against the smallest machine's; setup: a 1 ns run (build, report, teardown);"
        " loop: the rest of the wall time; RSS: the process's peak; run: that peak over the process's before any"
        f" run ({rss_start:.0f} MB: Python, the CLI and the extension)",
        markup=False,
    )
