"""M1 fleet what-if: from a workload's exception profile, what pseudo-NMI costs
in throughput, and which cross-CPU mechanism reaches a wedged CPU how fast.

Every number comes from running the Rust model: the profile becomes a scenario
(one task per CPU whose user work fills the time the exceptions and interrupts
leave), run once with DAIF masking and once with pseudo-NMI; the wedged-CPU
table runs a two-CPU scenario per (wedge, mechanism, SDEI dispatch cost).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import SCENARIOS_DIR, _core
from ._util import UserError, one_line, read_scenario, time_ns

DEFAULT_BASE = SCENARIOS_DIR / "figures" / "m1-gettid.toml"
MECHANISMS = ("ipi", "pseudo-nmi", "sdei", "nmi")


@dataclass
class Profile:
    """Per CPU, measured with DAIF masking: exceptions (syscalls + page faults)
    and device interrupts per second, and the interrupt handler's length."""

    exceptions_per_s: float
    irqs_per_s: float
    irq_handler_ns: float


@dataclass
class Base:
    """The exception-path costs a what-if starts from (a figure scenario's):
    its first task's exception, whose kind decides what pseudo-NMI adds to each
    (`pmr.rs`: 9.04 PMR accesses on gettid's path, 13.04 on sched_yield's)."""

    cpu: dict[str, Any]
    body_ns: float
    exception: str = "syscall"

    @classmethod
    def load(cls, path: Path) -> Base:
        text, origin = read_scenario(path)
        try:
            sc = json.loads(_core.load(text, origin, []))
        except _core.ScenarioError as e:
            raise UserError(one_line(str(e))) from None
        tasks = sc.get("task", [])
        if not tasks:
            raise UserError(f"--base {origin}: needs a [[task]] whose body is the exception's kernel work")
        kind = tasks[0].get("exception", "none")
        if kind not in ("syscall", "yield"):
            how = (
                "; for page faults run that scenario with --set cpu.masking=pmr and compare"
                if kind == "pagefault"
                else ""
            )
            raise UserError(
                f"--base {origin}: its first [[task]] has exception = {kind!r}; whatif prices syscalls "
                f'("syscall", "yield"){how}'
            )
        return cls(cpu=sc["cpu"], body_ns=time_ns(tasks[0]["body"]), exception=kind)

    def exception_ns(self) -> float:
        return time_ns(self.cpu["exception_entry"]) + self.body_ns + time_ns(self.cpu["exception_exit"])

    def irq_ns(self, handler_ns: float) -> float:
        return time_ns(self.cpu["irq_entry"]) + handler_ns + time_ns(self.cpu["irq_exit"])


def _cpu_section(base: Base, masking: str) -> dict[str, Any]:
    cpu: dict[str, Any] = {"masking": masking}
    for k in ("exception_entry", "exception_exit", "irq_entry", "irq_exit"):
        cpu[k] = base.cpu[k]
    if base.cpu.get("ghz") is not None:
        cpu["ghz"] = base.cpu["ghz"]
    pmr = base.cpu.get("pmr", {})
    cpu["pmr"] = {"access": pmr.get("access", "0s"), "dsb": pmr.get("dsb", "0s"), "pmhe": bool(pmr.get("pmhe", False))}
    return cpu


def _run(scenario: dict[str, Any], seed: int) -> dict[str, Any]:
    """Runs a scenario built as data (the binding takes it as JSON, like a TOML file)."""
    try:
        # (The .json suffix is how the core knows to read JSON.)
        raw, _ = _core.run(json.dumps(scenario), "the what-if's scenario.json", [], seed, False)
    except _core.ScenarioError as e:
        raise UserError(one_line(str(e))) from None
    result: dict[str, Any] = json.loads(raw)
    return result


#: Interrupt vectors per CPU in a profile's scenario (their rates add up to irqs-per-s).
VECTORS_PER_CPU = 16


