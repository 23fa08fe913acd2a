"""This host: `irqlab measure`, `record`, `monitor` and `replay`."""

from __future__ import annotations

import contextlib
import inspect
import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from .. import provenance
from .._util import (
    UserError,
    bundled_file,
    check_measured,
    check_overrides,
    measured_keys,
    note_input,
    progress,
    read_scenario,
    refuse_input_outputs,
    refuse_set_and_set_from,
    set_from,
)
from ..result import document
from . import (
    NOT_PARQUET,
    AllOpt,
    ForceOpt,
    JsonOpt,
    PerCpuOpt,
    SeedOpt,
    SetFromOpt,
    SetOpt,
    app,
    check_seed,
    output_file,
    summary,
    user_errors,
)
from .render import err, out, print_result, to_stdout, write_json


@app.command()
@user_errors
def measure(
    what: Annotated[str, typer.Argument(help="syscall, sched_yield or pagefault.", show_default=False)],
    tasks: Annotated[
        int,
        typer.Option(
            "--tasks",
            help="Processes, pinned round-robin to the allowed CPUs (sched_yield, pagefault); "
            "more tasks than CPUs share them.",
        ),
    ] = 1,
    calls: Annotated[int, typer.Option("--calls", help="gettid calls per run (syscall).")] = 1_000_000,
    runs: Annotated[int, typer.Option("--runs", help="Runs; the median is reported (syscall).")] = 5,
    seconds: Annotated[float, typer.Option("--seconds", help="Length of one interval.")] = 1.0,
    intervals: Annotated[int, typer.Option("--intervals", help="Intervals; the median is reported.")] = 5,
    warmup: Annotated[float, typer.Option("--warmup", help="Warm-up before the intervals, seconds.")] = 1.0,
    mb: Annotated[int, typer.Option("--mb", help="Mapping size per pass (pagefault).")] = 128,
    json_out: JsonOpt = None,
) -> None:
    """Measure this host: gettid cost, sched_yield scaling, page-fault rate (native loops)."""
    from ..host import measure as hm

    if what not in hm.MEASUREMENTS:
        raise UserError(f"measure {what}: unknown measurement, expected one of {', '.join(hm.MEASUREMENTS)}")
    for name, v, lo, hi in (
        ("--tasks", tasks, 1, 4096),
        ("--calls", calls, 1, 10**10),
        ("--runs", runs, 1, 1000),
        ("--intervals", intervals, 1, 10**4),
        ("--mb", mb, 1, 1 << 20),
    ):
        if not lo <= v <= hi:
            raise UserError(f"{name} {v}: expected {lo} to {hi}")
    if what == "pagefault":
        # Every task maps and touches its --mb at once: past the run budget's half of
        # the RAM that is the OOM killer's, not a measurement (a review).
        half_mb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**21
        if mb * tasks > half_mb:
            raise UserError(
                f"--mb {mb} x --tasks {tasks}: {mb * tasks:,} MB mapped at once, "
                f"expected at most half of this machine's memory ({half_mb:,} MB)"
            )
    if not 0 < seconds <= 600:
        raise UserError(f"--seconds {seconds}: expected more than 0 and at most 600")
    if not 0 <= warmup <= 600:
        raise UserError(f"--warmup {warmup}: expected 0 to 600")
    # An option the measurement does not read is refused, not ignored (`syscall`
    # ran its gettid runs whatever --tasks or --seconds said; a review).
    # (The defaults are the signature's, so that the two cannot drift apart.)
    given = {"tasks": tasks, "seconds": seconds, "intervals": intervals, "warmup": warmup, "mb": mb}
    given |= {"calls": calls, "runs": runs}
    unused = {
        "syscall": ("tasks", "seconds", "intervals", "warmup", "mb"),
        "sched_yield": ("calls", "runs", "mb"),
        "pagefault": ("calls", "runs"),
    }
    defaults = inspect.signature(measure).parameters
    for name in unused[what]:
        if given[name] != defaults[name].default:
            raise UserError(f"measure {what}: --{name} is not used by this measurement (see irqlab measure --help)")
    if what == "syscall":
        with progress("measure syscall", runs) as advance:
            doc = hm.syscall(calls, runs, advance)
    else:
        with progress(f"measure {what} ({tasks} tasks)", tasks) as advance:
            doc = hm.per_task(what, tasks, warmup, seconds, intervals, mb, advance)
    share = doc["metrics"]["cpu_share_min"]
    if share < hm.BUSY_SHARE:
        err.print(
            f"warning: a task had its CPU only {share:.0%} of the time: another load (or the hypervisor's steal) "
            "shared it, so this measures a busy host; rerun on a quiet one",
            markup=False,
            soft_wrap=True,
        )
    if json_out is not None:
        write_json(json_out, doc)
    if not to_stdout(json_out):
        print_result(doc)
        from ..host.info import describe

        out.print(
            describe(doc["host"]),
            markup=False,
            soft_wrap=True,
        )


