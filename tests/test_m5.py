"""M5: the figures pass, runs are deterministic, and bad M5 input is one line."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

import irqlab
from helpers import assert_ok, assert_user_error, run_cli
from irqlab import _core

EX = irqlab.SCENARIOS_DIR / "examples"
FIG = irqlab.SCENARIOS_DIR / "figures"


def test_m5_figures_pass(bundled_report) -> None:
    # The bundled `irqlab reproduce` (a session fixture) holds the M5 figures:
    # running them again here took ~20 s of CI.
    p, out = bundled_report
    assert_ok(p)
    m5 = ("m5-nvme-8ssd", "m5-nic-100g")
    rows = [r for r in json.loads((out / "figures.json").read_text())["figures"] if r["scenario"] in m5]
    assert len(rows) == 11
    # Two predictions miss (docs/m5-global-interrupt-moderation.md, "What
    # the model gets wrong"): the no-moderation IOPS and p99 (once its tail
    # has settled); every other figure holds. (The NIC's static coalescing
    # holds at the top of the range its unsettled mechanisms leave, +3.2 %.)
    misses = {"8 SSDs, no moderation", "8 SSDs, no moderation, p99 latency"}
    bad = [r for r in rows if not r["within_tolerance"] and r["name"] not in misses]
    assert not bad, bad
    by = {r["name"]: r for r in rows}
    # The mechanism's shape, beyond each figure's own tolerance: moderation lifts
    # throughput from the collapse, and the sweep falls as the target rises.
    assert by["8 SSDs, GSIM adaptive"]["simulated"] > 2 * by["8 SSDs, no moderation"]["simulated"]
    sweep = [by[f"sweep, target {t} M/s"]["simulated"] for t in ("1.25", "1.5", "1.75", "2")]
    assert sweep == sorted(sweep, reverse=True)
    assert by["100G NIC, GSIM"]["overrides"] and not by["100G NIC, static coalescing"]["overrides"]
    html = (out / "index.html").read_text()
    assert "m5-nvme-8ssd [gsim.delay_us=200]" in html


def p99_ms(sets: list[str]) -> float:
    result, _ = irqlab.run(FIG / "m5-nvme-8ssd.toml", sets)
    return float(result["histograms"]["nvme.ssd.latency"]["p99"]) / 1e6


def test_the_8ssd_p99_figures_measure_a_settled_tail() -> None:
    """The p99 figures run with warm-ups of their own (the dies' queues start
    evenly filled and spread out slowly: docs/m5, "The tails settle slowly"):
    the two halves of each figure's window give about the same p99 (windows of
    a few hundred ms still differ by up to ~10 %: the queues move slowly),
    where the file's own 60 ms window reads the no-moderation one far lower."""
    doc = tomllib.loads((FIG / "m5-nvme-8ssd.toml").read_text())
    for name in ("8 SSDs, no moderation, p99 latency", "8 SSDs, GSIM adaptive, p99 latency"):
        sets = next(e["set"] for e in doc["expect"] if e["name"] == name)
        other = [s for s in sets if not s.startswith(("warmup=", "duration="))]
        given = dict(s.split("=", 1) for s in sets if s not in other)
        times = {k: _core.parse_time_ps(v.strip('"')) / 1e12 for k, v in given.items()}
        w, d = times["warmup"], times["duration"]
        mid = (w + d) / 2
        first = p99_ms([*other, f'warmup="{w}s"', f'duration="{mid}s"'])
        second = p99_ms([*other, f'warmup="{mid}s"', f'duration="{d}s"'])
        assert abs(second / first - 1) < 0.12, f"{name}: halves {first:.2f} and {second:.2f} ms"
        if "no moderation" in name:
            short = p99_ms(other)
            assert short < 0.8 * min(first, second), f"{name}: {short:.2f} ms in the file's window, {first:.2f} settled"


def test_nic_with_vms_is_deterministic_and_injects(tmp_path: Path) -> None:
    a, ta = irqlab.run(EX / "m5-nic-vms.toml", ["duration=15ms", "warmup=5ms"], seed=3, trace=True)
    b, tb = irqlab.run(EX / "m5-nic-vms.toml", ["duration=15ms", "warmup=5ms"], seed=3, trace=True)
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    assert ta == tb
    c, _ = irqlab.run(EX / "m5-nic-vms.toml", ["duration=15ms", "warmup=5ms"], seed=4)
    assert c["metrics"] != a["metrics"]
    m = a["metrics"]
    assert m["vm_exits_per_s"] > 0 and m["guest_interrupts"] > 0
    assert all(m[f"nic.vf{i}.goodput_gbps"] > 15 for i in range(4))


def test_low_load_gsim_example_does_not_moderate() -> None:
    r, _ = irqlab.run(EX / "m5-nvme-lowload.toml")
    assert r["metrics"]["gsim.mod_ns"] == 0
    plain, _ = irqlab.run(
        EX / "m5-nvme-lowload.toml", ["gsim.delay_us=0", "gsim.target_intr_rate=0", "gsim.hardirq_percent=0"]
    )
    assert plain["histograms"]["nvme.ssd.latency"] == r["histograms"]["nvme.ssd.latency"]


