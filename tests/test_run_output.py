"""What `irqlab run` prints: the summary first and short by default, per-CPU and
per-source rows on request, csv and json forms, figure variants by name, the
too-short-run warning, and tables that keep every column in a piped 80-column
output."""

from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import irqlab
from helpers import assert_ok, assert_user_error, run_cli
from irqlab.cli import summary

FIG = irqlab.SCENARIOS_DIR / "figures"
NVME = FIG / "m5-nvme-8ssd.toml"
NIC = FIG / "m5-nic-100g.toml"
# A short run of the NVMe figure (a sixth of its simulated time), long enough to settle.
SHORT = ["--set", "duration=20ms", "--set", "warmup=10ms"]


def run_piped(*args: object, columns: int = 80) -> subprocess.CompletedProcess[str]:
    """`irqlab` with stdout a pipe and COLUMNS as given (run_cli has 200)."""
    env = {**os.environ, "CI": "true", "COLUMNS": str(columns)}
    return subprocess.run(
        [sys.executable, "-m", "irqlab", *map(str, args)], env=env, capture_output=True, text=True, timeout=300
    )


def warnings(p: subprocess.CompletedProcess[str]) -> list[str]:
    return [ln for ln in p.stderr.splitlines() if ln.startswith("warning:")]


def test_default_output_is_short_with_the_headline_first():
    p = run_piped("run", NVME)
    assert_ok(p)
    lines = p.stdout.splitlines()
    assert len(lines) <= 40, p.stdout
    head = "\n".join(lines[:5])
    assert "M IOPS" in head and "nvme.ssd.iops" in head, p.stdout
    assert "interrupts_per_s" in p.stdout and "hardirq_share" in p.stdout
    # Per-CPU rows only on request.
    assert "cpu0" not in p.stdout and "cpus (" not in p.stdout
    assert "--per-cpu" in lines[-1]
    # Only that the file's 60 ms window leaves its tail unsettled (docs/m5, "The tails settle slowly").
    assert all(w.startswith("warning: the p99 of nvme.ssd.latency") for w in warnings(p)), p.stderr


def test_per_cpu_adds_the_per_cpu_and_per_source_rows():
    base = run_piped("run", NVME, *SHORT)
    p = run_piped("run", NVME, *SHORT, "--per-cpu")
    assert_ok(base)
    assert_ok(p)
    lines = p.stdout.splitlines()
    assert "cpus (32 rows)" in lines and "sources (1 row)" in lines
    # One row per CPU (in each group of columns the table is wrapped into).
    cpu_rows = [ln for ln in lines if ln.split()[:1] == ["31"]]
    assert cpu_rows and all("%" in ln or "/s" in ln for ln in cpu_rows)
    assert len(lines) > len(base.stdout.splitlines()) + 32
    # --all: every metric by name, per-CPU ones too.
    everything = run_piped("run", NVME, *SHORT, "--all")
    assert_ok(everything)
    assert "cpu31.user_share" in everything.stdout and "p99.9" in everything.stdout.split()


def test_csv_has_every_metric_and_histogram_statistic(tmp_path):
    out = tmp_path / "r.json"
    p = run_cli("run", NVME, *SHORT, "--format", "csv", "--json", out)
    assert_ok(p)
    doc = json.loads(out.read_text())
    rows = list(csv.DictReader(io.StringIO(p.stdout)))
    assert rows and set(rows[0]) == {"metric", "value", "unit"}
    got = {r["metric"]: r for r in rows}
    for k, v in doc["metrics"].items():
        assert float(got[k]["value"]) == pytest.approx(v, rel=1e-12), k
    assert got["nvme.ssd.iops"]["unit"] == "IOPS"
    assert got["hardirq_share"]["unit"] == "fraction"
    assert got["interrupts_per_s"]["unit"] == "/s"
    h = doc["histograms"]["nvme.ssd.latency"]
    assert float(got["nvme.ssd.latency.p99"]["value"]) == pytest.approx(h["p99"])
    assert got["nvme.ssd.latency.p99"]["unit"] == "ns" and got["nvme.ssd.latency.count"]["unit"] == ""
    assert len(rows) == len(doc["metrics"]) + 9 * len(doc["histograms"])


