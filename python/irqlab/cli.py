"""The `irqlab` command line (see DESIGN.md for the contract).

Every bad input ends as one `error: ...` line on stderr and exit code 2, with
no traceback and no output file; a traceback means a bug in irqlab."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer
from rich import box
from rich.console import Console
from rich.table import Table

from . import SCENARIOS_DIR, _core
from ._util import UserError, atomic_write, check_overrides, one_line, progress, read_scenario, set_from, time_ns

app = typer.Typer(
    name="irqlab",
    help="A lab for interrupt delivery on servers: simulate, measure, compare.",
    pretty_exceptions_enable=False,
    no_args_is_help=True,
    add_completion=False,
)
out = Console(highlight=False)
err = Console(stderr=True, highlight=False)

U64_MAX = 2**64 - 1
STDOUT = "-"

ScenarioArg = Annotated[Path, typer.Argument(help="Scenario TOML file.", show_default=False)]
SetOpt = Annotated[
    Optional[list[str]], typer.Option("--set", help="Override a scenario key: KEY.PATH=VALUE (repeatable).")
]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", help="Seed instead of the scenario's own.")]
SetFromOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set-from", help="FILE:METRIC=KEY.PATH: a measured value (irqlab measure --json) as an override."),
]


def user_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Turn bad input into one stderr line and exit code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (UserError, _core.ScenarioError) as e:
            err.print(f"error: {one_line(str(e))}", markup=False, soft_wrap=True)
            raise typer.Exit(2) from None
        except KeyboardInterrupt:
            err.print("error: interrupted", markup=False)
            raise typer.Exit(130) from None

    return wrapper


def _check_seed(seed: int | None) -> int | None:
    if seed is not None and not 0 <= seed <= U64_MAX:
        raise UserError(f"--seed {seed}: expected an integer from 0 to 2^64-1")
    return seed


def _fmt(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return str(v)
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer() and abs(v) < 1e15):
        return f"{int(v):,}"
    if isinstance(v, float):
        # At least as many significant digits as the integer part: no 3.3e+06 for counts.
        digits = max(6, len(str(int(abs(v)))) if abs(v) < 1e18 else 6)
        return f"{v:,.{digits}g}"
    return str(v)


def _dump(doc: Any) -> str:
    return json.dumps(doc, indent=2) + "\n"


def _write_json(dest: Path, doc: Any) -> None:
    if str(dest) == STDOUT:
        sys.stdout.write(_dump(doc))
    else:
        atomic_write(dest, _dump(doc))


HIST_STATS = ["count", "mean", "min", "p50", "p90", "p99", "p99.9", "p99.99", "max"]


def _hist_table(hists: dict[str, dict[str, Any]]) -> Table:
    # A few histograms read best one per column (fits 80 columns); many, one per row.
    t = Table(title="histograms", title_justify="left", box=box.SIMPLE_HEAD)
    if len(hists) <= 4:
        t.add_column("")
        for name, h in hists.items():
            t.add_column(f"{name} ({h.get('unit', '')})", justify="right")
        for s in HIST_STATS:
            t.add_row(s, *(_fmt(h.get(s)) for h in hists.values()))
        return t
    t.add_column("histogram", no_wrap=True)
    for s in HIST_STATS:
        t.add_column(s, justify="right")
    t.add_column("unit")
    for name, h in hists.items():
        t.add_row(name, *(_fmt(h.get(s)) for s in HIST_STATS), str(h.get("unit", "")))
    return t


def print_result(result: dict[str, Any]) -> None:
    """A human summary of a result: metrics, then histogram percentiles."""
    out.print(f"[bold]{result.get('scenario', '?')}[/bold]  seed {result.get('seed')}  irqlab {result.get('version')}")
    mt = Table(title="metrics", title_justify="left", box=box.SIMPLE_HEAD)
    mt.add_column("metric")
    mt.add_column("value", justify="right")
    for k, v in result.get("metrics", {}).items():
        mt.add_row(k, _fmt(v))
    out.print(mt)
    hists = result.get("histograms", {})
    if hists:
        out.print(_hist_table(hists))
    series = result.get("series", {})
    if series:
        out.print(f"series: {', '.join(series)} (in --json)")


@app.command()
@user_errors
def run(
    scenario: ScenarioArg,
    set_: SetOpt = None,
    set_from_: SetFromOpt = None,
    seed: SeedOpt = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here ('-' = stdout).")] = None,
    trace_out: Annotated[Optional[Path], typer.Option("--trace", help="Write a Perfetto trace here.")] = None,
) -> None:
    """Run a scenario and print its metrics."""
    text, origin = read_scenario(scenario)
    overrides = set_from(set_from_) + check_overrides(set_)
    raw, trace = _core.run(text, origin, overrides, _check_seed(seed), trace_out is not None)
    result = json.loads(raw)
    if trace_out is not None and trace is None:
        raise UserError(f"--trace {trace_out}: the core produced no trace")
    if json_out is not None:
        _write_json(json_out, result)
    if trace_out is not None:
        atomic_write(trace_out, trace)
    if str(json_out) != STDOUT:
        print_result(result)


@app.command()
@user_errors
def validate(scenario: ScenarioArg, set_: SetOpt = None) -> None:
    """Check a scenario (and overrides) without running it."""
    text, origin = read_scenario(scenario)
    scen = json.loads(_core.load(text, origin, check_overrides(set_)))
    n = len(scen.get("expect", []))
    out.print(f"OK {origin}: scenario {scen.get('name')!r}, {n} expectation(s)", markup=False)


@app.command()
@user_errors
def schema(
    out_file: Annotated[Optional[Path], typer.Option("--out", help="Write the schema here instead of stdout.")] = None,
) -> None:
    """Print the JSON Schema of the scenario format (for editors)."""
    doc = _dump(json.loads(_core.schema()))
    if out_file is None:
        sys.stdout.write(doc)
    else:
        atomic_write(out_file, doc)


@app.command()
@user_errors
def reproduce(
    only: Annotated[Optional[list[str]], typer.Option("--only", help="Only this figure (file stem; repeatable).")] = None,
    out_dir: Annotated[Path, typer.Option("--out", help="Report directory.")] = Path("irqlab-report"),
    figures: Annotated[
        Optional[Path], typer.Option("--figures", help="Directory of figure scenarios (default: the bundled ones).")
    ] = None,
    workers: Annotated[Optional[int], typer.Option("--workers", help="Figures run in parallel.")] = None,
) -> None:
    """Run every published-figure scenario, check it, and write an HTML report."""
    from . import report  # matplotlib: imported only by the command that plots
    from . import reproduce as repro

    figdir = figures if figures is not None else SCENARIOS_DIR / "figures"
    if workers is not None and workers < 1:
        raise UserError(f"--workers {workers}: expected at least 1")
    # A missing bundled folder just means no figures yet; a folder the user named must exist.
    files = [] if figures is None and not figdir.is_dir() and not only else repro.figure_files(figdir, only)
    runs = repro.prepare(files)
    with progress("reproducing figures", len(runs)) as advance:
        repro.execute(runs, workers or os.cpu_count() or 1, advance)
    rows = [row for r in runs for row in repro.check(r)]
    page = report.render(rows, runs, _core.__version__)
    atomic_write(out_dir / "figures.json", _dump({"figures": rows}))
    atomic_write(out_dir / "index.html", page)

    if not rows:
        err.print(f"warning: no figures to reproduce in {figdir} (no [[expect]] entries); "
                  f"wrote an empty report to {out_dir}", markup=False, soft_wrap=True)
        return
    t = Table(title=f"figures ({out_dir / 'index.html'})", title_justify="left")
    name_width = min(40, max(len(r["name"]) for r in rows))
    for c in ("figure", "published", "simulated", "unit", "error", "tolerance", "verdict"):
        t.add_column(c, justify="left" if c in ("figure", "unit", "verdict") else "right",
                     no_wrap=c != "figure", min_width=name_width if c == "figure" else None)
    for r in rows:
        e = "n/a" if r["error"] is None else f"{r['error']:+.2%}"
        verdict = "[green]pass[/green]" if r["within_tolerance"] else "[red]FAIL[/red]"
        t.add_row(r["name"], _fmt(r["published"]), _fmt(r["simulated"]), r["unit"], e, f"±{r['tolerance']:.2%}", verdict)
    out.print(t)
    failed = sum(not r["within_tolerance"] for r in rows)
    out.print(f"{len(rows) - failed} of {len(rows)} figures within tolerance")
    if failed:
        raise typer.Exit(1)


@app.command()
@user_errors
def sweep(
    scenario: ScenarioArg,
    grid: Annotated[
        Optional[list[str]], typer.Option("--grid", help="KEY=V1,V2,... (repeatable; the cartesian product is run).")
    ] = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    backend: Annotated[str, typer.Option("--backend", help="local, dask or ray.")] = "local",
    workers: Annotated[Optional[int], typer.Option("--workers", help="Parallel runs (default: CPU count).")] = None,
    address: Annotated[Optional[str], typer.Option("--address", help="Dask scheduler or Ray cluster address.")] = None,
    out_file: Annotated[Optional[Path], typer.Option("--out", help="Write one Parquet row per grid point.")] = None,
) -> None:
    """Run a scenario over a grid of overrides."""
    from . import sweep as sweeps  # pyarrow: imported only by the command that needs it

    if backend not in sweeps.BACKENDS:
        raise UserError(f"--backend {backend!r}: unknown backend, expected one of {', '.join(sweeps.BACKENDS)}")
    if workers is not None and workers < 1:
        raise UserError(f"--workers {workers}: expected at least 1")
    axes = sweeps.parse_grid(grid)
    overrides = check_overrides(set_)
    text, origin = read_scenario(scenario)
    plan = sweeps.plan(text, origin, axes, overrides, _check_seed(seed))
    n = len(plan.points)
    nworkers = workers or min(os.cpu_count() or 1, n)
    with progress(f"sweep ({n} points)", n) as advance:
        results = sweeps.execute(plan, backend, nworkers, address, advance)
    table = sweeps.to_table(plan, results)
    if out_file is not None:
        atomic_write(out_file, sweeps.parquet_bytes(table))

    keys = [k for k, _ in axes if k != "seed"]
    shown = [m for m in ("interrupts_per_s", "interrupts", "events") if m in table.column_names]
    t = Table(title=f"sweep of {origin}: {n} points" + (f" -> {out_file}" if out_file else ""), title_justify="left")
    for c in [*keys, "seed", *shown]:
        t.add_column(c, justify="left" if c in keys else "right")
    cols = {c: table.column(c).to_pylist() for c in [*keys, "seed", *shown]}
    for i in range(n):
        t.add_row(*(_fmt(cols[c][i]) for c in cols))
    out.print(t)


@app.command()
@user_errors
def bench(
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here ('-' = stdout).")] = None,
    repeat: Annotated[int, typer.Option("--repeat", help="Runs; the fastest is reported.")] = 1,
    scenario: Annotated[
        Optional[Path], typer.Option("--scenario", help="Time this scenario instead of the reference model.")
    ] = None,
    set_: SetOpt = None,
) -> None:
    """Measure engine speed on the reference scenario (bench/reference.toml) or another one."""
    if repeat < 1:
        raise UserError(f"--repeat {repeat}: expected at least 1")
    path = scenario if scenario is not None else SCENARIOS_DIR / "bench" / "reference.toml"
    text, origin = read_scenario(path)
    if scenario is None:
        origin = "bench/reference.toml"
    overrides = check_overrides(set_)
    wall = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        raw, _trace = _core.run(text, origin, overrides, None, False)
        wall = min(wall, time.perf_counter() - t0)
    res = json.loads(raw)
    m = res["metrics"]
    metrics = {
        "interrupts": m["interrupts"],
        "events": m["events"],
        "wall_s": wall,
        "interrupts_per_wall_s": m["interrupts"] / wall,
        "events_per_wall_s": m["events"] / wall,
        # Warm-up included: it is simulated too.
        "sim_s_per_wall_s": _duration_s(text, origin, overrides) / wall,
    }
    doc = {"scenario": res["scenario"], "seed": res["seed"], "version": res["version"],
           "metrics": metrics, "histograms": {}, "series": {}}
    if json_out is not None:
        _write_json(json_out, doc)
    if str(json_out) != STDOUT:
        print_result(doc)


def _floats(opt: str, text: str) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        raise UserError(f"{opt} {text!r}: expected comma-separated numbers") from None
    if any(not v >= 0 for v in vals):
        raise UserError(f"{opt} {text!r}: expected numbers of at least 0")
    return vals


@app.command()
@user_errors
def whatif(
    exceptions_per_s: Annotated[float, typer.Option(help="Syscalls + page faults per second per CPU (under DAIF).")] = 100_000,
    irqs_per_s: Annotated[Optional[float], typer.Option(help="Device interrupts per second per CPU.")] = None,
    irqs_from_host: Annotated[Optional[float], typer.Option(help="Take irqs-per-s from this host's /proc/stat over S seconds.")] = None,
    irq_handler_ns: Annotated[float, typer.Option(help="Interrupt handler length (assumption).")] = 1000,
    cpus: Annotated[str, typer.Option(help="CPU counts to model, comma-separated.")] = "1,8,72",
    base: Annotated[Optional[Path], typer.Option(help="Scenario whose exception costs to start from.")] = None,
    wedge_ms: Annotated[float, typer.Option(help="How long the wedged CPU keeps interrupts masked.")] = 10,
    sdei_dispatch_ns: Annotated[str, typer.Option(help="SDEI firmware entry + dispatch costs to try (an assumption).")] = "1000,10000,100000",
    sdei_signal_ns: Annotated[float, typer.Option(help="SDEI_EVENT_SIGNAL SMC on the requester (an assumption).")] = 2000,
    seed: SeedOpt = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write both tables as JSON ('-' = stdout).")] = None,
) -> None:
    """M1 fleet what-if: pseudo-NMI's throughput cost and who reaches a wedged CPU."""
    from . import whatif as wi

    if irqs_per_s is not None and irqs_from_host is not None:
        raise UserError("--irqs-per-s and --irqs-from-host: give one or the other")
    irqs = wi.host_irqs_per_s(irqs_from_host) if irqs_from_host is not None else (irqs_per_s or 0.0)
    counts = [int(c) for c in _floats("--cpus", cpus)]
    if not counts or any(c < 1 or c > 4096 for c in counts):
        raise UserError(f"--cpus {cpus!r}: expected CPU counts from 1 to 4096")
    if irqs < 0 or irq_handler_ns < 0 or wedge_ms <= 0:
        raise UserError("--irqs-per-s, --irq-handler-ns: expected at least 0; --wedge-ms: above 0")
    b = wi.Base.load(base or wi.DEFAULT_BASE)
    profile = wi.Profile(exceptions_per_s, irqs, irq_handler_ns)
    s = _check_seed(seed) or 1
    tput = wi.throughput(b, profile, counts, s)
    reach = wi.reachability(b, wedge_ms * 1e6, _floats("--sdei-dispatch-ns", sdei_dispatch_ns), sdei_signal_ns,
                            5000, tput[0]["throughput_ratio"], s)
    doc = {"profile": profile.__dict__, "throughput": tput, "reachability": reach}
    if json_out is not None:
        _write_json(json_out, doc)
    if str(json_out) == STDOUT:
        return
    t = Table(title=f"pseudo-NMI throughput cost ({exceptions_per_s:,.0f} exceptions/s, {irqs:,.0f} irqs/s per CPU)",
              title_justify="left")
    for c in ("cpus", "DAIF ops/s", "pseudo-NMI ops/s", "throughput", "tax ns/exception"):
        t.add_column(c, justify="right")
    for r in tput:
        t.add_row(str(r["cpus"]), _fmt(r["daif_ops_per_s"]), _fmt(r["pmr_ops_per_s"]),
                  f"{r['throughput_ratio']:.3f}", f"{r['tax_ns_per_exception']:.1f}")
    out.print(t)
    t = Table(title=f"reaching a CPU wedged for {wedge_ms:g} ms", title_justify="left")
    for c in ("wedged by", "mechanism", "SDEI dispatch", "reached", "latency us", "steady-state cost"):
        t.add_column(c, justify="left" if c in ("wedged by", "mechanism", "reached") else "right", no_wrap=True)
    for r in reach:
        disp = "" if r["sdei_dispatch_ns"] is None else f"{r['sdei_dispatch_ns'] / 1e3:g} us"
        lat = "" if r["latency_us"] is None else f"{r['latency_us']:.2f}"
        t.add_row(r["wedge"], r["mechanism"], disp, "yes" if r["reached"] else "no", lat,
                  f"{r['steady_state_throughput_cost']:.1%}")
    out.print(t)


