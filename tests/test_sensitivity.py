"""`irqlab sensitivity`: scaling each kind of value, bad input as one line, the
physically expected direction on the M5 NVMe figure, determinism, and the
tornado plots `irqlab reproduce` draws for the M5 figures."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import irqlab
from helpers import assert_ok, assert_user_error, run_cli
from irqlab import _core
from irqlab._util import UserError
from irqlab.reproduce import SENSITIVITY
from irqlab.sensitivity import current_value, parse_factors, scale_value, shown, toml_literal, tornado

NVME = irqlab.SCENARIOS_DIR / "figures" / "m5-nvme-8ssd.toml"
# Short enough for a test (each run well under a second), long enough that the
# fabric's saturation without moderation shows as it does in the figure.
SHORT = ["--set", "duration=30ms", "--set", "warmup=10ms"]


@pytest.mark.parametrize(
    "value,factor,expected",
    [
        # Integers stay integers: rounded half up, and a count of at least 1 stays at least 1.
        (256, 0.5, 128),
        (3, 0.5, 2),
        (1, 0.1, 1),
        (0, 2, 0),
        (25, 2, 50),
        # Floats (rates the core resolved to numbers: "1.7375M" -> 1737500.0).
        (1737500.0, 2, 3475000.0),
        (0.25, 0.5, 0.125),
        # Times keep their unit.
        ("325ns", 2, "650ns"),
        ("325ns", 0.5, "162.5ns"),
        ("325ns", 1.1, "357.5ns"),  # no 357.50000000000006ns
        ("39700ps", 0.5, "19850ps"),
        ("7us", 0.5, "3.5us"),
        ("1.5ms", 2, "3ms"),
        ("0s", 2, "0s"),
        ("46cycles", 2, "92cycles"),
        # Rates and sizes keep their suffix.
        ("1.7375M", 2, "3.475M"),
        ("1e6/s", 0.5, "500000/s"),
        ("250k/s", 2, "500k/s"),
        ("256M", 0.5, "128M"),
    ],
)
def test_scale_value_keeps_the_kind_and_unit(value: Any, factor: float, expected: Any) -> None:
    got = scale_value(value, factor)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    "value,expected",
    [
        # The core resolves "39.7ns" to whole ps; a person reads it in ns, every digit kept.
        ("39700ps", "39.7 ns"),
        ("19850ps", "19.85 ns"),
        ("325ns", "325 ns"),
        ("1us", "1 µs"),
        ("0.5s", "500 ms"),
        ("500ps", "500 ps"),
        ("80k/s", "80k/s"),
        (1737500.0, "1,737,500"),
        (8, "8"),
        (0.35, "0.35"),
        ("trap", "trap"),
    ],
)
def test_values_are_shown_as_a_person_reads_them(value: Any, expected: str) -> None:
    assert shown(value) == expected


def test_a_rate_the_core_resolved_to_a_number_is_shown_per_second() -> None:
    """The core resolves "31250/s" to 31250.0: shown without its key, that read
    as a count (a review of the "set to" column)."""
    from irqlab.sensitivity import is_rate

    assert [is_rate(k) for k in ("source.0.rate", "nvme.0.iops", "gsim.target_intr_rate")] == [True] * 3
    assert not any(is_rate(k) for k in ("source.0.count", "fabric.msi_write", "nvme.0.fio.jobs", "nope.0.x"))
    assert shown(7812.5, "source.0.rate") == "7,812.5/s" and shown(875000.0, "nvme.0.iops") == "875,000/s"
    assert shown(13, "nvme.0.fio.jobs") == "13" and shown("39700ps", "fabric.dma_write") == "39.7 ns"


def test_a_rounded_count_says_the_factor_it_ran(small: Path) -> None:
    """A count rounds (2 x 0.333 runs 1, x 0.5): the row said 0.333 alone."""
    args = ["--param", "source.0.count", "--param", "source.0.rate", "--factor", "0.333,2", "--metric", "interrupts"]
    p = run_cli("sensitivity", small, *args)
    assert_ok(p)
    rows = [ln.split() for ln in p.stdout.splitlines() if ln.strip().startswith("source.0.")]
    assert rows[0][:5] == ["source.0.count", "0.333", "(ran", "x0.5)", "1"], p.stdout
    assert rows[1][:3] == ["source.0.count", "2", "4"], p.stdout
    # A rate scales exactly, with its unit.
    assert rows[2][:3] == ["source.0.rate", "0.333", "33,300/s"] and rows[3][:3] == ["source.0.rate", "2", "200,000/s"]


def test_a_key_written_two_ways_is_one_row_and_a_rounded_time_says_what_it_ran(small: Path) -> None:
    """`source[0].rate` is `source.0.rate` (it ran twice, once without its unit);
    a time rounds to whole ps as the core's clock does (3 ps x 0.5 runs 2 ps)."""
    from irqlab.sensitivity import check_params, run_factor

    assert check_params(["source.0.rate", "source[0].rate", " source.0.rate "]) == ["source.0.rate"]
    assert run_factor("3ps", "1.5ps") == pytest.approx(2 / 3) and run_factor("325ns", "162.5ns") == 0.5
    assert run_factor(3, 2) == pytest.approx(2 / 3) and run_factor("1M/s", "2M/s") == 2