def test_format_json_is_the_json_on_stdout():
    a = run_cli("run", NVME, *SHORT, "--format", "json")
    b = run_cli("run", NVME, *SHORT, "--json", "-")
    assert_ok(a)
    assert_ok(b)
    assert a.stdout == b.stdout
    json.loads(a.stdout)


@pytest.mark.parametrize(
    "args, needle",
    [
        (["--format", "json", "--trace", "-"], "only one output"),
        (["--format", "csv", "--json", "-"], "only one output"),
        (["--format", "table", "--trace", "-"], "only one output"),
        (["--format", "yaml"], "--format"),
    ],
)
def test_two_outputs_on_stdout_are_one_error_line(args, needle):
    assert_user_error(run_cli("run", NVME, *args), needle)


def test_variant_runs_that_variant(tmp_path):
    study = irqlab.load(NIC)["variants"]["run"]
    dim = next(v for v in study if "DIM" in v["name"])
    out = tmp_path / "r.json"
    p = run_cli("run", NIC, "--set", "duration=10ms", "--set", "warmup=5ms", "--variant", dim["name"], "--json", out)
    assert_ok(p)
    assert f'variant "{dim["name"]}"' in p.stdout.splitlines()[0]
    # The variant's overrides first, then the command line's (which win).
    assert json.loads(out.read_text())["provenance"]["overrides"] == [*dim["set"], "duration=10ms", "warmup=5ms"]
    # An [[expect]] entry's run, by the entry's name.
    out2 = tmp_path / "r2.json"
    assert_ok(run_cli("run", NVME, *SHORT, "--variant", "8 SSDs, GSIM adaptive", "--json", out2))
    overrides = json.loads(out2.read_text())["provenance"]["overrides"]
    assert "gsim.target_intr_rate=1000000" in overrides


def test_unknown_variant_is_one_error_line_naming_the_variants():
    line = assert_user_error(run_cli("run", NIC, "--variant", "nope"), "--variant", "nope", "no such variant")
    assert '"busy polling"' in line and '"no moderation"' in line
    line = assert_user_error(run_cli("run", FIG / "m1-gettid.toml", "--variant", "x"), "--variant")
    assert "m1-gettid.toml" in line


def test_piped_80_columns_keep_every_column():
    out_json = run_cli("run", NVME, *SHORT, "--json", "-")
    assert_ok(out_json)
    doc = json.loads(out_json.stdout)
    for flag in ("--per-cpu", "--all"):
        p = run_piped("run", NVME, *SHORT, flag, columns=80)
        assert_ok(p)
        for name, table in doc["tables"].items():
            assert f"{name} (" in p.stdout, name
            for col in table["columns"]:
                assert col in p.stdout, (flag, name, col)
        # The histogram table's headers, in however many groups of columns it took.
        headers = [w for ln in p.stdout.splitlines() if ln.split()[:1] == ["histogram"] for w in ln.split()]
        stats = summary.HIST_STATS if flag == "--all" else summary.HIST_SHORT
        assert set(stats) <= set(headers), (flag, headers)
        assert "…" not in p.stdout
        too_wide = [ln for ln in p.stdout.splitlines() if len(ln) > 80]
        assert not too_wide, too_wide


def test_a_too_short_run_warns_in_one_line():
    # The measured window (2 ms) is far shorter than the warm-up (60 ms).
    p = run_cli("run", NVME, "--set", "duration=62ms", "--format", "csv")
    assert_ok(p)
    assert len(warnings(p)) == 1 and "warm-up" in warnings(p)[0], p.stderr
    # A long enough window, but few completions of the headline (its latency histogram).
    lowload = irqlab.SCENARIOS_DIR / "examples" / "m5-nvme-lowload.toml"
    p = run_cli("run", lowload, "--set", "warmup=10ms", "--set", "duration=15ms")
    assert_ok(p)
    assert len(warnings(p)) == 1 and "nvme.ssd.latency" in warnings(p)[0], p.stderr