@app.command("kvm-order")
@user_errors
def kvm_order(
    scenario: ScenarioArg,
    requests: Annotated[
        Optional[str], typer.Option("--requests", help="Requests to permute, comma-separated (default SMI,NMI,PMU,PMI).")
    ] = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    top: Annotated[int, typer.Option("--top", help="Orders to show.")] = 5,
    workers: Annotated[Optional[int], typer.Option("--workers", help="Parallel runs (default: CPU count).")] = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the ranking as JSON ('-' = stdout).")] = None,
) -> None:
    """M4: rank orders of KVM's request list by cancelled VM-enters, and explain what still cancels."""
    from . import kvm_order as ko

    if top < 1:
        raise UserError(f"--top {top}: expected at least 1")
    if workers is not None and workers < 1:
        raise UserError(f"--workers {workers}: expected at least 1")
    text, origin = read_scenario(scenario)
    chosen = requests.split(",") if requests else list(ko.DEFAULT_REQUESTS)
    total = ko.expected_runs(len(chosen)) or 0
    with progress(f"evaluating orders of {', '.join(chosen)}", total) as advance:
        res = ko.search(text, origin, check_overrides(set_), chosen, _check_seed(seed),
                        workers=workers or os.cpu_count() or 1, advance=advance)
    if json_out is not None:
        _write_json(json_out, res)
    if str(json_out) == STDOUT:
        return
    b = res["base"]
    out.print(f"[bold]{res['scenario']}[/bold]: {res['evaluated']} orders ({res['method']}); "
              f"the scenario's order cancels {b['cancels_per_s']:,.1f}/s", soft_wrap=True)
    t = Table(title="best orders", title_justify="left")
    for c in ("#", "order of " + ",".join(res["requests"]), "cancels/s", "lost ns/s", "PMI latency ns"):
        t.add_column(c, justify="left" if c.startswith("order") else "right", no_wrap=True)
    shown = res["ranked"][:top]
    for i, e in enumerate(shown, 1):
        sub = [r for r in e["order"] if r in res["requests"]]
        lat = "" if e["pmi_latency_mean_ns"] is None else f"{e['pmi_latency_mean_ns']:,.0f}"
        t.add_row(str(i), " > ".join(sub), f"{e['cancels_per_s']:,.1f}", f"{e['guest_time_lost_ns_per_s']:,.0f}", lat)
    out.print(t)
    for i, e in enumerate(shown, 1):
        out.print(f"#{i} still cancels: " + ("; ".join(e["explanation"]) or "nothing"), soft_wrap=True)
    out.print("dependencies: " + "; ".join(res["dependencies"]), soft_wrap=True)