def profile_scenario(base: Base, p: Profile, cpus: int, masking: str) -> dict[str, Any]:
    exc_ns = base.exception_ns()
    busy = p.exceptions_per_s * exc_ns + p.irqs_per_s * base.irq_ns(p.irq_handler_ns)
    if p.exceptions_per_s <= 0:
        raise UserError("--exceptions-per-s: expected a rate above 0")
    if busy >= 1e9:
        raise UserError(
            f"the profile (--exceptions-per-s, --irqs-per-s) needs {busy / 1e7:.3g}% of a CPU for exceptions and "
            f"interrupts alone ({exc_ns:.1f} ns per exception, {base.irq_ns(p.irq_handler_ns):.1f} ns per "
            "interrupt): expected less than 100%"
        )
    work_ns = (1e9 - busy) / p.exceptions_per_s
    ids = list(range(cpus))
    scenario: dict[str, Any] = {
        "name": f"whatif-{masking}-{cpus}",
        "duration": "22ms",
        "warmup": "2ms",
        "platform": {"cpus": cpus},
        "cpu": _cpu_section(base, masking),
        "task": [
            {
                "name": "loop",
                "count": cpus,
                "cpus": ids,
                "work": f"{work_ns:.3f}ns",
                "exception": base.exception,
                "body": f"{base.body_ns}ns",
            }
        ],
    }
    if p.irqs_per_s > 0:
        # The interrupts a CPU takes come from several vectors (a device's queues):
        # one vector at the whole rate would merge an interrupt that comes while
        # its last is still pending (6.6 % at 400 k/s), and the loop, sized for
        # every interrupt handled, would get more user time than the profile says.
        scenario["source"] = [
            {
                "name": "dev",
                "count": cpus * VECTORS_PER_CPU,
                "rate": p.irqs_per_s / VECTORS_PER_CPU,
                "cpus": ids,
                "handler": f"{p.irq_handler_ns}ns",
            }
        ]
    return scenario


def _ops_per_s(metrics: dict[str, Any], cpus: int, work_ns: float) -> float:
    """Operations per second from the user time the loop got: each operation does
    `work_ns` of it. Whole operations counted in a 20 ms run are quantised (at
    1,000 exceptions/s, 21 against 20: a 5 % "cost" where the real one is 0.04 %);
    user time is not, and both runs see the same interrupts (same seed)."""
    return float(metrics["user_share"]) * cpus * 1e9 / work_ns


def throughput(base: Base, p: Profile, cpu_counts: Sequence[int], seed: int) -> list[dict[str, Any]]:
    rows = []
    for n in cpu_counts:
        daif_sc, pmr_sc = profile_scenario(base, p, n, "daif"), profile_scenario(base, p, n, "pmr")
        work_ns = time_ns(daif_sc["task"][0]["work"])
        daif = _ops_per_s(_run(daif_sc, seed)["metrics"], n, work_ns)
        pmr_m = _run(pmr_sc, seed)["metrics"]
        pmr = _ops_per_s(pmr_m, n, work_ns)
        rows.append(
            {
                "cpus": n,
                "daif_ops_per_s": daif,
                "pmr_ops_per_s": pmr,
                "throughput_ratio": pmr / daif,
                "tax_ns_per_exception": pmr_m["task.loop.pmr_tax_ns_per_op"],
            }
        )
    return rows


#: The wedged CPU's handler for a backtrace or a stop, ns (an assumption:
#: printing a backtrace or parking the CPU; it only shifts when the call ends).
CROSSCALL_HANDLER_NS = 5000.0
#: The requester waits this long for a backtrace (`nmi_trigger_cpumask_backtrace`: 10 s).
WAIT_NS = 10e9
#: The request comes at 1 ms; the wedged CPU masks this much earlier.
REQUEST_NS, LEAD_NS = 1e6, 10e3