def test_the_short_run_warning_is_in_the_json_too(tmp_path: Path):
    # `run` adds "warnings", the lines it printed on stderr: this one was left out (an audit).
    out = tmp_path / "r.json"
    p = run_cli("run", NVME, "--set", "duration=62ms", "--json", out)
    assert_ok(p)
    printed = [w.removeprefix("warning: ") for w in warnings(p)]
    assert len(printed) == 1 and json.loads(out.read_text())["warnings"] == printed


@pytest.mark.parametrize("path", sorted(FIG.glob("*.toml")), ids=lambda p: p.stem)
def test_no_figure_warns_of_a_short_run_at_its_defaults(path: Path):
    result, _ = irqlab.run(path)
    why = summary.short_run(result, result["provenance"]["scenario"])
    # Except the NVMe figures' tail: their files measure IOPS in 60 ms, where the
    # no-moderation p99 still rises (it settles after about 1 s; docs/m5, "The
    # tails settle slowly"), and a plain run of them says so.
    if why is not None and path.stem in ("m5-nvme-8ssd", "m5-nvme-device", "m5-posted-msi"):
        assert why.startswith("the p99 of nvme.ssd.latency was "), why
        return
    assert why is None, why


def test_a_run_whose_halves_disagree_warns_of_it():
    """A window read on a transient: GSIM's control law, which takes about 100 ms
    to settle, measured 1 ms into the run (the rate), and the no-moderation
    NVMe figure's tail in its file's 60 ms window (the p99: 17.3 ms read as the
    published 17 ms, where the settled tail is 29.7 ms; a review)."""
    hp = irqlab.SCENARIOS_DIR / "examples" / "m5-hardirq-percent.toml"
    p = run_cli("run", hp, "--set", "warmup=1ms", "--set", "duration=21ms")
    assert_ok(p)
    (w,) = warnings(p)
    assert "nvme.ssd.iops was " in w and "in the first half of the measured window and " in w, w
    assert w.endswith("the run had not settled; lengthen warmup (and duration with it)"), w
    p = run_cli("run", hp, "--set", "warmup=100ms", "--set", "duration=150ms")
    assert_ok(p)
    assert warnings(p) == [], p.stderr