def test_scaled_times_and_rates_read_back_as_the_core_parses_them() -> None:
    assert _core.parse_time_ps(str(scale_value("325ns", 0.5))) == 162_500
    assert _core.parse_time_ps(str(scale_value("39700ps", 2))) == 79_400
    assert _core.parse_rate(str(scale_value("1.7375M", 2))) == 3_475_000
    assert _core.parse_rate(str(scale_value("1e6/s", 1e-7))) == pytest.approx(0.1)


@pytest.mark.parametrize("value", [True, False, "daif", "static", "", {"a": 1}, [1, 2], None])
def test_scale_value_refuses_what_is_not_a_number(value: Any) -> None:
    with pytest.raises(ValueError):
        scale_value(value, 2)


def test_override_literals_quote_strings_and_keep_floats_floats() -> None:
    # Quoted: "0" or "5e5" written for a time or a rate must not become a TOML number.
    assert toml_literal("650ns") == '"650ns"'
    assert toml_literal(3475000.0) == "3475000.0"
    assert toml_literal(1e-5) == "0.00001"
    assert toml_literal(6) == "6"


def test_factors_default_split_and_dedupe() -> None:
    assert parse_factors(None) == [0.5, 2.0]
    assert parse_factors(["0.5,2"]) == [0.5, 2.0]
    assert parse_factors(["2", "0.25, 2"]) == [2.0, 0.25]
    for bad in ["0", "-1", "nan", "inf", "abc", "1,", "", "1e300", "1e-9"]:
        with pytest.raises(UserError, match=r"from 0\.001 to 1000"):
            parse_factors([bad])


def test_key_paths_read_as_overrides_write_them() -> None:
    scen = {"fabric": {"msi_write": "325ns"}, "nvme": [{"per_cqe": "300ns"}], "gsim": None}
    assert current_value(scen, "fabric.msi_write") == "325ns"
    assert current_value(scen, "nvme.0.per_cqe") == current_value(scen, "nvme[0].per_cqe") == "300ns"
    with pytest.raises(UserError, match="gsim is not set"):
        current_value(scen, "gsim.delay_us")


def test_tornado_puts_the_largest_change_first() -> None:
    runs = [
        {"param": "a", "factor": 0.5, "change": {"m": 0.01}},
        {"param": "a", "factor": 2.0, "change": {"m": -0.02}},
        {"param": "b", "factor": 0.5, "change": {"m": 0.5}},
        {"param": "b", "factor": 2.0, "change": {"m": None}},
    ]
    assert [p for p, _ in tornado({"runs": runs}, "m")] == ["b", "a"]