@app.command()
@user_errors
def record(
    out_file: Annotated[
        Path, typer.Option("--out", help="Parquet trace to write.", show_default=False, callback=output_file)
    ],
    duration: Annotated[float, typer.Option("--duration", help="Seconds to record.")] = 5.0,
) -> None:
    """Record this host's interrupt events (tracefs) to Parquet."""
    from ..host import record as hr

    if not 0 < duration <= 3600:  # also refuses nan and inf
        raise UserError(f"--duration {duration}: expected seconds above 0 and at most 3600")
    if str(out_file) == "-":
        raise UserError("--out -: record writes a Parquet file; expected a file name such as trace.parquet")
    if out_file.suffix.lower() in NOT_PARQUET:
        # As a sweep's --out: trace.csv would have held Parquet (a review).
        raise UserError(f"--out {out_file}: record writes Parquet; expected a name such as trace.parquet")
    steps = max(1, int(duration * 10))
    with progress(f"recording {duration:g} s", steps) as advance:
        done = [0]

        def tick(elapsed: float) -> None:
            while done[0] < min(steps, int(elapsed * 10)):
                done[0] += 1
                advance()

        # Once the file is written a Ctrl-C is ignored: it must not turn a kept recording into exit 130.
        summary = hr.record(duration, out_file, tick, keep_sigint_ignored=True)
    if summary["lost"]:
        # The ring buffer (32 MiB per CPU) overwrote its oldest events: the trace
        # starts later than its metadata says on those CPUs.
        lost = ", ".join(f"{c} {n:,}" for c, n in summary["lost"].items())
        err.print(
            f"warning: the trace buffer overflowed and lost events ({lost}): the oldest are missing "
            "on those CPUs; record for a shorter --duration",
            markup=False,
            soft_wrap=True,
        )
    top = sorted(summary["entries"].items(), key=lambda kv: -kv[1])[:8]
    out.print(
        f"{summary['events']:,} events -> {out_file}; busiest: " + ", ".join(f"{k} {v:,}" for k, v in top),
        markup=False,
        soft_wrap=True,
    )


