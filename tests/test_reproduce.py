"""`irqlab reproduce` on figure scenarios made by the test: figures.json fields,
a self-contained HTML page, and exit 1 when a figure is out of tolerance."""

from __future__ import annotations

import base64
import json
import re

import pytest

import irqlab
from helpers import assert_ok, run_cli

FIELDS = {"name", "published", "simulated", "unit", "error", "tolerance", "within_tolerance", "source"}


def expect(metric: str, published: float, tolerance: float, name: str = "", unit: str = "") -> str:
    return (
        f'\n[[expect]]\nname = "{name}"\nmetric = "{metric}"\npublished = {published!r}\n'
        f'unit = "{unit}"\ntolerance = {tolerance}\nsource = "test: synthetic figure"\n'
    )


@pytest.fixture(scope="module")
def measured(small) -> float:
    result, _ = irqlab.run(small)
    return float(result["metrics"]["interrupts_per_s"])


@pytest.fixture
def figures(tmp_path, small, measured):
    """Two figure scenarios: one matches within 5 %, one cannot match."""
    d = tmp_path / "figures"
    d.mkdir()
    base = small.read_text()
    (d / "good.toml").write_text(base + expect("interrupts_per_s", measured * 1.02, 0.05, "good-rate", "1/s"))
    (d / "bad.toml").write_text(base + expect("interrupts_per_s", measured * 10, 0.01, "bad-rate", "1/s"))
    return d


def test_a_matching_figure_passes_with_a_full_report(figures, tmp_path, measured):
    out = tmp_path / "report"
    p = run_cli("reproduce", "--figures", figures, "--only", "good", "--out", out)
    assert_ok(p)
    doc = json.loads((out / "figures.json").read_text())
    assert list(doc) == ["figures"]
    [fig] = doc["figures"]
    assert set(fig) >= FIELDS
    assert fig["name"] == "good-rate" and fig["unit"] == "1/s"
    assert fig["simulated"] == pytest.approx(measured)
    assert fig["published"] == pytest.approx(measured * 1.02)
    assert fig["error"] == pytest.approx((measured - measured * 1.02) / (measured * 1.02))
    assert fig["within_tolerance"] is True and fig["tolerance"] == 0.05
    assert fig["source"] == "test: synthetic figure"

    page = (out / "index.html").read_text()
    assert "good-rate" in page and "<table" in page
    # Self-contained: plots are inline PNGs, nothing is fetched.
    imgs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) >= 2  # the figure plot and at least the error overview
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in imgs)
    assert not re.search(r'(src|href)="https?:', page)
    assert not list(out.glob(".*.tmp")), "temp files left behind"


def test_a_figure_out_of_tolerance_exits_1_and_is_reported(figures, tmp_path):
    out = tmp_path / "report"
    p = run_cli("reproduce", "--figures", figures, "--out", out)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    figs = {f["name"]: f for f in json.loads((out / "figures.json").read_text())["figures"]}
    assert set(figs) == {"good-rate", "bad-rate"}
    assert figs["good-rate"]["within_tolerance"] is True
    assert figs["bad-rate"]["within_tolerance"] is False
    assert figs["bad-rate"]["error"] == pytest.approx(-0.9)
    assert "FAIL" in p.stdout and "bad-rate" in (out / "index.html").read_text()


def test_no_figures_writes_an_empty_report_and_warns(tmp_path):
    empty = tmp_path / "none"
    empty.mkdir()
    out = tmp_path / "report"
    p = run_cli("reproduce", "--figures", empty, "--out", out)
    assert_ok(p)
    assert "warning" in p.stderr
    assert json.loads((out / "figures.json").read_text()) == {"figures": []}
    assert "No figures" in (out / "index.html").read_text()


def test_the_default_name_of_a_figure_is_the_scenario_name(tmp_path, small, measured):
    d = tmp_path / "figures"
    d.mkdir()
    (d / "f.toml").write_text(small.read_text() + expect("interrupts_per_s", measured, 0.5))
    out = tmp_path / "report"
    assert_ok(run_cli("reproduce", "--figures", d, "--out", out))
    [fig] = json.loads((out / "figures.json").read_text())["figures"]
    assert fig["name"] == "small"


def test_a_histogram_statistic_can_be_a_figure(tmp_path, small):
    result, _ = irqlab.run(small)
    p99 = result["histograms"]["irq_latency"]["p99.9"]
    d = tmp_path / "figures"
    d.mkdir()
    (d / "h.toml").write_text(small.read_text() + expect("irq_latency.p99.9", p99, 0.01, "tail", "ns"))
    out = tmp_path / "report"
    assert_ok(run_cli("reproduce", "--figures", d, "--out", out))
    [fig] = json.loads((out / "figures.json").read_text())["figures"]
    assert fig["simulated"] == p99 and fig["error"] == 0.0 and fig["metric"] == "irq_latency.p99.9"
