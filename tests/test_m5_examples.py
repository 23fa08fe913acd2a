"""M5's example setups (issue: "M5 that predicts"): each settles within its run
(the two halves of the measured window agree within 2 %), and reports
throughput, interrupts/s, hardirq share and latency percentiles."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import irqlab
from helpers import assert_ok, run_cli

#: `run(name, *sets)` -> an example's result document.
Run = Callable[..., dict[str, Any]]
EX = irqlab.SCENARIOS_DIR / "examples"
SETUPS = [
    "m5-nvme-qd1",
    "m5-nvme-200jobs-qd1",
    "m5-nvme-12ssd",
    "m5-nvme-polled",
    "m5-hardirq-percent",
    "m5-nic-200g-10vms",
    "m5-nvme-posted-msi",
]


@pytest.fixture
def run(example_run: Callable[..., tuple[Any, dict[str, Any]]]) -> Run:
    """`run(name, *sets)` -> the example's result document (shared with the
    other tests that run it: conftest's `example_run`)."""

    def one(name: str, *sets: str) -> dict[str, Any]:
        p, doc = example_run(EX / f"{name}.toml", *sets)
        assert_ok(p)
        return doc

    return one


def halves(series: dict[str, list[float]]) -> tuple[float, float]:
    v = series["v"]
    n = len(v) // 2
    return sum(v[:n]) / n, sum(v[n:]) / (len(v) - n)


#: Setups the issue lists that are a file's variant: posted MSI on 2 and 4 disks.
VARIANTS = [pytest.param(name, [], id=name) for name in SETUPS] + [
    pytest.param("m5-nvme-posted-msi", [f"nvme.0.count={n}"], id=f"m5-nvme-posted-msi-{n}-disks") for n in (2, 4)
]


@pytest.mark.parametrize(("name", "sets"), VARIANTS)
def test_each_setup_settles_and_reports_what_a_user_asks(run: Run, name: str, sets: list[str]) -> None:
    r = run(name, *sets)
    m, h = r["metrics"], r["histograms"]
    headline = "iops" if "iops" in r["series"] else "goodput_gbps"
    first, second = halves(r["series"][headline])
    assert abs(second / first - 1) < 0.02, f"{name}: halves {first:.0f} and {second:.0f} ({headline})"
    assert any(k.endswith((".iops", ".goodput_gbps")) and v > 0 for k, v in m.items())
    assert {"interrupts_per_s", "hardirq_share"} <= m.keys()
    lat = next(v for k, v in h.items() if k.startswith(("nvme.", "nic.")) and k.endswith(".latency"))
    assert 0 < lat["p50"] <= lat["p99"] <= lat["p99.9"]


def test_polling_beats_interrupts_past_the_msi_limit(run: Run) -> None:
    polled = run("m5-nvme-polled")["metrics"]
    irq = run("m5-nvme-polled", "nvme.0.moderation.kind=none")["metrics"]
    assert polled["source.ssd.interrupts_per_s"] == 0
    assert irq["interrupts_per_s"] > 2e6
    assert polled["nvme.ssd.iops"] > 2 * irq["nvme.ssd.iops"]
    assert polled["hardirq_share"] == 0 and polled["kernel_share"] > 0


def test_posted_msi_coalesces_only_where_a_cpu_takes_several_vectors(run: Run) -> None:
    spread = run("m5-nvme-posted-msi", "duration=60ms", "warmup=30ms")["metrics"]
    packed = run("m5-nvme-posted-msi", "duration=60ms", "warmup=30ms", "nvme.0.count=4", "nvme.0.cpus=[0, 1, 2, 3]")[
        "metrics"
    ]
    # 64 vectors over 32 CPUs: an MSI seldom finds a notification outstanding.
    assert spread["posted_msi.handlers_per_notification"] < 1.2
    # 32 vectors on 4 CPUs: bursts share notifications.
    assert packed["posted_msi.handlers_per_notification"] > 1.3
    # Each message still crosses the remapping unit: posting does not lift the MSI limit.
    remapped = run("m5-nvme-posted-msi", "duration=60ms", "warmup=30ms", "posted_msi.enabled=false")["metrics"]
    assert abs(spread["nvme.ssd.iops"] / remapped["nvme.ssd.iops"] - 1) < 0.02


def test_queue_depth_one_latency_is_the_device_plus_the_host(run: Run) -> None:
    lat = run("m5-nvme-qd1")["histograms"]["nvme.ssd.latency"]
    # 80 us mean in the device (Erlang-4), a few us of interrupt, completion and submission.
    assert 80_000 < lat["mean"] < 86_000


def test_gsim_warns_in_one_line_when_every_vf_interrupt_is_posted(tmp_path: Path, run: Run) -> None:
    posted = [f"nic.{v}.vf_irqs=posted" for v in range(10)]
    args = ["run", EX / "m5-nic-200g-10vms.toml", "--set", "duration=8ms", "--set", "warmup=3ms"]
    for s in posted:
        args += ["--set", s]
    p = run_cli(*args, "--json", tmp_path / "posted.json")
    assert_ok(p)
    warnings = [line for line in p.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 1 and "gsim.moderated_sources = 0" in warnings[0], p.stderr
    m = json.loads((tmp_path / "posted.json").read_text())["metrics"]
    assert m["gsim.moderated_sources"] == 0
    # A posted interrupt takes no exit: the only exits are idle vCPUs' HLTs.
    assert m["vm_exits"] == round(m["halt_exits_per_s"] * m["sim_s"]) > 0
    # Remapped through the host (the file as is), GSIM has the 160 host vectors.
    remapped = run("m5-nic-200g-10vms", "duration=8ms", "warmup=3ms")
    assert remapped["metrics"]["gsim.moderated_sources"] == 160
    assert "warnings" not in remapped