@app.command()
@user_errors
def monitor(
    interval: Annotated[float, typer.Option("--interval", help="Seconds between samples.")] = 1.0,
    count: Annotated[int | None, typer.Option("--count", help="Samples to take (default: until Ctrl-C).")] = None,
    per_source: Annotated[bool, typer.Option("--per-source", help="Also show each interrupt source.")] = False,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the samples as JSON ('-' = stdout).", callback=output_file)
    ] = None,
) -> None:
    """Live interrupt rates, total and per CPU, and each CPU's hardirq share."""
    from rich.live import Live

    from ..host import monitor as hmon

    if not 0.05 <= interval <= 3600:
        raise UserError(f"--interval {interval}: expected 0.05 to 3600 seconds")
    if count is not None and count < 1:
        raise UserError(f"--count {count}: expected at least 1")
    if json_out is not None and count is None:
        raise UserError("--json needs --count: a file is written once the samples are taken")
    series: dict[str, dict[str, list[float]]] = {}

    def keep(name: str, t: float, v: float) -> None:
        s = series.setdefault(name, {"t": [], "v": []})
        s["t"].append(t)
        s["v"].append(v)

    def view(r: dict[str, Any]) -> Table:
        t = Table(title=f"interrupts: {r['total']:,.0f}/s", title_justify="left")
        t.add_column("cpu")
        t.add_column("interrupts/s", justify="right")
        t.add_column("hardirq", justify="right")
        for i, (x, h) in enumerate(zip(r["per_cpu"], r["hardirq_share"])):
            t.add_row(str(i), f"{x:,.0f}", "n/a" if h is None else f"{h:.1%}")
        if per_source:
            for name, v in sorted(r["per_source"].items(), key=lambda kv: -kv[1])[:20]:
                if v > 0:
                    t.add_row(name, f"{v:,.0f}", "")
        return t

    with open("/proc/stat") as f:
        accounted = hmon.irq_time_accounted(f.read())
    if not accounted:
        err.print(
            "warning: this kernel does not account hardirq time (/proc/stat's irq column is 0 since boot: "
            "CONFIG_IRQ_TIME_ACCOUNTING is off), so the hardirq share is n/a",
            markup=False,
            soft_wrap=True,
        )
    # The table shows unless the JSON goes to stdout, as `run` and `measure` do.
    shown = not to_stdout(json_out)
    live = shown and out.is_terminal
    try:
        with Live(console=out, auto_refresh=False) if live else contextlib.nullcontext() as lv:
            for t, r in hmon.samples(interval, count, accounted):
                keep("interrupts_per_s", t, r["total"])
                for i, (x, h) in enumerate(zip(r["per_cpu"], r["hardirq_share"])):
                    keep(f"cpu{i}.interrupts_per_s", t, x)
                    if h is not None:
                        keep(f"cpu{i}.hardirq_share", t, h)
                if per_source:
                    for name, v in r["per_source"].items():
                        keep(f"source.{name}.per_s", t, v)
                if lv is not None:
                    lv.update(view(r), refresh=True)
                elif shown:
                    out.print(view(r))
    except KeyboardInterrupt:
        # Without --count, Ctrl-C is how monitor ends ("until Ctrl-C"), not an error;
        # with one, it cuts the samples short (no JSON written): exit 130.
        if count is not None:
            raise
    if json_out is not None:
        from ..host.info import host_info

        def mean(k: str) -> float:
            return sum(series[k]["v"]) / len(series[k]["v"])

        metrics = {
            k.replace("_per_s", "_per_s_mean") if k.endswith("_per_s") else k + "_mean": mean(k)
            for k in series
            if not k.startswith("source.")
        }
        doc = document("monitor", None, metrics, series=series, host=host_info())
        write_json(json_out, doc)


@app.command()
@user_errors
def replay(
    trace: Annotated[
        Path,
        typer.Argument(
            help="Parquet trace from irqlab record, or a bundled one by name (traces/virtio-disk).", show_default=False
        ),
    ],
    scenario: Annotated[
        Path, typer.Option("--scenario", help="Scenario whose replay sources take the arrivals.", show_default=False)
    ],
    set_: SetOpt = None,
    set_from_: SetFromOpt = None,
    seed: SeedOpt = None,
    json_out: JsonOpt = None,
    force: ForceOpt = False,
    per_cpu: PerCpuOpt = False,
    all_: AllOpt = False,
) -> None:
    """Feed recorded interrupt arrivals through a modelled machine and policy."""
    from ..host import replay as hrep

    text, origin = read_scenario(scenario)
    if not trace.exists() and (bundled := bundled_file(trace, ".parquet")) is not None:
        trace = bundled  # traces/virtio-disk, as the README names it, from any directory
    note_input(trace)
    refuse_set_and_set_from(set_, set_from_)
    measured = set_from(set_from_)
    user = check_overrides(set_)
    check_measured(text, origin, [], measured, user, set_from_)
    overrides = measured + user
    refuse_input_outputs(json=json_out)
    res, warnings = hrep.replay(trace, text, origin, overrides, check_seed(seed), force)
    for w in warnings:
        err.print(f"warning: {w}", markup=False, soft_wrap=True)
    # As `run` records it: the scenario as run, the overrides, what --set-from measured.
    res["provenance"] = provenance.build(
        text, origin, overrides, measured_keys(set_from_), [*res["metrics"], *res["histograms"]]
    )
    # As `run` shows a result: human units, headline first, `*` on what rests on a zero default.
    if json_out is not None:
        write_json(json_out, res)
    if not to_stdout(json_out):
        # The table's footnote offers --per-cpu and --all, as `run`'s does (replay had neither; an audit).
        summary.print_summary(res, None, "all" if all_ else "per-cpu" if per_cpu else "summary")
