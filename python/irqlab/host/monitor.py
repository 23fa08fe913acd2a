"""`irqlab monitor`: total and per-CPU interrupt rates and the hardirq share
of each CPU (the quantities GSIM controls), from /proc/interrupts and /proc/stat."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

USER_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class Snapshot:
    t: float
    per_source: dict[str, list[int]]
    # Per CPU: ticks in hardirq, all ticks.
    irq_ticks: list[int]
    all_ticks: list[int]


#: Rows of /proc/interrupts that are no CPU's interrupts: x86's RTR counts retries
#: of reading the APIC's ICR (`arch_show_interrupts`, arch/x86/kernel/irq.c), and
#: ERR/MIS (arm64: Err) are system-wide counts in one column, which would be read as
#: CPU 0's. Left out of every rate (a review; all 0 on its machine). Also x86's TLB,
#: the shootdowns (`flush_tlb_func` counts them), which arrive in the function-call
#: IPIs CAL already counts, and MCP, machine-check polls, which the MCE timer makes
#: (`machine_check_poll`): counted, they read a third more interrupts than a
#: recording held (an audit: CAL 616, TLB 615, 616 `call_function_single` entries).
NOT_A_CPUS_INTERRUPT = frozenset({"RTR", "ERR", "MIS", "Err", "TLB", "MCP"})


def read_interrupts(text: str) -> dict[str, list[int]]:
    """Per interrupt (a device IRQ as "NUMBER ACTION", a per-CPU vector by its
    mnemonic), its count on each CPU."""
    lines = text.splitlines()
    ncpu = len(lines[0].split()) if lines else 0
    out: dict[str, list[int]] = {}
    for line in lines[1:]:
        key, _, rest = line.partition(":")
        if key.strip() in NOT_A_CPUS_INTERRUPT:
            continue
        parts = rest.split()
        counts = []
        for p in parts[:ncpu]:
            if not p.isdigit():
                break
            counts.append(int(p))
        if not counts:
            continue
        desc = " ".join(parts[len(counts) :])
        key = key.strip()
        # Device IRQs are named by their action (the last word); per-CPU vectors by their mnemonic.
        name = f"{key} {desc.split()[-1]}" if key.isdigit() and desc else key
        out[name] = counts + [0] * (ncpu - len(counts))
    return out


def read_stat(text: str) -> tuple[list[int], list[int]]:
    irq, total = [], []
    for line in text.splitlines():
        if line.startswith("cpu") and line[3:4].isdigit():
            f = [int(x) for x in line.split()[1:]]
            irq.append(f[5] if len(f) > 5 else 0)
            total.append(sum(f[:8]))
    return irq, total


def irq_time_accounted(stat_text: str) -> bool:
    """Whether this kernel accounts hardirq time in /proc/stat. Without
    CONFIG_IRQ_TIME_ACCOUNTING (and no tick ever lands inside another
    interrupt's handler) the `irq` column stays 0 for good: a share of 0 % from
    it would read as "no hardirq time", not as "not measured"."""
    for line in stat_text.splitlines():
        if line.startswith("cpu "):
            f = line.split()
            return len(f) > 6 and int(f[6]) > 0
    return False


def snapshot() -> Snapshot:
    with open("/proc/interrupts") as f:
        inter = f.read()
    with open("/proc/stat") as f:
        stat = f.read()
    irq, total = read_stat(stat)
    return Snapshot(time.monotonic(), read_interrupts(inter), irq, total)


def rates(a: Snapshot, b: Snapshot, accounted: bool = True) -> dict[str, Any]:
    dt = max(b.t - a.t, 1e-9)
    ncpu = len(b.irq_ticks)
    per_cpu = [0.0] * ncpu
    per_source = {}
    for name, counts in b.per_source.items():
        old = a.per_source.get(name, [0] * len(counts))
        d = [max(0, x - y) for x, y in zip(counts, old)]
        for i, x in enumerate(d[:ncpu]):
            per_cpu[i] += x / dt
        per_source[name] = sum(d) / dt
    share: list[float | None] = []
    for i in range(ncpu):
        dt_ticks = b.all_ticks[i] - a.all_ticks[i]
        share.append((b.irq_ticks[i] - a.irq_ticks[i]) / dt_ticks if dt_ticks > 0 else 0.0)
    if not accounted:
        share = [None] * ncpu
    return {"total": sum(per_cpu), "per_cpu": per_cpu, "hardirq_share": share, "per_source": per_source}


def samples(interval: float, count: int | None, accounted: bool) -> Iterator[tuple[float, dict[str, Any]]]:
    """(seconds since the start, rates) per interval; with `accounted` False (the
    kernel does not account hardirq time, `irq_time_accounted`) a share is None."""
    start = prev = snapshot()
    n = 0
    while count is None or n < count:
        time.sleep(interval)
        cur = snapshot()
        yield cur.t - start.t, rates(prev, cur, accounted)
        prev = cur
        n += 1