def _halves(p99: float, first_p99: float, count: int, iops: float = 1e6, first_iops: float = 1e6) -> dict:
    hist = {"count": count, "p99": p99}
    return {
        "metrics": {"nvme.ssd.iops": iops},
        "histograms": {"nvme.ssd.latency": hist},
        "first_half": {
            "metrics": {"nvme.ssd.iops": first_iops},
            "histograms": {"nvme.ssd.latency": {"count": count // 2, "p99": first_p99}},
        },
    }


def test_the_halves_rule_reads_the_tail_only_on_enough_completions():
    assert summary.unsettled_halves(_halves(17.3e6, 16.2e6, 200_000)) is not None
    assert summary.unsettled_halves(_halves(17.3e6, 17.0e6, 200_000)) is None
    # 999 completions in the first half: a p99 of ten samples, noise, not a trend.
    assert summary.unsettled_halves(_halves(17.3e6, 10e6, 1_998)) is None
    assert summary.unsettled_halves(_halves(17.3e6, 10e6, 2_000)) is not None
    # The rate: halves of 1.00 M and 1.03 M (+3 %) differ, 1.00 and 1.01 do not.
    assert summary.unsettled_halves(_halves(1.0, 1.0, 10, iops=1.015e6, first_iops=1e6)) is not None
    assert summary.unsettled_halves(_halves(1.0, 1.0, 10, iops=1.005e6, first_iops=1e6)) is None
    assert summary.unsettled_halves({"metrics": {}, "histograms": {}}) is None


def test_the_summary_says_what_a_nic_dropped_and_what_posted_msi_counts():
    m = {
        "nic.vf0.goodput_gbps": 3.0,
        "nic.vf1.goodput_gbps": 4.0,
        "nic.vf0.drop_share": 0.5,
        "nic.vf0.offered_pkts_per_s": 3e6,
        "nic.vf1.drop_share": 0.0,
        "nic.vf1.offered_pkts_per_s": 1e6,
        "interrupts_per_s": 5.07e6,
        "posted_msi.notifications_per_s": 2.47e6,
    }
    rows = {r.label: r for r in summary.summary_rows({"metrics": m, "histograms": {}})}
    # Dropped frames over offered ones, the VFs together: 1.5 M of 4 M.
    assert rows["dropped"].value == "37.5 % of offered frames (over 2)", rows["dropped"]
    assert rows["interrupts"].value == "5.07 M/s, of which 2.47 M/s posted-MSI notifications", rows["interrupts"]
    m.update({"nic.vf0.drop_share": 0.0})
    del m["posted_msi.notifications_per_s"]
    rows = {r.label: r for r in summary.summary_rows({"metrics": m, "histograms": {}})}
    assert "dropped" not in rows and rows["interrupts"].value == "5.07 M/s"


def test_human_units():
    assert summary.human_time(750) == "750 ns"
    assert summary.human_time(12_345) == "12.3 µs"
    assert summary.human_time(7_650_000) == "7.65 ms"
    assert summary.human_time(999.7) == "1.00 µs"
    assert summary.human_rate(1.25e6) == "1.25 M/s"
    assert summary.human_rate(13.9e6, "IOPS") == "13.9 M IOPS"
    assert summary.human_share(0.124894) == "12.5 %"
    assert summary.human(94.11, "Gbit/s") == "94.1 Gbit/s"


def test_a_histogram_without_samples_shows_dashes_not_zero_ns() -> None:
    """An empty histogram (no host interrupt in a Xen run) printed a row of "0 ns",
    which reads as a measurement."""
    hists = {
        "irq_latency": {"count": 0, "unit": "ns", "mean": 0.0, "p50": 0.0},
        "b": {"count": 2, "unit": "ns", "mean": 5.0, "p50": 4.0},
    }
    lines = summary._hist_lines(hists, ["count", "mean", "p50"], 100, "µ", "─")
    row = next(x for x in lines if x.strip().startswith("irq_latency")).split()
    assert row == ["irq_latency", "0", "—", "—"]
    assert "5.00 ns" in "\n".join(lines)
    ascii_row = next(x for x in summary._hist_lines(hists, ["count", "mean"], 100, "u", "-") if "irq_latency" in x)
    assert ascii_row.split() == ["irq_latency", "0", "-"]


def test_sweep_and_sensitivity_warn_of_short_runs_as_run_does():
    md1 = irqlab.SCENARIOS_DIR / "examples" / "md1-queue.toml"
    # md1-queue's warm-up is 10 ms: a 12 ms run measures 2 ms; grid points at 12 and 40 ms.
    p = run_cli("sweep", md1, "--grid", "duration=12ms,40ms", "-q")
    assert_ok(p)
    (w,) = warnings(p)
    assert w.startswith("warning: 1 of 2 grid points may not settle; the first: the measured window (2 ms)"), w
    assert "at duration=12ms" in w
    p = run_cli("sweep", md1, "--grid", "duration=30ms,40ms", "-q")
    assert_ok(p)
    assert warnings(p) == [], p.stderr
    p = run_cli("sensitivity", md1, "--set", "duration=12ms", "--param", "source.0.handler")
    assert_ok(p)
    assert len(warnings(p)) == 1 and "measured window (2 ms)" in warnings(p)[0], p.stderr
