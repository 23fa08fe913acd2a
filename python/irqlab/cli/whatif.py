"""`irqlab whatif`: the M1 fleet what-if (pseudo-NMI's throughput cost, reaching a wedged CPU)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import typer

from .._util import UserError
from . import SeedOpt, app, check_seed, output_file, summary, user_errors
from .render import fmt, out, to_stdout, write_json

#: What the core can hold as a time: 1 ps to about 104 days (here in ns). An
#: option out of it was refused by the core against the generated scenario's
#: keys ("whatif.json: cpu.sdei.dispatch: too long"), not the option (a review).
_MIN_NS, _MAX_NS = 1e-3, 9e15


def _time_ok(opt: str, given: float, ns: float, expected: str = "0 or a time from 1 ps to about 104 days") -> None:
    if ns != 0 and not (_MIN_NS <= ns <= _MAX_NS):
        raise UserError(f"{opt} {given:g}: expected {expected}")


def _floats(opt: str, text: str) -> list[float]:
    try:
        vals = [float(v) for v in text.split(",")]
    except ValueError:
        raise UserError(f"{opt} {text!r}: expected comma-separated numbers") from None
    if any(not (0 <= v < math.inf) for v in vals):
        raise UserError(f"{opt} {text!r}: expected finite numbers of at least 0")
    return vals


@app.command()
@user_errors
def whatif(
    exceptions_per_s: Annotated[
        float,
        typer.Option(
            help="Exceptions per second per CPU (under DAIF), each the --base scenario's kind: gettid "
            "by default, 9 PMR accesses each; a page fault takes 12.3, so give a page-fault --base for those."
        ),
    ] = 100_000,
    irqs_per_s: Annotated[float | None, typer.Option(help="Device interrupts per second per CPU.")] = None,
    irqs_from_host: Annotated[
        float | None,
        typer.Option(
            help="Take irqs-per-s from this host's /proc/stat over S seconds: every interrupt the kernel "
            "counts there, timer ticks and IPIs included (on x86 LOC, RES, CAL, TLB), not only devices'."
        ),
    ] = None,
    irq_handler_ns: Annotated[float, typer.Option(help="Interrupt handler length (assumption).")] = 1000,
    cpus: Annotated[str, typer.Option(help="CPU counts to model, comma-separated.")] = "1,8,72",
    base: Annotated[Path | None, typer.Option(help="Scenario whose exception costs to start from.")] = None,
    wedge_ms: Annotated[
        float,
        typer.Option(
            help="How long the wedged CPU keeps interrupts masked, from 10 us before the request; "
            "the requester waits up to 10 s (nmi_trigger_cpumask_backtrace)."
        ),
    ] = 10,
    sdei_dispatch_ns: Annotated[
        str, typer.Option(help="SDEI firmware entry + dispatch costs to try (an assumption).")
    ] = "1000,10000,100000",
    sdei_signal_ns: Annotated[
        float, typer.Option(help="SDEI_EVENT_SIGNAL SMC on the requester (an assumption).")
    ] = 2000,
    sdei_after_ms: Annotated[
        float,
        typer.Option(
            help="How long the backtrace waits for the IPI before it signals SDEI (the brief keeps SDEI for a "
            "CPU that ignored the IPI): by default the kernel's whole 10 s wait; a proposal may wait less."
        ),
    ] = 10_000,
    seed: SeedOpt = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write both tables as JSON ('-' = stdout).", callback=output_file)
    ] = None,
) -> None:
    """M1 fleet what-if: pseudo-NMI's throughput cost and who reaches a wedged CPU."""
    from .. import whatif as wi

    if irqs_per_s is not None and irqs_from_host is not None:
        raise UserError("--irqs-per-s and --irqs-from-host: give one or the other")
    irqs = wi.host_irqs_per_s(irqs_from_host) if irqs_from_host is not None else (irqs_per_s or 0.0)
    # One refusal for every bad count (-1 read "finite numbers of at least 0", 0 this).
    bad_cpus = UserError(f"--cpus {cpus!r}: expected whole CPU counts from 1 to 4096, comma-separated")
    try:
        given = [float(v) for v in cpus.split(",")]
    except ValueError:
        raise bad_cpus from None
    if not all(1 <= g <= 4096 and g.is_integer() for g in given):
        raise bad_cpus
    counts = [int(g) for g in given]
    finite = {
        "--exceptions-per-s": exceptions_per_s,
        "--irqs-per-s": irqs,
        "--irq-handler-ns": irq_handler_ns,
        "--wedge-ms": wedge_ms,
        "--sdei-signal-ns": sdei_signal_ns,
        "--sdei-after-ms": sdei_after_ms,
    }
    for name, v in finite.items():
        if not math.isfinite(v):
            raise UserError(f"{name} {v}: expected a finite number")
    for name, v in finite.items():
        # A profile needs exceptions to slow down and a wedge to last: both above 0.
        if name in ("--wedge-ms", "--exceptions-per-s") and v <= 0:
            raise UserError(f"{name} {v:g}: expected above 0")
        if v < 0:
            raise UserError(f"{name} {v:g}: expected at least 0")
    _time_ok("--irq-handler-ns", irq_handler_ns, irq_handler_ns)
    _time_ok("--sdei-signal-ns", sdei_signal_ns, sdei_signal_ns)
    _time_ok("--wedge-ms", wedge_ms, wedge_ms * 1e6)
    _time_ok("--sdei-after-ms", sdei_after_ms, sdei_after_ms * 1e6)
    # One CPU's exceptions come one per 1/rate: that gap is a time too.
    rates = f"a rate from {1e9 / _MAX_NS:.2g}/s to {1e9 / _MIN_NS:.0e}/s (one per 1 ps to about 104 days)"
    _time_ok("--exceptions-per-s", exceptions_per_s, 1e9 / exceptions_per_s, rates)
    dispatch = _floats("--sdei-dispatch-ns", sdei_dispatch_ns)
    for d in dispatch:
        _time_ok("--sdei-dispatch-ns", d, d)
    b = wi.Base.load(base or wi.DEFAULT_BASE)
    profile = wi.Profile(exceptions_per_s, irqs, irq_handler_ns)
    # Without --seed, seed 1 (the generated scenarios have no seed of their own);
    # `check_seed(seed) or 1` would also turn --seed 0 into 1.
    checked = check_seed(seed)
    s = 1 if checked is None else checked
    tput = wi.throughput(b, profile, counts, s)
    reach = wi.reachability(
        b,
        wedge_ms * 1e6,
        dispatch,
        sdei_signal_ns,
        wi.CROSSCALL_HANDLER_NS,
        tput[0]["throughput_ratio"],
        s,
        sdei_after_ns=sdei_after_ms * 1e6,
    )
    stop = wi.stopping(b, wedge_ms * 1e6, wi.CROSSCALL_HANDLER_NS, s, dispatch[0], sdei_signal_ns)
    doc = {"profile": profile.__dict__, "throughput": tput, "reachability": reach, "stop": stop}
    if json_out is not None:
        write_json(json_out, doc)
    if to_stdout(json_out):
        return
    # Plain-text tables as `run` and `sweep` print them: wrapped into groups of
    # columns at the terminal's width (80 when piped), each group repeating the
    # columns that name a row, never cut.
    headers = ["cpus", "DAIF ops/s", "pseudo-NMI ops/s", "throughput", "tax ns/exception"]
    rows = [
        [
            str(r["cpus"]),
            fmt(r["daif_ops_per_s"]),
            fmt(r["pmr_ops_per_s"]),
            f"{r['throughput_ratio']:.3f}",
            f"{r['tax_ns_per_exception']:.1f}",
        ]
        for r in tput
    ]
    title = f"pseudo-NMI throughput cost ({exceptions_per_s:,.0f} exceptions/s, {irqs:,.0f} irqs/s per CPU)"
    _table(title, headers, rows, [True] * len(headers), 1)
    headers = [
        "wedged by",
        "mechanism",
        "SDEI dispatch",
        "backtrace",
        "by",
        "latency us",
        "requester spins us",
        # pseudo-NMI's, from the first --cpus count's throughput (the table above).
        f"steady-state cost ({tput[0]['cpus']} CPU{'' if tput[0]['cpus'] == 1 else 's'})",
    ]
    rows = [
        [
            r["wedge"],
            r["mechanism"] + (" (FEAT_NMI)" if r["mechanism"] == "nmi" else ""),
            "" if r["sdei_dispatch_ns"] is None else f"{r['sdei_dispatch_ns'] / 1e3:g} us",
            ("of the wedge" if r["in_masked_code"] else "after unmask") if r["reached"] else "none",
            r["by"] or "",
            "" if r["latency_us"] is None else f"{r['latency_us']:.2f}",
            f"{r['requester_spin_us']:.2f}",
            f"{r['steady_state_throughput_cost']:.1%}",
        ]
        for r in reach
    ]
    right = [c not in ("wedged by", "mechanism", "backtrace", "by") for c in headers]
    title = (
        f"a backtrace of a CPU wedged for {wedge_ms:g} ms (the requester waits 10 s; sdei: the IPI first, "
        f"SDEI after {sdei_after_ms:g} ms without an answer; nmi: FEAT_NMI, which 6.12 does not support; "
        "after unmask: the handler ran once the CPU unmasked, and shows the code after the wedge; requester "
        "spins: how long the asking CPU busy-waits with IRQs off, in hardirq on its CPU, as the lockup detector's "
        "and sysrq's requests do)"
    )
    _table(title, headers, rows, right, 3)
    headers = ["kernel", "wedged by", "stopped", "latency us", "by", "requester spins us"]
    rows = [
        [
            r["kernel"],
            r["wedge"],
            "yes" if r["stopped"] else "no",
            "" if r["latency_us"] is None else f"{r['latency_us']:.2f}",
            r["by"] or "",
            f"{r['requester_spin_us']:.2f}",
        ]
        for r in stop
    ]
    title = (
        "stopping it (smp_send_stop: an IPI for up to 1 s, then on a pseudo-NMI kernel a pseudo-NMI for 10 ms; "
        "+ SDEI: the brief's SDEI stage after those, 10 ms, with the first --sdei-dispatch-ns)"
    )
    _table(title, headers, rows, [c in ("latency us", "requester spins us") for c in headers], 2)


def _table(title: str, headers: list[str], rows: list[list[str]], right: list[bool], lead: int) -> None:
    lines = summary.table_lines(title, headers, rows, right, out.width, lead=lead)
    out.file.write("\n".join(lines) + "\n\n")
