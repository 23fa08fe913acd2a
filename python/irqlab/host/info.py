"""What a measurement was taken on: kernel, CPU, cores, and the boot options
that change interrupt delivery."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

# Boot options that change how interrupts are masked, routed or remapped.
INTERRUPT_BOOT_OPTIONS = (
    "irqchip.gicv3_pseudo_nmi",
    "pseudo_nmi",
    "intremap",
    "intel_iommu",
    "amd_iommu",
    "iommu",
    "iommu.passthrough",
    "iommu.strict",
    "irqaffinity",
    "isolcpus",
    "nohz_full",
    "nohz",
    "threadirqs",
    "nmi_watchdog",
    "hardlockup_all_cpu_backtrace",
    "noapic",
    "nox2apic",
    "x2apic_phys",
    "idle",
    "processor.max_cstate",
    "intel_idle.max_cstate",
    "mitigations",
    "kvm.halt_poll_ns",
)


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def cpu_model() -> str:
    for line in _read("/proc/cpuinfo").splitlines():
        key, _, val = line.partition(":")
        if key.strip() in ("model name", "CPU part", "Hardware") and val.strip():
            return val.strip()
    return platform.processor() or "unknown"


def boot_options() -> dict[str, str]:
    out = {}
    for tok in _read("/proc/cmdline").split():
        key, _, val = tok.partition("=")
        if key in INTERRUPT_BOOT_OPTIONS:
            out[key] = val or "1"
    return out


def transparent_hugepages() -> str | None:
    """The THP mode in brackets in /sys/kernel/mm/transparent_hugepage/enabled
    (always, madvise, never): with `always`, page_fault1 maps huge pages."""
    try:
        text = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return None
    i, j = text.find("["), text.find("]")
    return text[i + 1 : j] if 0 <= i < j else None


def host_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "boot_options": boot_options(),
        "transparent_hugepage": transparent_hugepages(),
    }
