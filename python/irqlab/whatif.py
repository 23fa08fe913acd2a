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
    mechanism: str,
    wedge_ns: float,
    sdei_dispatch_ns: float,
    sdei_signal_ns: float,
    handler_ns: float,
    escalate: tuple[str, float] | None = None,
    wait_ns: float = WAIT_NS,
) -> dict[str, Any]:
    """The wedged CPU runs user code, then masks for `wedge_ns` from 10 µs before
    the request (at 1 ms) and unmasks; the run lasts until the wedge ends or the
    requester's wait (`wait_ns`) is over, and a little more. A mechanism the mask
    holds back reaches the CPU when it unmasks, if that is within the wait.
    `escalate` = (mechanism, after ns): the requester signals again with it."""
    cpu = _cpu_section(base, masking)
    cpu["sdei"] = {"signal": f"{sdei_signal_ns}ns", "dispatch": f"{sdei_dispatch_ns}ns"}
    call: dict[str, Any] = {"name": "bt", "at": "1ms", "targets": [1], "mechanisms": [mechanism]}
    if escalate is not None:
        call["mechanisms"].append(escalate[0])
        call["timeout"] = f"{escalate[1]}ns"
    call["handler"] = f"{handler_ns}ns"
    return {
        "name": "wedge",
        "duration": f"{REQUEST_NS + min(wedge_ns, wait_ns) + 0.5e6}ns",
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


def reachability(
    base: Base,
    wedge_ns: float,
    sdei_dispatch_ns: Sequence[float],
    sdei_signal_ns: float,
    handler_ns: float,
    tax_ratio: float | None,
    seed: int,
) -> list[dict[str, Any]]:
    """Who reaches a CPU wedged by `local_irq_disable()` (under pseudo-NMI: PMR)
    or by code that sets DAIF.I itself, within `wedge_ns`."""
    rows = []
    for wedge, with_ in (("local_irq_disable", "pmr"), ("daif", "daif")):
        for mech in MECHANISMS:
            for disp in sdei_dispatch_ns if mech == "sdei" else [0.0]:
                # Pseudo-NMI needs a pseudo-NMI kernel; the other mechanisms are asked of a DAIF kernel.
                kernel = "pmr" if mech == "pseudo-nmi" else "daif"
                w = with_ if kernel == "pmr" else "daif"
                m = _run(wedge_scenario(base, kernel, w, mech, wedge_ns, disp, sdei_signal_ns, handler_ns), seed)
                m = m["metrics"]
                latency_us = _reached_us(m, WAIT_NS)
                rows.append(
                    {
                        "wedge": wedge,
                        "mechanism": mech,
                        "sdei_dispatch_ns": disp if mech == "sdei" else None,
                        "reached": latency_us is not None,
                        "latency_us": latency_us,
                        "steady_state_throughput_cost": (1 - tax_ratio)
                        if (mech == "pseudo-nmi" and tax_ratio)
                        else 0.0,
                    }
                )
    return rows


def _reached_us(metrics: dict[str, Any], wait_ns: float) -> float | None:
    """When the cross-call reached the wedged CPU, µs after the request, if it
    did within the requester's wait; else None."""
    t = metrics.get("crosscall.bt.time_to_all_ns")
    if metrics["crosscall.bt.reached"] != 1.0 or t is None or t > wait_ns:
        return None
    return float(t) / 1e3


#: `smp_send_stop` (arch/arm64/kernel/smp.c, also under `crash_smp_send_stop`):
#: IPI_CPU_STOP, up to 1 s; then, on a pseudo-NMI kernel only, IPI_CPU_STOP_NMI
#: (`ipi_should_be_nmi`), up to 10 ms more; then "failed to stop secondary CPUs".
STOP_IPI_WAIT_NS, STOP_NMI_WAIT_NS = 1e9, 10e6


def stopping(base: Base, wedge_ns: float, handler_ns: float, seed: int) -> list[dict[str, Any]]:
    """Whether the kernel's own stop (panic, kexec, crash dump) gets a wedged CPU,
    as `smp_send_stop` escalates: a backtrace waits 10 s for one request, a stop
    1 s for an IPI and then 10 ms for a pseudo-NMI."""
    rows = []
    cases = (
        ("daif", "local_irq_disable", "daif", None),
        ("pmr", "local_irq_disable", "pmr", ("pseudo-nmi", STOP_IPI_WAIT_NS)),
        ("pmr", "daif", "daif", ("pseudo-nmi", STOP_IPI_WAIT_NS)),
    )
    for kernel, wedge, with_, escalate in cases:
        wait = STOP_IPI_WAIT_NS + (STOP_NMI_WAIT_NS if escalate else 0.0)
        sc = wedge_scenario(base, kernel, with_, "ipi", wedge_ns, 0.0, 0.0, handler_ns, escalate, wait)
        m = _run(sc, seed)["metrics"]
        latency_us = _reached_us(m, wait)
        by = [k for k in ("ipi", "pseudo-nmi") if m.get(f"crosscall.bt.reached_by.{k}", 0) > 0]
        rows.append(
            {
                "kernel": "pseudo-NMI" if kernel == "pmr" else "DAIF",
                "wedge": wedge,
                "stopped": latency_us is not None,
                "latency_us": latency_us,
                "by": by[0] if latency_us is not None and by else None,
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
