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


SYS_CPU = "/sys/devices/system/cpu"


def vulnerabilities(root: str = SYS_CPU) -> dict[str, str] | None:
    """The kernel's own account of each CPU vulnerability and what it does
    about it (`/sys/devices/system/cpu/vulnerabilities/*`, one line each:
    "Not affected", "Vulnerable", "Mitigation: ..."). It is the effective
    state, where `mitigations=` on the command line is only the request, and
    the mitigations in force (retbleed's return thunks, the spectre_v2 and
    SRSO sequences, the entry's buffer clears) set what a syscall and an
    exception entry cost. `None` where sysfs does not say."""
    d = Path(root) / "vulnerabilities"
    try:
        names = sorted(p.name for p in d.iterdir())
    except OSError:
        return None
    out = {n: _read(str(d / n)).strip() for n in names}
    return {k: v for k, v in out.items() if v} or None


def cpuidle(root: str = SYS_CPU) -> dict[str, Any] | None:
    """The idle driver and governor, and CPU 0's idle states with their exit
    latency and target residency in µs (`/sys/devices/system/cpu/cpuidle`,
    `cpu0/cpuidle/stateN/{name,latency,residency,disable}`): an interrupt that
    finds its CPU in a deep state pays that state's exit before its handler,
    so an interrupt-latency or queue-depth-1 measurement depends on them.
    `None` where the kernel has no cpuidle (or sysfs is not mounted)."""
    base = Path(root)
    driver = _read(str(base / "cpuidle" / "current_driver")).strip()
    governor = _read(str(base / "cpuidle" / "current_governor")).strip()
    states = []
    try:
        dirs = sorted(
            (p for p in (base / "cpu0" / "cpuidle").iterdir() if p.name.startswith("state")),
            key=lambda p: int(p.name[5:]) if p.name[5:].isdigit() else 0,
        )
    except OSError:
        dirs = []
    for s in dirs:

        def num(f: str, s: Path = s) -> int | None:
            v = _read(str(s / f)).strip()
            return int(v) if v.isdigit() else None

        states.append(
            {
                "name": _read(str(s / "name")).strip(),
                "latency_us": num("latency"),
                "residency_us": num("residency"),
                "disabled": num("disable") == 1,
            }
        )
    if not (driver or governor or states):
        return None
    return {"driver": driver or None, "governor": governor or None, "states": states}


def host_info() -> dict[str, Any]:
    return {
        "hostname": platform.node(),
        "kernel": platform.release(),
        "machine": platform.machine(),
        "cpu_model": cpu_model(),
        "cores": os.cpu_count(),
        "boot_options": boot_options(),
        "transparent_hugepage": transparent_hugepages(),
        "vulnerabilities": vulnerabilities(),
        "cpuidle": cpuidle(),
    }


def describe(h: dict[str, Any]) -> str:
    """One line for the console: what the host was, and what of it moves the figures."""
    parts = [f"host: {h['kernel']}, {h['cpu_model']}, {h['cores']} CPUs, boot: {h['boot_options'] or '-'}"]
    v = h.get("vulnerabilities")
    if v:
        mitigated = sum(s.startswith("Mitigation") for s in v.values())
        vulnerable = sum(s.startswith("Vulnerable") for s in v.values())
        parts.append(f"mitigations in force: {mitigated}, vulnerable: {vulnerable} (host.vulnerabilities)")
    idle = h.get("cpuidle")
    if idle:
        enabled = [s for s in idle["states"] if not s["disabled"]]
        deepest = max(enabled, key=lambda s: s["latency_us"] or 0, default=None)
        exit_ = f", deepest {deepest['name']} ({deepest['latency_us']} us exit)" if deepest else ""
        parts.append(f"idle: {idle['driver'] or '-'}/{idle['governor'] or '-'}{exit_}")
    return "; ".join(parts)