def wedge_scenario(
    base: Base,
    masking: str,
    wedge_with: str,
    ladder: Sequence[tuple[str, float]],
    wedge_ns: float,
    sdei_dispatch_ns: float,
    sdei_signal_ns: float,
    handler_ns: float,
    serial: bool = False,
) -> dict[str, Any]:
    """The wedged CPU runs user code, then masks for `wedge_ns` from 10 µs before
    the request (at 1 ms) and unmasks; the requester signals with each
    (mechanism, wait) of `ladder` in turn, waiting that long for an answer
    before the next, and gives up after the last wait. The run lasts until the
    wedge ends or the requester gives up, and a little more. A mechanism the
    mask holds back reaches the CPU when it unmasks, if the requester still
    waits then."""
    cpu = _cpu_section(base, masking)
    cpu["sdei"] = {"signal": f"{sdei_signal_ns}ns", "dispatch": f"{sdei_dispatch_ns}ns"}
    # The requester sees an answer at its next look, up to one poll after it.
    poll_ns = 1e6 if serial else 1e3
    call: dict[str, Any] = {
        "name": "bt",
        "at": "1ms",
        "targets": [1],
        "mechanisms": [m for m, _ in ladder],
        "waits": [f"{w}ns" for _, w in ladder],
        "handler": f"{handler_ns}ns",
        # A backtrace answers when its print ends (`serial`); a stop as it starts.
        "serial": serial,
        # The requester spins with IRQs masked, looking every mdelay(1) for a
        # backtrace (lib/nmi_backtrace.c), every udelay(1) for a stop
        # (arch/arm64/kernel/smp.c, smp_send_stop).
        "requester_poll": f"{poll_ns}ns",
    }
    wait_ns = sum(w for _, w in ladder)
    return {
        "name": "wedge",
        "duration": f"{REQUEST_NS + min(wedge_ns, wait_ns) + poll_ns + 0.5e6}ns",
        "platform": {"cpus": 2},
        "cpu": cpu,
        "task": [
            {
                "name": "wedged",
                "cpus": [1],
                "work": f"{REQUEST_NS - LEAD_NS}ns",
                "exception": "syscall",
                "body": f"{wedge_ns}ns",
                "irqs_off": f"{wedge_ns}ns",
                "irqs_off_with": wedge_with,
            }
        ],
        "crosscall": [call],
    }


@dataclass
class Reach:
    """What a cross-call got of the wedged CPU: whether and when (µs after the
    request) its handler ran while the requester still waited, by which
    mechanism, and whether it interrupted the masked code. A backtrace prints
    the registers its interrupt took (`nmi_cpu_backtrace`: `get_irq_regs()`),
    so one that got in only once the CPU unmasked shows the code after the
    wedge, not the wedge; a stop is a stop either way."""

    reached: bool
    latency_us: float | None
    by: str | None
    in_masked_code: bool
    #: How long the kernel's requester spins for the answer, IRQs masked, its
    #: CPU's hardirq time (to its deadline if none comes, else to its first look
    #: after the answer): `nmi_trigger_cpumask_backtrace`'s mdelay(1) loop,
    #: `smp_send_stop`'s udelay(1).
    requester_spin_us: float


def _reach(scenario: dict[str, Any], seed: int) -> Reach:
    m = _run(scenario, seed)["metrics"]
    call = scenario["crosscall"][0]
    spin_us = float(m["crosscall.bt.requester_spin_ns"]) / 1e3
    # With `waits` the core counts an answer after the last wait as late, not
    # reached, so a target reached was reached while the requester waited.
    t = m.get("crosscall.bt.time_to_all_ns")
    if m["crosscall.bt.reached"] != 1.0 or t is None:
        return Reach(False, None, None, False, spin_us)
    by = next((k for k in call["mechanisms"] if m.get(f"crosscall.bt.reached_by.{k}", 0) > 0), None)
    return Reach(True, float(t) / 1e3, by, m["crosscall.bt.reached_masked"] == 1.0, spin_us)


def reachability(
    base: Base,
    wedge_ns: float,
    sdei_dispatch_ns: Sequence[float],
    sdei_signal_ns: float,
    handler_ns: float,
    tax_ratio: float | None,
    seed: int,
    sdei_after_ns: float = WAIT_NS,
) -> list[dict[str, Any]]:
    """Who gets a backtrace of a CPU wedged by `local_irq_disable()` (under
    pseudo-NMI: PMR) or by code that sets DAIF.I itself, within `wedge_ns`. The
    requester waits `WAIT_NS` for an answer; SDEI, which the brief keeps for a
    CPU that ignored the IPI, is sent after `sdei_after_ns` of that wait
    without one (a ladder: IPI, then SDEI)."""
    rows = []
    for wedge, with_ in (("local_irq_disable", "pmr"), ("daif", "daif")):
        for mech in MECHANISMS:
            for disp in sdei_dispatch_ns if mech == "sdei" else [0.0]:
                # Pseudo-NMI needs a pseudo-NMI kernel; the other mechanisms are asked of a DAIF kernel.
                kernel = "pmr" if mech == "pseudo-nmi" else "daif"
                w = with_ if kernel == "pmr" else "daif"
                ladder = [("ipi", sdei_after_ns), ("sdei", WAIT_NS)] if mech == "sdei" else [(mech, WAIT_NS)]
                sc = wedge_scenario(base, kernel, w, ladder, wedge_ns, disp, sdei_signal_ns, handler_ns, serial=True)
                r = _reach(sc, seed)
                rows.append(
                    {
                        "wedge": wedge,
                        "mechanism": mech,
                        "sdei_dispatch_ns": disp if mech == "sdei" else None,
                        "reached": r.reached,
                        "in_masked_code": r.in_masked_code,
                        "by": r.by,
                        "latency_us": r.latency_us,
                        "requester_spin_us": r.requester_spin_us,
                        "steady_state_throughput_cost": (1 - tax_ratio)
                        if (mech == "pseudo-nmi" and tax_ratio)
                        else 0.0,
                    }
                )
    return rows