@app.command()
@user_errors
def measure(
    what: Annotated[str, typer.Argument(help="syscall, sched_yield or pagefault.", show_default=False)],
    tasks: Annotated[int, typer.Option("--tasks", help="Processes, one pinned per CPU (sched_yield, pagefault).")] = 1,
    calls: Annotated[int, typer.Option("--calls", help="gettid calls per run (syscall).")] = 1_000_000,
    runs: Annotated[int, typer.Option("--runs", help="Runs; the median is reported (syscall).")] = 5,
    seconds: Annotated[float, typer.Option("--seconds", help="Length of one interval.")] = 1.0,
    intervals: Annotated[int, typer.Option("--intervals", help="Intervals; the median is reported.")] = 5,
    warmup: Annotated[float, typer.Option("--warmup", help="Warm-up before the intervals, seconds.")] = 1.0,
    mb: Annotated[int, typer.Option("--mb", help="Mapping size per pass (pagefault).")] = 128,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here ('-' = stdout).")] = None,
) -> None:
    """Measure this host: gettid cost, sched_yield scaling, page-fault rate (native loops)."""
    from .host import measure as hm

    if what not in hm.MEASUREMENTS:
        raise UserError(f"measure {what}: unknown measurement, expected one of {', '.join(hm.MEASUREMENTS)}")
    for name, v, lo in (("--tasks", tasks, 1), ("--calls", calls, 1), ("--runs", runs, 1), ("--intervals", intervals, 1), ("--mb", mb, 1)):
        if v < lo:
            raise UserError(f"{name} {v}: expected at least {lo}")
    if not (0 < seconds <= 600) or not (0 <= warmup <= 600):
        raise UserError("--seconds: expected more than 0 and at most 600; --warmup: 0 to 600")
    if tasks > 4096:
        raise UserError(f"--tasks {tasks}: expected at most 4096")
    if what == "syscall":
        with progress("measure syscall", runs) as advance:
            doc = hm.syscall(calls, runs, advance)
    else:
        with progress(f"measure {what} ({tasks} tasks)", tasks) as advance:
            doc = hm.per_task(what, tasks, warmup, seconds, intervals, mb, advance)
    if json_out is not None:
        _write_json(json_out, doc)
    if str(json_out) != STDOUT:
        print_result(doc)
        h = doc["host"]
        out.print(f"host: {h['kernel']}, {h['cpu_model']}, {h['cores']} CPUs, boot: {h['boot_options'] or '-'}",
                  markup=False, soft_wrap=True)