@pytest.mark.parametrize(
    "args,needles",
    [
        (["--param", "fabric.nosuch"], ["--param fabric.nosuch", "no key 'nosuch'", "msi_write"]),
        (["--param", "source.5.rate"], ["--param source.5.rate", "no index 5"]),
        (["--param", "cpu.masking"], ["--param cpu.masking", '"daif"', "not a number", "expected a numeric key"]),
        (["--param", "source.0.cpus"], ["--param source.0.cpus", "a list, not a number"]),
        (["--param", "cpu.pmr.pmhe"], ["--param cpu.pmr.pmhe", "false is a boolean"]),
        (["--param", "gsim.delay_us"], ["--param gsim.delay_us", "not set"]),
        (["--param", "seed"], ["--param seed", "--seed"]),
        # What is checked or recorded, not simulated: rows of +0.00 % (an audit).
        (["--param", "expect.0.published"], ["--param expect.0.published", "[expect] is not a simulation input"]),
        (["--param", "trace.max_events"], ["--param trace.max_events", "[trace] is not a simulation input"]),
        # A time at the clock's resolution that the factor leaves where it was (0.5 ps runs as 1 ps).
        (
            ["--param", "fabric.msi_write", "--set", 'fabric.msi_write="1ps"', "--factor", "0.5"],
            ["--param fabric.msi_write", "is 0.5 ps again"],
        ),
        ([], ["at least one --param"]),
        (["--param", "fabric.msi_write", "--factor", "0"], ["--factor '0'", "from 0.001 to 1000"]),
        (["--param", "fabric.msi_write", "--factor", "0.5,-2"], ["--factor '-2'", "from 0.001 to 1000"]),
        (["--param", "fabric.msi_write", "--factor", "inf"], ["--factor 'inf'", "from 0.001 to 1000"]),
        (["--param", "fabric.msi_write", "--factor", "twice"], ["--factor 'twice'", "from 0.001 to 1000"]),
        (["--param", "fabric.msi_write", "--factor", "1e300"], ["--factor '1e300'", "from 0.001 to 1000"]),
        (["--param", "fabric.msi_write", "--metric", "nosuch"], ["--metric nosuch", "interrupts_per_s"]),
        (["--param", "fabric.msi_write", "--workers", "0"], ["--workers 0"]),
        # A value the factors leave as it was read as "+0.00 %", insensitive (a review).
        (["--param", "cpu.sgi_latency", "--factor", "2"], ["--param cpu.sgi_latency", "0 ps x 2 is 0 ps again"]),
        (["--param", "platform.cpus", "--factor", "1.2"], ["--param platform.cpus", "2 x 1.2 is 2 again"]),
        # A scaled value the scenario refuses, named by --param and factor, not as a --set.
        (
            ["--param", "source.0.rate", "--factor", "1000", "--set", "source.0.rate=1e10/s"],
            ["--param source.0.rate x 1000 = 10000000000000.0", "at most 1e12/s"],
        ),
    ],
)
def test_bad_input_is_one_line(small: Path, args: list[str], needles: list[str]) -> None:
    assert_user_error(run_cli("sensitivity", small, *args), *needles)


def test_a_non_numeric_key_of_the_m5_figure_is_refused() -> None:
    assert_user_error(run_cli("sensitivity", NVME, "--param", "nvme.0.name"), "nvme.0.name", '"ssd"', "not a number")


def sensitivity(out: Path, *extra: object) -> dict[str, Any]:
    p = run_cli(
        "sensitivity", NVME, "--param", "fabric.msi_write", "--param", "fabric.dma_write", *SHORT, "--json", out, *extra
    )
    assert_ok(p)
    doc: dict[str, Any] = json.loads(out.read_text())
    return doc