def test_unaffected_platform_does_not_collapse() -> None:
    none, _ = irqlab.run(FIG / "m5-nvme-8ssd.toml", ["duration=60ms", "warmup=30ms"])
    fast, _ = irqlab.run(FIG / "m5-nvme-8ssd.toml", ["duration=60ms", "warmup=30ms", "fabric.msi_write=30ns"])
    assert fast["metrics"]["nvme.ssd.iops"] > 2 * none["metrics"]["nvme.ssd.iops"]
    assert fast["metrics"]["interrupts_per_s"] > 4e6  # 20-30 M/s-class platforms take it


NVME_FIG, NIC_FIG = "m5-nvme-8ssd.toml", "m5-nic-100g.toml"


def test_relaxed_ordering_lets_data_pass_the_msis_and_lifts_both_collapses() -> None:
    # Data that may pass its link's waiting MSI keeps the path moving, and the
    # MSIs, waiting longer, find more completions each (docs/m5: 13.7 M IOPS and
    # 94 Gbit/s where strict order gives 3.8 M and 52).
    short = ["duration=60ms", "warmup=30ms"]

    def run(fig: str, *sets: str) -> dict[str, float]:
        return irqlab.run(FIG / fig, [*short, *sets])[0]["metrics"]

    strict, relaxed = run(NVME_FIG), run(NVME_FIG, "nvme.0.relaxed_ordering=true")
    assert relaxed["nvme.ssd.iops"] > 2.5 * strict["nvme.ssd.iops"]
    per_irq = [m["nvme.ssd.iops"] / m["interrupts_per_s"] for m in (strict, relaxed)]
    assert per_irq[1] > 3 * per_irq[0], per_irq
    drops = [run(NIC_FIG, f"nic.0.relaxed_ordering={r}")["nic.eth.drop_share"] for r in ("false", "true")]
    assert drops[1] < 0.01 < drops[0], drops


@pytest.mark.parametrize(
    "fig,sets,needles",
    [
        (NVME_FIG, ["nvme.0.moderation.kind=dim"], ["nvme[0].moderation.kind", "polling"]),
        (NVME_FIG, ["nvme.0.moderation.kind=static"], ["nvme[0].moderation.usecs", "expected usecs above 0"]),
        (
            NVME_FIG,
            ['nvme.0.moderation={kind="static",frames=8}'],
            ["nvme[0].moderation.usecs", "frames = 8 without usecs"],
        ),
        (NVME_FIG, ["nvme.0.queues=200"], ["nvme[0].queues", "1 to 128"]),
        (NVME_FIG, ["nvme.0.cpus=[99]"], ["nvme[0].cpus[0]", "does not exist"]),
        (NVME_FIG, ["nvme.0.moderation.kind=sometimes"], ["nvme[0].moderation.kind", "unknown variant"]),
        (NVME_FIG, ["nvme.0.service_order=lifo"], ["nvme[0].service_order", "`die`, `random`, `fifo`"]),
        (NVME_FIG, ["gsim.hardirq_percent=150"], ["gsim.hardirq_percent", "0 to 100"]),
        (NVME_FIG, ["gsim.update_ms=0"], ["gsim.update_ms"]),
        (NVME_FIG, ["fabric.slots=2"], ["fabric.slots", "must be 1"]),
        (NIC_FIG, ["nic.0.gbps=120", "nic.0.link_gbps=100"], ["nic[0].gbps", "link speed"]),
        (NIC_FIG, ["nic.0.queues=300"], ["nic[0].queues", "1 to 256"]),
        (NIC_FIG, ["nic.0.packets=[[20, 1.0]]"], ["nic[0].packets[0]"]),
        (NIC_FIG, ["nic.0.moderation.kind=dim"], ["nic[0].moderation", "only to kind"]),
        # The functions of one device share its link, so its ordering too.
        (
            "../examples/m5-nic-vms.toml",
            ["nic.1.relaxed_ordering=true"],
            ["nic[1].relaxed_ordering", "true: expected false", 'shares device "nic0"'],
        ),
    ],
)
def test_m5_bad_input(fig: str, sets: list[str], needles: list[str], tmp_path: Path) -> None:
    args = ["run", FIG / fig]
    for s in sets:
        args += ["--set", s]
    out = tmp_path / "r.json"
    assert_user_error(run_cli(*args, "--json", out), *needles)
    assert not out.exists()


def test_bench_scenario_reports_simulated_seconds_per_wall_second(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    assert_ok(run_cli("bench", "--scenario", EX / "m5-nvme-lowload.toml", "--json", out))
    m = json.loads(out.read_text())["metrics"]
    assert m["sim_s_per_wall_s"] > 0 and m["events"] > 0