@app.command()
@user_errors
def record(
    out_file: Annotated[Path, typer.Option("--out", help="Parquet trace to write.", show_default=False)],
    duration: Annotated[float, typer.Option("--duration", help="Seconds to record.")] = 5.0,
) -> None:
    """Record this host's interrupt events (tracefs) to Parquet."""
    from .host import record as hr

    steps = max(1, int(duration * 10))
    with progress(f"recording {duration:g} s", steps) as advance:
        done = [0]

        def tick(elapsed: float) -> None:
            while done[0] < min(steps, int(elapsed * 10)):
                done[0] += 1
                advance()

        summary = hr.record(duration, out_file, tick)
    top = sorted(summary["entries"].items(), key=lambda kv: -kv[1])[:8]
    out.print(f"{summary['events']:,} events -> {out_file}; busiest: " + ", ".join(f"{k} {v:,}" for k, v in top),
              markup=False, soft_wrap=True)


@app.command()
@user_errors
def monitor(
    interval: Annotated[float, typer.Option("--interval", help="Seconds between samples.")] = 1.0,
    count: Annotated[Optional[int], typer.Option("--count", help="Samples to take (default: until Ctrl-C).")] = None,
    per_source: Annotated[bool, typer.Option("--per-source", help="Also show each interrupt source.")] = False,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the samples as JSON ('-' = stdout).")] = None,
) -> None:
    """Live interrupt rates, total and per CPU, and each CPU's hardirq share."""
    from rich.live import Live

    from .host import monitor as hmon

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
            t.add_row(str(i), f"{x:,.0f}", f"{h:.1%}")
        if per_source:
            for name, v in sorted(r["per_source"].items(), key=lambda kv: -kv[1])[:20]:
                if v > 0:
                    t.add_row(name, f"{v:,.0f}", "")
        return t

    live = json_out is None and out.is_terminal
    with (Live(console=out, auto_refresh=False) if live else contextlib.nullcontext()) as lv:
        for t, r in hmon.samples(interval, count):
            keep("interrupts_per_s", t, r["total"])
            for i, (x, h) in enumerate(zip(r["per_cpu"], r["hardirq_share"])):
                keep(f"cpu{i}.interrupts_per_s", t, x)
                keep(f"cpu{i}.hardirq_share", t, h)
            if per_source:
                for name, v in r["per_source"].items():
                    keep(f"source.{name}.per_s", t, v)
            if lv is not None:
                lv.update(view(r), refresh=True)
            elif json_out is None:
                out.print(view(r))
    if json_out is not None:
        mean = lambda k: sum(series[k]["v"]) / len(series[k]["v"])  # noqa: E731
        metrics = {k.replace("_per_s", "_per_s_mean") if k.endswith("_per_s") else k + "_mean": mean(k)
                   for k in series if not k.startswith("source.")}
        from .host.info import host_info

        _write_json(json_out, {"scenario": "monitor", "seed": None, "version": _core.__version__, "metrics": metrics,
                               "histograms": {}, "series": series, "host": host_info()})