#: `smp_send_stop` (arch/arm64/kernel/smp.c, also under `crash_smp_send_stop`):
#: IPI_CPU_STOP, up to 1 s; then, on a pseudo-NMI kernel only, IPI_CPU_STOP_NMI
#: (`ipi_should_be_nmi`), up to 10 ms more; then "failed to stop secondary CPUs".
STOP_IPI_WAIT_NS, STOP_NMI_WAIT_NS = 1e9, 10e6
#: A stop's SDEI stage, after the kernel's own stages (the brief's proposal;
#: Linux 6.12 has none): it waits as long as the pseudo-NMI stage (an assumption).
STOP_SDEI_WAIT_NS = STOP_NMI_WAIT_NS


def stopping(
    base: Base,
    wedge_ns: float,
    handler_ns: float,
    seed: int,
    sdei_dispatch_ns: float = 0.0,
    sdei_signal_ns: float = 0.0,
) -> list[dict[str, Any]]:
    """Whether a stop (panic, kexec, crash dump) gets a wedged CPU, as
    `smp_send_stop` escalates: an IPI for 1 s, then on a pseudo-NMI kernel a
    pseudo-NMI for 10 ms; and with the brief's SDEI stage after those."""
    rows = []
    ipi, nmi, sdei = ("ipi", STOP_IPI_WAIT_NS), ("pseudo-nmi", STOP_NMI_WAIT_NS), ("sdei", STOP_SDEI_WAIT_NS)
    cases = (
        ("DAIF", "daif", "local_irq_disable", "daif", [ipi]),
        ("pseudo-NMI", "pmr", "local_irq_disable", "pmr", [ipi, nmi]),
        ("pseudo-NMI", "pmr", "daif", "daif", [ipi, nmi]),
        ("DAIF + SDEI", "daif", "local_irq_disable", "daif", [ipi, sdei]),
        ("pseudo-NMI + SDEI", "pmr", "daif", "daif", [ipi, nmi, sdei]),
    )
    for kernel, masking, wedge, with_, ladder in cases:
        sc = wedge_scenario(base, masking, with_, ladder, wedge_ns, sdei_dispatch_ns, sdei_signal_ns, handler_ns)
        r = _reach(sc, seed)
        rows.append(
            {
                "kernel": kernel,
                "wedge": wedge,
                "stopped": r.reached,
                "latency_us": r.latency_us,
                "by": r.by,
                "requester_spin_us": r.requester_spin_us,
            }
        )
    return rows


def host_irqs_per_s(seconds: float) -> float:
    """Interrupts per second per CPU on this host, from /proc/stat's `intr` total:
    every interrupt the kernel counts, local timer ticks and IPIs included."""
    import os
    import time

    def total() -> int:
        try:
            with open("/proc/stat") as f:
                for line in f:
                    if line.startswith("intr "):
                        return int(line.split()[1])
        except OSError as e:
            raise UserError(f"--irqs-from-host: cannot read /proc/stat ({e.strerror})") from None
        raise UserError("--irqs-from-host: /proc/stat has no intr line")

    if not 0 < seconds <= 60:
        raise UserError(f"--irqs-from-host {seconds}: expected more than 0 and at most 60 seconds")
    a = total()
    time.sleep(seconds)
    return (total() - a) / seconds / (os.cpu_count() or 1)
