"""M1: the figures, the backtrace example, the what-if CLI and its bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import irqlab
from helpers import assert_ok, assert_user_error, run_cli

FIGURES = ["m1-gettid", "m1-sched-yield"]


def test_m1_fits_reproduce_and_the_prediction_follows_the_kernel_counts(tmp_path: Path) -> None:
    args = ["reproduce", "--out", tmp_path]
    for f in FIGURES:
        args += ["--only", f]
    p = run_cli(*args)
    assert_ok(p)
    rows = json.loads((tmp_path / "figures.json").read_text())["figures"]
    by_name = {r["name"]: r for r in rows}
    assert len(rows) == 4 and all(r["within_tolerance"] for r in rows if r["kind"] == "fit")
    # The prediction: sched_yield pays 13 + 2/48 PMR/RPR accesses where gettid pays
    # 9 + 2/48 (docs/m1-exception-paths.md), at the access cost fitted on gettid.
    # Published 2,253,753 ops/s; the kernel's counts give about 2.38 M (+5.7 %),
    # a miss the docs explain. A wrong count moves it by about 2 % per access.
    daif_ns = 1e9 / by_name["sched_yield daif"]["simulated"]
    access = (252.5 - 178.4) / (9 + 2 / 48)
    expected = 1e9 / (daif_ns + (13 + 2 / 48) * access)
    assert by_name["sched_yield pmr"]["simulated"] == pytest.approx(expected, rel=2e-3)
    assert by_name["sched_yield pmr"]["error"] == pytest.approx(0.057, abs=0.005)


def test_pseudo_nmi_tax_follows_exception_density() -> None:
    # The same kernel path with 10x the user work per syscall pays the same tax
    # per syscall, so a much smaller share of the time.
    fig = irqlab.SCENARIOS_DIR / "figures" / "m1-gettid.toml"

    def ratio(work: str) -> tuple[float, float]:
        pmr, _ = irqlab.run(fig, [f"task.0.work={work}", "cpu.masking=pmr"])
        daif, _ = irqlab.run(fig, [f"task.0.work={work}", "cpu.masking=daif"])
        assert daif["metrics"]["task.gettid.pmr_tax_ns_per_op"] == 0
        return pmr["metrics"]["ops_per_s"] / daif["metrics"]["ops_per_s"], pmr["metrics"][
            "task.gettid.pmr_tax_ns_per_op"
        ]

    dense, tax = ratio("18.4ns")
    sparse, tax2 = ratio("1802.4ns")
    assert tax == tax2 == pytest.approx(74.1, rel=1e-3)
    assert dense == pytest.approx(178.4 / 252.5, rel=1e-3)
    assert sparse == pytest.approx(1962.4 / (1962.4 + 74.1), rel=1e-3)


def test_a_yield_that_switches_tasks_pays_the_switch_s_pmr_accesses() -> None:
    # Two tasks on one CPU: every sched_yield switches. fpsimd_thread_switch's
    # irqs_disabled() check reads PMR, and the task switched in returns to EL0
    # through one pass of do_notify_resume (TIF_FOREIGN_FPSTATE): 3 accesses a
    # call on top of the 13 + 2/48 of a yield that stays (a review: the model
    # charged the switch nothing).
    fig = irqlab.SCENARIOS_DIR / "figures" / "m1-sched-yield.toml"
    two = ["task.0.count=2", "task.0.cpus=[0]"]
    pmr, _ = irqlab.run(fig, [*two, "cpu.masking=pmr"])
    daif, _ = irqlab.run(fig, [*two, "cpu.masking=daif"])
    m = pmr["metrics"]
    assert m["context_switches_per_s"] == pytest.approx(m["ops_per_s"], rel=1e-3)
    access = 8.195  # cpu.pmr.access in the figure
    added_ns = 1e9 / m["ops_per_s"] - 1e9 / daif["metrics"]["ops_per_s"]
    assert added_ns == pytest.approx((13 + 2 / 48 + 3) * access, rel=2e-3)


IDLE_IRQ = """
name = "irq-idle"
duration = "50ms"
warmup = "5ms"
seed = 3
[platform]
cpus = 1
[cpu]
irq_entry = "200ns"
irq_exit = "150ns"
[cpu.pmr]
access = "10ns"
[[source]]
name = "dev"
rate = "10k/s"
cpus = [0]
handler = "1us"
"""


def test_an_irq_that_wakes_an_idle_cpu_pays_the_stopped_tick_s_section(tmp_path: Path) -> None:
    # Before its handler an IRQ that wakes the idle loop pays the idle exit's
    # PMR restore and local_irq_enable (W2), its own entry (R1 W1, RPR read, the
    # GIC driver's mask W1) and, in irq_enter_rcu, tick_nohz_update_jiffies's
    # nested section for the stopped tick (R1 W1): 8 accesses (6 until a review).
    f = tmp_path / "idle.toml"
    f.write_text(IDLE_IRQ)
    pmr, _ = irqlab.run(f, ["cpu.masking=pmr"])
    daif, _ = irqlab.run(f, ["cpu.masking=daif"])
    added = pmr["histograms"]["irq_latency"]["p50"] - daif["histograms"]["irq_latency"]["p50"]
    assert added == pytest.approx(8 * 10.0, abs=0.5)


def test_backtrace_example_escalates_to_sdei_for_the_daif_wedged_cpu() -> None:
    r, _ = irqlab.run(irqlab.SCENARIOS_DIR / "examples" / "m1-backtrace.toml")
    m = r["metrics"]
    assert m["crosscall.backtrace.reached"] == 7
    assert m["crosscall.backtrace.reached_by.pseudo-nmi"] == 6  # the PMR-masked one included
    assert m["crosscall.backtrace.reached_by.sdei"] == 1  # only the DAIF-masked one
    # Escalation after the 10 ms timeout, then signal + dispatch.
    assert 10.0e6 < m["crosscall.backtrace.time_to_all_ns"] < 10.1e6


def test_whatif_tables(tmp_path: Path) -> None:
    args = ("whatif", "--exceptions-per-s", "500000", "--irqs-per-s", "20000", "--cpus", "1,4")
    args += ("--sdei-dispatch-ns", "1000,50000", "--sdei-after-ms", "1")
    out = tmp_path / "w.json"
    assert_ok(run_cli(*args, "--json", out))
    doc = json.loads(out.read_text())
    t = doc["throughput"]
    assert [r["cpus"] for r in t] == [1, 4]
    assert all(0.9 < r["throughput_ratio"] < 1 for r in t)
    assert t[0]["tax_ns_per_exception"] == pytest.approx(74.1, rel=1e-3)
    reach = {(r["wedge"], r["mechanism"], r["sdei_dispatch_ns"]): r for r in doc["reachability"]}
    # The CPU masks from 10 us before the request for --wedge-ms (10 ms): what the mask
    # holds back gets through when it unmasks, 9.99 ms later; what it admits, at once.
    # Those get in after the wedge, and a backtrace then shows the code after it,
    # not the wedge (nmi_cpu_backtrace prints the registers its interrupt took).
    for held in [("daif", "ipi", None), ("daif", "pseudo-nmi", None), ("local_irq_disable", "ipi", None)]:
        assert reach[held]["reached"] and reach[held]["latency_us"] == pytest.approx(9990, abs=1), held
        assert not reach[held]["in_masked_code"], held
    inside = reach[("local_irq_disable", "pseudo-nmi", None)]
    assert inside["latency_us"] < 1 and inside["in_masked_code"]
    # SDEI comes after the IPI has waited --sdei-after-ms (1 ms) without an answer.
    fast, slow = reach[("daif", "sdei", 1000.0)], reach[("daif", "sdei", 50000.0)]
    assert fast["reached"] and slow["reached"] and fast["in_masked_code"] and fast["by"] == "sdei"
    assert fast["latency_us"] == pytest.approx(1000 + 2 + 1, abs=0.01)  # the wait, the SMC, the dispatch
    assert slow["latency_us"] - fast["latency_us"] == pytest.approx(49.0, abs=0.01)
    assert reach[("daif", "pseudo-nmi", None)]["steady_state_throughput_cost"] > 0
    assert reach[("daif", "sdei", 1000.0)]["steady_state_throughput_cost"] == 0
    # Deterministic.
    out2 = tmp_path / "w2.json"
    assert_ok(run_cli(*args, "--json", out2))
    assert out.read_bytes() == out2.read_bytes()
    # The tables, piped at 80 columns: wrapped, never cut, and each group of columns
    # repeats what names a row (wedge, mechanism, SDEI dispatch).
    env = {**os.environ, "CI": "true", "COLUMNS": "80"}
    p = subprocess.run([sys.executable, "-m", "irqlab", *args], capture_output=True, text=True, env=env, check=False)
    assert_ok(p)
    lines = p.stdout.splitlines()
    rows = [ln for ln in lines if ln.startswith("  ")]
    assert max(map(len, rows)) <= 80 and "…" not in p.stdout, p.stdout
    # The cost is the first --cpus count's (1 here), and the header says so.
    assert "latency us" in p.stdout and "steady-state cost (1 CPU)" in p.stdout and "pseudo-nmi" in p.stdout
    assert "after unmask" in p.stdout and "of the wedge" in p.stdout
    costs = [ln.split() for ln in lines if ln.strip().startswith("daif") and ln.rstrip().endswith("%")]
    assert [c[:2] for c in costs][:2] == [["daif", "ipi"], ["daif", "pseudo-nmi"]], p.stdout


def test_whatif_a_wedge_past_the_requesters_wait_is_never_reached_by_an_ipi(tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    assert_ok(run_cli("whatif", "--exceptions-per-s", "1000", "--cpus", "1", "--wedge-ms", "20000", "--json", out))
    reach = {(r["wedge"], r["mechanism"]): r for r in json.loads(out.read_text())["reachability"]}
    assert not reach[("daif", "ipi")]["reached"] and not reach[("daif", "pseudo-nmi")]["reached"]
    assert reach[("daif", "nmi")]["reached"] and reach[("local_irq_disable", "pseudo-nmi")]["reached"]


def test_whatif_prices_the_bases_own_exception(tmp_path: Path) -> None:
    """A sched_yield base is priced as sched_yield (13.04 PMR accesses, 106.9 ns),
    not as gettid (9.04, 74.1 ns), which every base was (a review); a base whose
    task takes page faults is refused, naming what whatif prices."""
    out = tmp_path / "w.json"
    base = irqlab.SCENARIOS_DIR / "figures" / "m1-sched-yield.toml"
    assert_ok(run_cli("whatif", "--base", base, "--exceptions-per-s", "200000", "--cpus", "1", "--json", out))
    [row] = json.loads(out.read_text())["throughput"]
    assert row["tax_ns_per_exception"] == pytest.approx(13.04 * 8.195, rel=2e-3)
    faults = irqlab.SCENARIOS_DIR / "examples" / "wis-page-fault1.toml"
    assert_user_error(run_cli("whatif", "--base", faults, "--cpus", "1"), "pagefault", "cpu.masking=pmr")


def test_whatif_stops_a_wedged_cpu_as_smp_send_stop_does(tmp_path: Path) -> None:
    """A stop (panic, kexec, crash dump) waits 1 s for its IPI and then, on a
    pseudo-NMI kernel only, 10 ms for a pseudo-NMI (arch/arm64/kernel/smp.c,
    smp_send_stop): a 2 s wedge by local_irq_disable is stopped at 1 s under
    pseudo-NMI and not at all under DAIF, and a DAIF wedge under neither (the
    backtrace table's 10 s wait said "reached" for all three)."""

    def stop(wedge_ms: str) -> dict[tuple[str, str], Any]:
        out = tmp_path / f"w{wedge_ms}.json"
        assert_ok(run_cli("whatif", "--exceptions-per-s", "1000", "--cpus", "1", "--wedge-ms", wedge_ms, "--json", out))
        return {(r["kernel"], r["wedge"]): r for r in json.loads(out.read_text())["stop"]}

    long = stop("2000")
    assert not long[("DAIF", "local_irq_disable")]["stopped"]
    # The requester spins to its deadline for an answer that never comes, to the answer otherwise.
    assert long[("DAIF", "local_irq_disable")]["requester_spin_us"] == pytest.approx(1e6)
    assert long[("pseudo-NMI", "daif")]["requester_spin_us"] == pytest.approx(1.01e6)
    nmi = long[("pseudo-NMI", "local_irq_disable")]
    assert nmi["stopped"] and nmi["by"] == "pseudo-nmi" and nmi["latency_us"] == pytest.approx(1e6, abs=1)
    assert not long[("pseudo-NMI", "daif")]["stopped"]
    # The brief's SDEI stage after the kernel's own: the IPI's 1 s (and the
    # pseudo-NMI's 10 ms), then the SMC (2 us) and the dispatch (the first
    # --sdei-dispatch-ns, 1 us).
    sdei = long[("DAIF + SDEI", "local_irq_disable")]
    assert sdei["stopped"] and sdei["by"] == "sdei" and sdei["latency_us"] == pytest.approx(1e6 + 3, abs=0.01)
    assert sdei["requester_spin_us"] == sdei["latency_us"]
    sdei = long[("pseudo-NMI + SDEI", "daif")]
    assert sdei["stopped"] and sdei["by"] == "sdei" and sdei["latency_us"] == pytest.approx(1.01e6 + 3, abs=0.01)
    short = stop("10")
    assert all(
        r["stopped"] and r["by"] == "ipi" and r["latency_us"] == pytest.approx(9990, abs=1) for r in short.values()
    )


def test_whatif_a_small_tax_is_not_lost_in_counting_whole_operations(tmp_path: Path) -> None:
    # 1,000 exceptions/s and 5,000 interrupts/s: pseudo-NMI costs 74 ns per exception and
    # 7 accesses of 8.2 ns per interrupt, 0.036 % in all (counting whole operations in
    # the 20 ms run gave 21 against 20: 4.8 %).
    out = tmp_path / "w.json"
    assert_ok(run_cli("whatif", "--exceptions-per-s", "1000", "--irqs-per-s", "5000", "--cpus", "1", "--json", out))
    [row] = json.loads(out.read_text())["throughput"]
    assert row["throughput_ratio"] == pytest.approx(1 - (1000 * 74.1 + 5000 * 7 * 8.195) / 1e9, abs=1e-4)


@pytest.mark.parametrize(
    "args,needles",
    [
        (["--cpus", "a,b"], ["--cpus", "comma-separated"]),
        (["--cpus", "0"], ["--cpus", "1 to 4096"]),
        (["--exceptions-per-s", "1e9"], ["profile", "100%"]),
        (["--irqs-per-s", "1", "--irqs-from-host", "1"], ["one or the other"]),
        (["--base", "/nonexistent.toml"], ["nonexistent.toml"]),
    ],
)
def test_whatif_bad_input(args: list[str], needles: list[str], tmp_path: Path) -> None:
    out = tmp_path / "w.json"
    assert_user_error(run_cli("whatif", *args, "--json", out), *needles)
    assert not out.exists()


@pytest.mark.parametrize(
    "sets,needles",
    [
        (['crosscall.0.mechanisms=["pseudo-nmi"]', "cpu.masking=daif"], ["crosscall[0].mechanisms[0]", "pmr"]),
        (['crosscall.0.mechanisms=["ipi", "ipi"]'], ["listed twice"]),
        (["crosscall.0.at=1ms"], ["crosscall[0].at", "warmup"]),
        (["crosscall.0.targets=[9]"], ["crosscall[0].targets[0]", "does not exist"]),
        (['cpu.pmr.access="46cycles"'], ["cpu.pmr.access", "cpu.ghz"]),
        (
            ['task.1.irqs_off_with="pmr"', "cpu.masking=daif", 'crosscall.0.mechanisms=["sdei"]'],
            ["task[1].irqs_off_with"],
        ),
    ],
)
def test_crosscall_bad_input(sets: list[str], needles: list[str], tmp_path: Path) -> None:
    scen = irqlab.SCENARIOS_DIR / "examples" / "m1-backtrace.toml"
    args = ["run", scen]
    for s in sets:
        args += ["--set", s]
    out = tmp_path / "r.json"
    assert_user_error(run_cli(*args, "--json", out), *needles)
    assert not out.exists()


def test_a_page_fault_is_built_from_its_parts_and_taxed_by_its_pmr_accesses() -> None:
    import tomllib

    wis = irqlab.SCENARIOS_DIR / "examples" / "wis-page-fault1.toml"
    doc = tomllib.loads(wis.read_text())
    ns = {
        k: float(v.removesuffix("ns").removesuffix("us")) * (1000 if v.endswith("us") else 1)
        for k, v in doc["pagefault"].items()
    }
    body = sum(v for k, v in ns.items() if k != "pcp_refill") + ns["pcp_refill"] / 63
    daif, _ = irqlab.run(wis, ["duration=1ms", "warmup=100us"])
    m = daif["metrics"]
    assert m["task.page_fault1.ns_per_op"] == pytest.approx(2 + 40 + 40 + body, rel=1e-3)
    assert not daif["provenance"]["zero_default_costs"]
    # Pseudo-NMI: 12.3 PMR accesses on a fault (entry, exit, memcg sections, batched refills).
    pmr, _ = irqlab.run(wis, ["duration=1ms", "warmup=100us", "cpu.masking=pmr"])
    accesses = 3 + 9 + 3 * (1 / 64 + 1 / 31 + 1 / 32 + 1 / 63 + 3 / 512)
    assert pmr["metrics"]["task.page_fault1.pmr_tax_ns_per_op"] == pytest.approx(accesses * 8.195, abs=0.01)


def test_a_fault_without_parts_or_body_is_flagged(tmp_path: Path) -> None:
    sc = tmp_path / "bare.toml"
    sc.write_text('name = "bare"\nduration = "1ms"\n[[task]]\nname = "pf"\nwork = "10ns"\nexception = "pagefault"\n')
    doc, _ = irqlab.run(sc)
    zero = doc["provenance"]["zero_default_costs"]
    assert {"pagefault.zero", "pagefault.alloc", "cpu.exception_entry"} <= set(zero)
    assert "pagefault.zero" in doc["provenance"]["flagged_metrics"]["task.pf.ns_per_op"]


def test_will_it_scale_tasks_scale_without_contention_in_the_model() -> None:
    wis = irqlab.SCENARIOS_DIR / "examples" / "wis-sched-yield.toml"
    one, _ = irqlab.run(wis, ["duration=1ms", "warmup=100us"])
    many, _ = irqlab.run(wis, ["duration=1ms", "warmup=100us", "task.0.count=72"])
    per_task = many["metrics"]["ops_per_s"] / 72
    # No cross-CPU contention is modelled on this path (docs/m1-masking-and-nmi.md).
    assert per_task == pytest.approx(one["metrics"]["ops_per_s"], rel=2e-3)
    assert one["metrics"]["ops_per_s"] == pytest.approx(3_195_656, rel=0.01)  # the figure's own path


def test_whatif_runs_until_the_backtrace_requesters_next_look(tmp_path: Path) -> None:
    """A backtrace's requester looks every 1 ms (mdelay(1)): an IPI that gets
    in as a 2.02 ms wedge ends answers at about 2.01 ms, so the requester spins
    to its look at 3 ms. The run must last that long, or the spin reads short
    (it read 2.52 ms when the run ended 0.5 ms after the wedge; a review)."""
    out = tmp_path / "w.json"
    assert_ok(run_cli("whatif", "--exceptions-per-s", "1000", "--cpus", "1", "--wedge-ms", "2.02", "--json", out))
    reach = {(r["wedge"], r["mechanism"]): r for r in json.loads(out.read_text())["reachability"]}
    ipi = reach[("daif", "ipi")]
    assert ipi["reached"] and 2000 < ipi["latency_us"] < 2100
    assert ipi["requester_spin_us"] == pytest.approx(3000.0)
    # A pseudo-NMI through the PMR wedge answers at once: the spin ends at the first look after, 1 ms.
    assert reach[("local_irq_disable", "pseudo-nmi")]["requester_spin_us"] == pytest.approx(1000.0)