@app.command()
@user_errors
def replay(
    trace: Annotated[Path, typer.Argument(help="Parquet trace from irqlab record.", show_default=False)],
    scenario: Annotated[Path, typer.Option("--scenario", help="Scenario whose replay sources take the arrivals.", show_default=False)],
    set_: SetOpt = None,
    set_from_: SetFromOpt = None,
    seed: SeedOpt = None,
    json_out: Annotated[Optional[Path], typer.Option("--json", help="Write the result JSON here ('-' = stdout).")] = None,
) -> None:
    """Feed recorded interrupt arrivals through a modelled machine and policy."""
    from .host import replay as hrep

    text, origin = read_scenario(scenario)
    res, unmatched = hrep.replay(trace, text, origin, set_from(set_from_) + check_overrides(set_), _check_seed(seed))
    if unmatched:
        err.print(f"warning: no recorded interrupt for replay source(s) {', '.join(unmatched)}; they stay silent",
                  markup=False, soft_wrap=True)
    if json_out is not None:
        _write_json(json_out, res)
    if str(json_out) != STDOUT:
        print_result(res)


def _duration_s(text: str, origin: str, overrides: list[str]) -> float:
    """A scenario's simulated duration (warm-up included), in seconds."""
    return time_ns(json.loads(_core.load(text, origin, overrides))["duration"]) / 1e9


def _version(value: bool) -> None:
    if value:
        out.print(f"irqlab {_core.__version__}", markup=False)
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """A lab for interrupt delivery on servers: simulate, measure, compare."""