@pytest.fixture(scope="module")
def nvme(tmp_path_factory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("sens") / "w2.json"
    return out, sensitivity(out, "--workers", "2")


def _run(doc: dict[str, Any], param: str, factor: float) -> dict[str, Any]:
    [r] = [r for r in doc["runs"] if r["param"] == param and r["factor"] == factor]
    return r


def test_the_fabric_costs_move_iops_the_way_the_mechanism_says(nvme) -> None:
    _, doc = nvme
    # The figure's expectations name the metrics: IOPS and the p99 latency.
    assert doc["metrics"] == ["nvme.ssd.iops", "nvme.ssd.latency.p99"]
    assert doc["factors"] == [0.5, 2.0]
    assert doc["base"]["values"]["fabric.msi_write"] == "325ns"
    base = doc["base"]["metrics"]["nvme.ssd.iops"]
    assert base > 0
    # Without moderation the MSI writes saturate the DMA path: a cheaper MSI
    # write lifts IOPS, a dearer one lowers it, and so does a dearer DMA write.
    halved = _run(doc, "fabric.msi_write", 0.5)
    doubled = _run(doc, "fabric.msi_write", 2.0)
    assert halved["value"] == "162.5ns" and doubled["value"] == "650ns"
    assert halved["metrics"]["nvme.ssd.iops"] > base > doubled["metrics"]["nvme.ssd.iops"]
    assert halved["change"]["nvme.ssd.iops"] > 0 > doubled["change"]["nvme.ssd.iops"]
    dma = _run(doc, "fabric.dma_write", 2.0)
    assert dma["metrics"]["nvme.ssd.iops"] < base
    assert dma["change"]["nvme.ssd.iops"] == pytest.approx((dma["metrics"]["nvme.ssd.iops"] - base) / base)


def test_runs_are_deterministic_whatever_the_workers(nvme) -> None:
    out, doc = nvme
    again = sensitivity(out.with_name("w1.json"), "--workers", "1")
    assert json.dumps(again, sort_keys=True) == json.dumps(doc, sort_keys=True)


def test_the_table_names_each_parameter_and_change() -> None:
    args = ["--param", "nvme.0.per_cqe", "--factor", "2", "--metric", "interrupts_per_s", *SHORT]
    p = run_cli("sensitivity", NVME, *args)
    assert_ok(p)
    assert "nvme.0.per_cqe" in p.stdout and "600 ns" in p.stdout and "interrupts_per_s" in p.stdout
    # (Nothing on stderr but that the short window leaves the NVMe tail unsettled.)
    assert "%" in p.stdout and all(ln.startswith("warning: the p99 of") for ln in p.stderr.splitlines()), p.stderr
    # Values in their units, as `run` shows them: a rate as 1.23 M/s, a latency as 4.56 ms.
    args = ["--param", "nvme.0.per_cqe", "--factor", "2", "--metric", "interrupts_per_s"]
    args += ["--metric", "nvme.ssd.latency.p99"]
    p = run_cli("sensitivity", NVME, *args, *SHORT)
    assert_ok(p)
    rows = [ln for ln in p.stdout.splitlines() if "interrupts_per_s" in ln or "latency.p99" in ln]
    assert len(rows) == 4 and all(re.search(r"\d (k|M)/s\b|\d (µs|ms)\b", r) for r in rows), p.stdout


def test_reproduce_draws_a_tornado_per_m5_figure(bundled_report) -> None:
    p, out = bundled_report
    assert_ok(p)
    doc = json.loads((out / "figures.json").read_text())
    by = {s["scenario"]: s for s in doc["sensitivity"]}
    assert set(by) == {"m5-nvme-8ssd", "m5-nic-100g"}
    assert by["m5-nvme-8ssd"]["metric"] == "nvme.ssd.iops"
    assert by["m5-nic-100g"]["metric"] == "nic.eth.goodput_gbps"
    for stem, entry in by.items():
        params = {r["param"] for r in entry["runs"]}
        assert params == set(SENSITIVITY[stem])
        assert len(entry["runs"]) == 2 * len(params)
        # The base is the file as is: the figure's own run without a `set`.
        # (Expectations on other metrics of the same run, e.g. a p99, share it.)
        figs = [f for f in doc["figures"] if f["scenario"] == stem and not f["overrides"]]
        fig = next(f for f in figs if f["metric"] == entry["metric"])
        assert entry["base"]["metrics"][entry["metric"]] == fig["simulated"]
    # Each parameter moves the collapse the way its mechanism says (docs/m5, "What
    # the two collapses lean on"): the path's costs cost throughput; more credits,
    # and anything that makes an interrupt later (its delivery, entry, handler,
    # reaping), let more completions share an interrupt and give throughput back.
    costs = {"fabric.msi_write", "fabric.dma_write", "fabric.dma_per_kib"}
    # NVMe's per_cqe runs mostly after the head doorbell (nvme_pci_complete_batch):
    # it does not hold the CQ's signal back, so the collapse hardly moves with it.
    after_doorbell = {"nvme.0.per_cqe"}
    for stem, metric in (("m5-nvme-8ssd", "nvme.ssd.iops"), ("m5-nic-100g", "nic.eth.goodput_gbps")):
        change = {(r["param"], r["factor"]): r["change"][metric] for r in by[stem]["runs"]}
        for param in SENSITIVITY[stem]:
            down, up = change[(param, 0.5)], change[(param, 2.0)]
            if stem == "m5-nvme-8ssd" and param in after_doorbell:
                assert abs(down) < 0.01 and abs(up) < 0.01, (stem, param, down, up)
            elif stem == "m5-nvme-8ssd" and param == "nvme.0.handle_cqe":
                # The loop's 100 ns is a short window: doubled it lets a few more
                # completions share an interrupt; halved it moves nothing that shows.
                assert up > 0 and up > down and abs(down) < 0.005, (stem, param, down, up)
            elif param in costs:
                assert up < 0 < down, (stem, param, down, up)
            else:
                assert down < 0 < up, (stem, param, down, up)
    page = (out / "index.html").read_text()
    assert "<h2>Sensitivity</h2>" in page
    # The fitted DMA cost as the figure file writes it, not as the core stores it.
    assert "<td>39.7 ns</td>" in page and "39700ps" not in page
    assert 'alt="m5-nvme-8ssd: tornado of nvme.ssd.iops"' in page
    assert 'alt="m5-nic-100g: tornado of nic.eth.goodput_gbps"' in page
    assert "sensitivity of m5-nvme-8ssd, m5-nic-100g (30 runs)" in p.stdout


def test_credits_and_the_device_ceiling_move_iops_the_way_the_mechanism_says(tmp_path: Path) -> None:
    # Without moderation: more PCIe credits let an MSI wait behind more of its
    # disk's data, so each interrupt finds more completions and IOPS rise.
    out = tmp_path / "credits.json"
    assert_ok(
        run_cli(
            "sensitivity", NVME, "--param", "nvme.0.dma_credits", "--metric", "nvme.ssd.iops", *SHORT, "--json", out
        )
    )
    doc = json.loads(out.read_text())
    assert _run(doc, "nvme.0.dma_credits", 0.5)["change"]["nvme.ssd.iops"] < 0
    assert _run(doc, "nvme.0.dma_credits", 2.0)["change"]["nvme.ssd.iops"] > 0
    # Under GSIM the disks, not the platform, are the limit: half their ceiling, about half the IOPS.
    gsim = ["--set", "gsim.delay_us=200"]
    out = tmp_path / "iops.json"
    assert_ok(
        run_cli(
            "sensitivity",
            NVME,
            "--param",
            "nvme.0.iops",
            "--factor",
            "0.5",
            "--metric",
            "nvme.ssd.iops",
            *gsim,
            *SHORT,
            "--json",
            out,
        )
    )
    half = _run(json.loads(out.read_text()), "nvme.0.iops", 0.5)["change"]["nvme.ssd.iops"]
    assert -0.55 < half < -0.4, half


def test_cpu_costs_move_iops_the_way_the_mechanism_says_where_the_cpus_are_the_limit(tmp_path: Path) -> None:
    # 4 disks whose jobs and interrupts share 4 CPUs: the CPUs, not the platform,
    # are the limit, so every CPU cost on the I/O path (submission, the handler,
    # interrupt entry) lowers IOPS when doubled and raises them when halved; the
    # interrupt costs also move the hardirq share with them. Completing an I/O
    # (per_cqe) does so too: most of it follows the CQ head doorbell
    # (nvme_pci_complete_batch), so it no longer lengthens nvme_poll_cq's loop
    # and buys back no interrupts (until 2026-11-29 it all came before the
    # doorbell, and doubled it cut interrupts per I/O by over 5 %).
    ex = irqlab.SCENARIOS_DIR / "examples" / "m5-nvme-posted-msi.toml"
    sets = ["nvme.0.count=4", "nvme.0.cpus=[0, 1, 2, 3]", "posted_msi.enabled=false", "duration=60ms", "warmup=30ms"]
    params = ["nvme.0.submit", "nvme.0.handler", "nvme.0.per_cqe", "cpu.irq_entry"]
    args: list[Any] = ["sensitivity", ex, "--metric", "nvme.ssd.iops", "--metric", "hardirq_share"]
    args += ["--metric", "interrupts_per_s"]
    for s in sets:
        args += ["--set", s]
    for p in params:
        args += ["--param", p]
    out = tmp_path / "cpu.json"
    assert_ok(run_cli(*args, "--json", out))
    doc = json.loads(out.read_text())
    for p in params:
        cheaper, dearer = _run(doc, p, 0.5)["change"], _run(doc, p, 2.0)["change"]
        assert cheaper["nvme.ssd.iops"] > 0 > dearer["nvme.ssd.iops"], p
    for p in ["nvme.0.handler", "cpu.irq_entry"]:
        assert _run(doc, p, 2.0)["change"]["hardirq_share"] > 0, p
