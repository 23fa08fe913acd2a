"""`irqlab reproduce` on figure scenarios made by the test: figures.json fields,
a self-contained HTML page, and exit 1 when a figure is out of tolerance."""

from __future__ import annotations

import base64
import json
import math
import re
from pathlib import Path

import pytest

import irqlab
from helpers import assert_ok, assert_user_error, run_cli

FIELDS = {
    "name",
    "kind",
    "fitted",
    "relative_to",
    "published",
    "simulated",
    "unit",
    "error",
    "tolerance",
    "within_tolerance",
    "source",
}


def expect(metric: str, published: float, tolerance: float, name: str = "", unit: str = "", extra: str = "") -> str:
    return (
        f'\n[[expect]]\nname = "{name}"\nmetric = "{metric}"\npublished = {published!r}\n'
        f'unit = "{unit}"\ntolerance = {tolerance}\nsource = "test: synthetic figure"\n'
        + (extra or 'kind = "prediction"\n')
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
    fit = 'kind = "fit"\nfitted = ["source.0.rate"]\n'
    (d / "badfit.toml").write_text(base + expect("interrupts_per_s", measured * 10, 0.01, "bad-fit", "1/s", fit))
    return d


def test_a_matching_figure_passes_with_a_full_report(figures, tmp_path, measured):
    out = tmp_path / "report"
    p = run_cli("reproduce", "--figures", figures, "--only", "good", "--out", out)
    assert_ok(p)
    doc = json.loads((out / "figures.json").read_text())
    assert list(doc) == ["figures", "counts", "studies", "sensitivity", "traces", "provenance"]
    assert doc["traces"] == ["trace-good.pftrace"] and (out / "trace-good.pftrace").exists()
    # A part of the figures says so, on the page and in the JSON (it read as the whole).
    assert doc["provenance"]["scope"] == f"--figures {figures}; --only good"
    assert doc["sensitivity"] == []  # only the M5 figures have a tornado plot
    assert doc["provenance"]["irqlab"] == irqlab.__version__ and doc["provenance"]["commit"]
    assert doc["counts"] == {"predictions": 1, "predictions_within_tolerance": 1, "fits": 0, "fits_reproduced": 0}
    [fig] = doc["figures"]
    assert set(fig) >= FIELDS
    assert fig["name"] == "good-rate" and fig["unit"] == "1/s"
    assert fig["simulated"] == pytest.approx(measured)
    assert fig["published"] == pytest.approx(measured * 1.02)
    assert fig["error"] == pytest.approx((measured - measured * 1.02) / (measured * 1.02))
    assert fig["within_tolerance"] is True and fig["tolerance"] == 0.05
    assert fig["source"] == "test: synthetic figure"
    assert fig["status"] == "pass"

    page = (out / "index.html").read_text()
    assert "good-rate" in page and "<table" in page
    assert "Part of the figures only:</strong> --figures" in page
    # Self-contained: plots are inline PNGs, nothing is fetched.
    imgs = re.findall(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    assert len(imgs) >= 2  # the figure plot and at least the error overview
    assert all(base64.b64decode(i).startswith(b"\x89PNG") for i in imgs)
    assert not re.search(r'(src|href)="https?:', page)
    assert not list(out.glob(".*.tmp")), "temp files left behind"


def test_a_fit_that_does_not_reproduce_exits_1_and_is_reported(figures, tmp_path):
    out = tmp_path / "report"
    p = run_cli("reproduce", "--figures", figures, "--out", out)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "Traceback" not in p.stderr
    figs = {f["name"]: f for f in json.loads((out / "figures.json").read_text())["figures"]}
    assert set(figs) == {"good-rate", "bad-rate", "bad-fit"}
    assert figs["good-rate"]["within_tolerance"] is True
    assert figs["bad-rate"]["within_tolerance"] is False and figs["bad-fit"]["within_tolerance"] is False
    assert figs["bad-rate"]["error"] == pytest.approx(-0.9)
    assert "FAIL" in p.stdout and "miss" in p.stdout
    page = (out / "index.html").read_text()
    assert "bad-rate" in page and "bad-fit" in page


def test_a_prediction_that_misses_is_a_result_unless_strict(figures, tmp_path):
    out = tmp_path / "report"
    p = run_cli("reproduce", "--figures", figures, "--only", "good", "--only", "bad", "--out", out)
    assert_ok(p)
    assert "miss" in p.stdout and "FAIL" not in p.stdout
    assert "1 of 2 predictions within tolerance; 0 of 0 fits reproduced" in p.stdout
    p = run_cli("reproduce", "--figures", figures, "--only", "good", "--only", "bad", "--out", out, "--strict")
    assert p.returncode == 1, p.stdout + p.stderr


def test_a_figure_name_with_brackets_and_dollars_is_text_everywhere(tmp_path, small, measured):
    """`[/fio]` in a name raised rich's MarkupError after the report was written
    (exit 1, as a failed fit), `[fio]` vanished, and `$...$` in a plot title was TeX."""
    d = tmp_path / "figs [x]"
    d.mkdir()
    name = "rate [/fio] [fio] $\\mathrm{x$"
    toml_name = name.replace("\\", "\\\\")  # a TOML string escapes its backslash
    (d / "f.toml").write_text(small.read_text() + expect("interrupts_per_s", measured, 0.05, toml_name, "1/s"))
    out = tmp_path / "out [y]"
    p = run_cli("reproduce", "--figures", d, "--out", out)
    assert_ok(p)
    assert name in p.stdout and "[y]" in p.stdout, p.stdout
    assert json.loads((out / "figures.json").read_text())["figures"][0]["name"] == name


def test_no_figures_writes_an_empty_report_and_warns(tmp_path, small):
    # Scenarios with no [[expect]] entries: nothing to compare, an empty report.
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "s.toml").write_text(small.read_text())
    out = tmp_path / "report"
    p = run_cli("reproduce", "--figures", plain, "--out", out)
    assert_ok(p)
    assert "warning" in p.stderr
    empty = {"predictions": 0, "predictions_within_tolerance": 0, "fits": 0, "fits_reproduced": 0}
    doc = json.loads((out / "figures.json").read_text())
    assert doc["figures"] == [] and doc["counts"] == empty and doc["provenance"]["irqlab"] == irqlab.__version__
    assert "No figures" in (out / "index.html").read_text()
    # A directory with no scenario at all is a wrong path, not an empty result:
    # it went green with an empty report (an audit).
    none = tmp_path / "none"
    none.mkdir()
    assert_user_error(run_cli("reproduce", "--figures", none, "--out", tmp_path / "r2"), "no figure scenarios")
    assert not (tmp_path / "r2").exists()


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
    # The published value is in the histogram's own unit: one that names
    # another (17 meant as ms) is refused, not compared a million times off.
    (d / "h.toml").write_text(small.read_text() + expect("irq_latency.p99.9", p99 / 1e6, 0.01, "tail", "ms"))
    p = run_cli("reproduce", "--figures", d, "--out", tmp_path / "report2")
    assert_user_error(p, "expect[0].unit", "`ms`", "irq_latency", "in ns")


@pytest.mark.parametrize(
    "extra,needles",
    [
        ("", ["expect[0]", "kind"]),
        ('kind = "fit"\n', ["expect[0].fitted", "names the parameters"]),
        ('kind = "prediction"\nfitted = ["fabric.msi_write"]\n', ["expect[0].fitted", "nothing fitted"]),
        ('kind = "fit"\nfitted = ["fabric.nosuch"]\n', ["expect[0].fitted[0]", "fabric.nosuch"]),
        ('kind = "fit"\nfitted = ["source.5.rate"]\n', ["expect[0].fitted[0]", "source.5.rate"]),
        ('kind = "fit"\nfitted = ["cpu.pmr"]\n', ["expect[0].fitted[0]", "a section"]),
        ('kind = "guess"\n', ["expect[0].kind", "guess"]),
    ],
)
def test_a_figure_says_whether_it_is_a_fit(small, tmp_path, extra: str, needles: list[str]) -> None:
    f = tmp_path / "f.toml"
    f.write_text(small.read_text() + expect("interrupts_per_s", 1.0, 0.1, "x", extra=extra or "\n"))
    assert_user_error(run_cli("validate", f), *needles)


def test_a_fit_names_parameters_that_exist(small, tmp_path) -> None:
    f = tmp_path / "f.toml"
    f.write_text(
        small.read_text()
        + expect(
            "interrupts_per_s", 1.0, 0.1, "x", extra='kind = "fit"\nfitted = ["source.0.rate", "fabric.msi_write"]\n'
        )
    )
    assert_ok(run_cli("validate", f))


def test_a_relative_figure_is_checked_as_a_ratio(small, tmp_path, measured) -> None:
    # Doubling every source's rate doubles the interrupt rate: the figure is the ratio.
    d = tmp_path / "figs"
    d.mkdir()
    rates = irqlab.load(small)["source"]
    doubled = [f"source.{i}.rate={2 * float(s['rate'])}" for i, s in enumerate(rates)]
    extra = 'kind = "prediction"\nset = [' + ", ".join(f'"{x}"' for x in doubled) + "]\nrelative_to = []\n"
    (d / "r.toml").write_text(small.read_text() + expect("interrupts_per_s", 2.0, 0.15, "doubled", extra=extra))
    out = tmp_path / "report"
    p = run_cli("reproduce", "--figures", d, "--out", out)
    assert_ok(p)
    [fig] = json.loads((out / "figures.json").read_text())["figures"]
    assert fig["relative_to"] == [] and fig["kind"] == "prediction"
    assert 1.7 < fig["simulated"] < 2.3 and fig["within_tolerance"]
    assert "ratio" in p.stdout  # the published value's unit: "2 ratio"
    assert "1 of 1 predictions within tolerance; 0 of 0 fits reproduced" in p.stdout


def test_bundled_figures_count_predictions_apart_from_fits(bundled_report) -> None:
    p, out = bundled_report
    assert_ok(p)
    doc = json.loads((out / "figures.json").read_text())
    c = doc["counts"]
    # 13 figures reproduce a value fitted on them (or copied from them, or following
    # from one: M2's pin/unpin cycle and effective clock), 9 are predictions.
    assert (c["fits"], c["predictions"]) == (13, 9), c
    assert c["fits_reproduced"] == 13
    # sched_yield under pseudo-NMI misses by about +5.7 % with the PMR accesses
    # counted from the kernel (docs/m1-masking-and-nmi.md); M3's p99.9 ratio shows
    # no effect of direct injection against the published 41 % (docs/m3-...); M5's
    # no-moderation IOPS and p99 (settled) miss (docs/m5-global-interrupt-
    # moderation.md; the NIC's static coalescing holds since each frame's CQE and
    # each interrupt's EQE hold the path); the others hold.
    missed = sorted(f["name"] for f in doc["figures"] if not f["within_tolerance"])
    assert missed == [
        "8 SSDs, no moderation",
        "8 SSDs, no moderation, p99 latency",
        "M3: p99.9 with direct LPIs, relative to without",
        "sched_yield pmr",
    ], missed
    assert all(f["fitted"] for f in doc["figures"] if f["kind"] == "fit")
    assert (
        "5 of 9 predictions within tolerance (1 of them within a published range or bound, ±50% or wider); "
        "13 of 13 fits reproduced"
    ) in " ".join(p.stdout.split())
    page = (out / "index.html").read_text()
    assert "fit: fabric.msi_write, fabric.dma_write" in page
    assert f"(commit {doc['provenance']['commit']})" in page  # a page pasted alone says what made it
    # What a series' point is, and that GSIM's own timer is among the interrupts (a review).
    assert "over one sample interval" in page and "interrupts (devices and GSIM's timer)" in page
    # The studies (runs without a published figure) are in the report and the JSON.
    studies = {s["scenario"]: s for s in doc["studies"]}
    assert {"m3-xen-fio", "m3-scheduling", "m2-policies"} <= set(studies)
    # M2's policy comparison is a plot: elapsed time against buffer size, a line per policy.
    assert studies["m2-policies"]["plot"]["x"] == "spe.requested_mb"
    assert 'alt="m2-policies: spe.elapsed_s against spe.requested_mb"' in page
    runs = {r["name"]: r["values"] for r in studies["m3-scheduling"]["runs"]}
    assert len(runs) == 22 and all(v["vblk.iops"] > 0 for v in runs.values())
    assert "<h2>Studies</h2>" in page and "4 vCPU/pCPU, adaptive" in page


def test_the_fitted_parameters_page_lists_every_fit() -> None:
    import tomllib

    page = (Path(__file__).resolve().parents[1] / "docs" / "fitted-parameters.md").read_text()
    rows = [line for line in page.splitlines() if line.startswith("| `")]
    fits = 0
    for f in sorted((irqlab.SCENARIOS_DIR / "figures").glob("*.toml")):
        for e in tomllib.loads(f.read_text()).get("expect", []):
            if e["kind"] != "fit":
                continue
            fits += 1
            for param in e["fitted"]:
                # A row names the parameter, and the figure among those it was fitted on.
                assert any(f"`{param}`" in r and e["name"] in r.split("|")[3] for r in rows), (f.name, e["name"], param)
    assert f"**{fits} fits," in page


def test_the_bundled_report_has_each_mechanism_s_plots_and_a_trace_per_figure(bundled_report) -> None:
    from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import Trace

    from irqlab.reproduce import TRACE_MAX_EVENTS

    p, out = bundled_report
    assert_ok(p)
    page = (out / "index.html").read_text()
    alts = set(re.findall(r'<img alt="([^"]*)"', page))
    for alt in (
        "M1: pseudo-NMI tax against exception density",
        "M4: cancelled VM-enters by cause, per request order",
        "m5-nvme-8ssd: GSIM against its target interrupt rate",
        "m5-nic-100g: variants side by side",
        "m5-nic-100g: nic.eth.latency percentiles per variant",
        "m3-scheduling: variants side by side",
        "m3-xen-fio: variants side by side",
        "m2-workloads: variants side by side",
        "m2-policies: spe.elapsed_s against spe.requested_mb",
    ):
        assert alt in alts, (alt, sorted(alts))
    # Every study has a plot: its [variants.plot], or its variants side by side.
    for s in json.loads((out / "figures.json").read_text())["studies"]:
        assert any(a.startswith(s["scenario"] + ":") for a in alts), s["scenario"]
    # Numbers as people read them, in the figure table and the GSIM target table.
    figures = page[page.index('<table id="figures">') : page.index("</table>", page.index('<table id="figures">'))]
    # (Shapes, not values: a model change must not break a formatting test.)
    for shape in (r">\d+\.\d Gbit/s<", r">\d\.\d\d M ops/s<", r">\d+\.\d\d ms<"):
        assert re.search(shape, figures), shape
    assert not re.search(r"\de[+-]\d", figures), "a number in exponent form"
    assert ">1.25 M/s</td>" in page and ">13.9 M IOPS</td>" in page
    # A trace per figure, linked, bounded, and readable with Perfetto's protos.
    stems = sorted(f.stem for f in (irqlab.SCENARIOS_DIR / "figures").glob("*.toml"))
    for stem in stems:
        assert f'href="trace-{stem}.pftrace"' in page
        assert (out / f"trace-{stem}.pftrace").stat().st_size > 0
    assert "ui.perfetto.dev" in page
    t = Trace()
    t.ParseFromString((out / "trace-m5-nic-100g.pftrace").read_bytes())
    events = sum(1 for pk in t.packet if pk.HasField("track_event"))
    # At most the cap, slice ends of recorded slices aside (so at most twice it).
    assert 0 < events <= 2 * TRACE_MAX_EVENTS


def test_a_report_over_an_earlier_one_keeps_no_trace_of_a_figure_it_lacks(figures, tmp_path):
    """A second report into the same --out left the first one's trace of a
    figure it did not run beside its own page, linked from nothing (a review)."""
    out = tmp_path / "report"
    assert_ok(run_cli("reproduce", "--figures", figures, "--only", "good", "--only", "bad", "--out", out))
    assert (out / "trace-bad.pftrace").exists()
    # Not the report's: it lists its own traces, and only those go (`--out .` took a user's).
    (out / "trace-mine.pftrace").write_bytes(b"the user's own")
    assert_ok(run_cli("reproduce", "--figures", figures, "--only", "good", "--out", out))
    assert sorted(p.name for p in out.glob("trace-*.pftrace")) == ["trace-good.pftrace", "trace-mine.pftrace"]


def test_figures_that_name_a_file_say_it_is_not_a_directory(small):
    assert_user_error(run_cli("reproduce", "--figures", small), "not a directory", "directory of figure scenarios")


def test_a_metric_produced_without_a_value_is_produced_not_a_crash() -> None:
    # A 100 µs probe of M2 leaves its command unfinished, so `spe.effective_mhz`
    # is null; the probe asks only that the metric exists (it raised TypeError).
    from irqlab.reproduce import lookup

    v = lookup({"metrics": {"spe.effective_mhz": None}}, "spe.effective_mhz")
    assert v is not None and math.isnan(v)
    assert lookup({"metrics": {}}, "spe.effective_mhz") is None
