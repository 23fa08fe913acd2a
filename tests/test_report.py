"""`irqlab report`: a sweep's results as one HTML page (a plot per metric
against the first grid key, confidence bands with replications, a table), and
the number formatting every report shares."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from helpers import assert_ok, assert_user_error, run_cli
from irqlab.plotting import number

GRID = ["--grid", "source.0.rate=50k/s,100k/s,200k/s", "--grid", "cpu.irq_entry=200ns,1us"]


@pytest.fixture(scope="module")
def replicated(small: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A dataset directory: 3 x 2 grid points, 3 replications each."""
    out = tmp_path_factory.mktemp("sweep") / "results"
    assert_ok(run_cli("sweep", small, *GRID, "--replications", "3", "--out", out, "-q"))
    return out


@pytest.fixture(scope="module")
def single(small: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One NAME.parquet, one run per point, a time as the first key."""
    out = tmp_path_factory.mktemp("sweep") / "work.parquet"
    assert_ok(run_cli("sweep", small, "--grid", "task.0.work=1us,5us,20us", "--out", out, "-q"))
    return out


def pngs(page: str) -> dict[str, bytes]:
    found = re.findall(r'<img alt="([^"]*)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', page)
    return {alt: base64.b64decode(data) for alt, data in found}


def test_a_replicated_sweep_has_a_plot_per_headline_metric_with_bands(replicated: Path, tmp_path: Path) -> None:
    p = run_cli("report", replicated, "--out", tmp_path / "rep")
    assert_ok(p)
    page = (tmp_path / "rep" / "index.html").read_text()
    imgs = pngs(page)
    # small.toml's headline metrics: its task's operations per second, the
    # interrupt rate and the latency p99s.
    assert set(imgs) == {
        "ops_per_s against source.0.rate",
        "interrupts_per_s against source.0.rate",
        "irq_latency.p99 against source.0.rate",
        "op_latency.p99 against source.0.rate",
    }
    assert all(png.startswith(b"\x89PNG") for png in imgs.values())
    assert "95 % confidence interval" in page
    table = page[page.index('<table id="results">') :]
    rows = re.findall(r"<tr><td", table)
    assert len(rows) == 6  # a row per grid point, the replications folded into it
    assert table.count("<td>3</td>") == 6  # n = 3 each
    assert "&plusmn;" in table and " k/s" in table and "µs" in table
    assert not re.search(r'(src|href)="https?:', page)
    assert "4 plot(s) against source.0.rate" in p.stdout


def test_named_metrics_and_a_single_file_without_replications(single: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    assert_ok(run_cli("report", single, "--out", out, "--metric", "ops_per_s", "--metric", "op_latency.p99"))
    page = (out / "index.html").read_text()
    assert set(pngs(page)) == {"ops_per_s against task.0.work", "op_latency.p99 against task.0.work"}
    assert "confidence interval" not in page and "&plusmn;" not in page
    # A time as the grid key is read as one: the rows keep the grid's order.
    assert page.index(">1us<") < page.index(">5us<") < page.index(">20us<")


def test_an_unfinished_sweep_is_reported_as_such(replicated: Path, tmp_path: Path) -> None:
    # What a killed sweep leaves: its manifest, and a part with only some of the runs.
    import pyarrow as pa
    import pyarrow.parquet as pq

    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "_manifest.json").write_bytes((replicated / "_manifest.json").read_bytes())
    rows = pa.concat_tables([pq.read_table(p) for p in sorted(replicated.glob("part-*.parquet"))])
    pq.write_table(rows.slice(0, 7), partial / "part-000001.parquet")
    assert_ok(run_cli("report", partial, "--out", tmp_path / "rep"))
    assert "unfinished: 7 of 18 runs" in (tmp_path / "rep" / "index.html").read_text()


def test_bad_input_is_one_error_line(replicated: Path, tmp_path: Path) -> None:
    assert_user_error(run_cli("report", tmp_path / "nothing", "--out", tmp_path / "r"), "no such file")
    assert_user_error(
        run_cli("report", replicated, "--metric", "nosuch", "--out", tmp_path / "r"),
        "--metric nosuch",
        "interrupts_per_s",
    )
    assert_user_error(run_cli("report", replicated, "--metric", "cpu.irq_entry", "--out", tmp_path / "r"), "grid key")
    junk = tmp_path / "junk.parquet"
    junk.write_text("not parquet")
    assert_user_error(run_cli("report", junk, "--out", tmp_path / "r"), "Parquet")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize(
    "value,unit,text",
    [
        (3195656.0, "ops/s", "3.20 M ops/s"),
        (7650410.495, "ns", "7.65 ms"),
        (94.1081, "Gbit/s", "94.1 Gbit/s"),
        (13915333.3, "IOPS", "13.9 M IOPS"),
        (178.4015, "ns/call", "178 ns/call"),
        (14629.0, "per 10 s", "14,629 per 10 s"),
        (0.999291, "ratio", "0.999 ratio"),
        (0.1234, "fraction", "12.3 %"),
        (1598625.0, "1/s", "1.60 M/s"),
        (3.12453, "MHz", "3.12 MHz"),
        (None, "ns", "n/a"),
        (float("nan"), "ns", "n/a"),
        (100.0, "", "100"),
        (1.0601, "", "1.06"),
    ],
)
def test_numbers_read_as_people_write_them(value: float | None, unit: str, text: str) -> None:
    assert number(value, unit) == text


def test_a_ratio_figure_shows_both_runs_tails() -> None:
    """A figure that is a ratio (`relative_to`) hides whether either tail is
    plausible: the report lists each run's whole histogram."""
    from irqlab.report_mechanisms import relative_tails
    from irqlab.reproduce import FigureRun

    def res(p999: float) -> dict:
        return {"metrics": {}, "histograms": {"vblk.clat": {"count": 10, "p99.9": p999, "unit": "ns"}}}

    exp = {"name": "ratio", "metric": "vblk.clat.p99.9", "relative_to": ["x=false"]}
    on = FigureRun("f", "f.toml", "", {}, ["x=true"], [exp], result=res(590.0))
    off = FigureRun("f", "f.toml", "", {}, ["x=false"], [], result=res(1000.0))
    [t] = relative_tails([on, off])
    assert t["histogram"] == "vblk.clat"  # not "vblk.clat.p99" (the statistic has a dot)
    assert [(name, h["p99.9"]) for name, h in t["runs"]] == [("x=false", 1000.0), ("x=true", 590.0)]


def test_log_axes_label_small_shares_and_short_ranges() -> None:
    """A review: on a log axis 0.01 % and 0.1 % both read "0%", and a latency
    axis from 250 to 750 µs had no tick label at all."""
    from matplotlib.figure import Figure

    from irqlab.cli.summary import human
    from irqlab.plotting import _percent, log_ticks

    assert [_percent(x) for x in (0.0001, 0.001, 0.1, 1.05, 0.0)] == ["0.01%", "0.1%", "10%", "105%", "0%"]
    fig = Figure()
    ax = fig.add_subplot()
    ax.set_xscale("log")
    ax.plot([250e-6, 750e-6], [0, 1])
    log_ticks(ax, 250e-6, 750e-6)
    fig.canvas.draw()
    lo, hi = ax.get_xlim()
    shown = [t for t in ax.get_xticks() if lo <= t <= hi]
    assert len(shown) >= 2, shown
    assert human(155316.0, "ns/s") == "155,316 ns/s"


def test_an_unknown_metric_counts_every_column_it_leaves_out():
    from irqlab.sweep_report import _known

    cols = [f"m{i}" for i in range(27)] + ["cpu0.user_share", "cpu1.user_share", "nvme.ssd.q3.depth"]
    known = _known(cols)
    assert known.startswith("m0, m1, ") and "m24" in known and "m25" not in known
    assert known.endswith(" and 2 more and 3 per-CPU or per-instance (cpuN.*, ...)"), known
    assert _known(["a", "cpu0.x"]) == "a and 1 per-CPU or per-instance (cpuN.*, ...)"
    assert _known(["a", "b"]) == "a, b"


def test_names_with_dollars_and_brackets_are_drawn_as_text() -> None:
    """A `$` pair in a user's figure name was read as TeX: `$\\mathrm{x$` raised
    ValueError in the plot, after every run, and no report was written."""
    from irqlab.report import figure_plot, figure_table

    row = {
        "name": "cost $\\mathrm{x$ [fio] <b>",  # two `$`: math to matplotlib
        "kind": "prediction",
        "published": 2.0,
        "simulated": 2.1,
        "tolerance": 0.1,
        "unit": "ms",
        "within_tolerance": True,
    }
    assert figure_plot(row).startswith("<img")
    full = {**row, "metric": "m", "source": "s", "error": 0.05, "scenario": "my#fig", "overrides": []}
    html = figure_table([full], {"my#fig": ("trace-my#fig.pftrace", "my#fig")})
    assert "&lt;b&gt;" in html and 'href="trace-my%23fig.pftrace"' in html
    assert '<tr class="pass">' in html and "&plusmn;10%" in html
    # A prediction out of tolerance is a miss, coloured as one, not as a failed fit.
    missed = figure_table([{**full, "within_tolerance": False, "error": 0.5}], {})
    assert '<tr class="miss">' in missed and ">miss<" in missed


def test_a_study_plot_draws_a_time_in_its_unit(monkeypatch) -> None:
    """The axis scale `axis_in` returns was dropped: 5,000 ns read "5 ks"."""
    from irqlab import report

    figs = []
    monkeypatch.setattr(report, "img", lambda fig, alt: figs.append(fig) or "<img>")
    runs = [
        {"name": f"r{i}", "group": "g", "values": {"cpus": float(i), "gic.dirty_wait_mean_ns": 5000.0 * i}}
        for i in (1, 2)
    ]
    st = {"scenario": "s", "plot": {"x": "cpus", "y": "gic.dirty_wait_mean_ns"}, "runs": runs}
    report.study_plot(st)
    [fig] = figs
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_yticklabels() if t.get_text()]
    assert labels and all(t.endswith("s") and "ks" not in t for t in labels), labels
    assert any("µs" in t for t in labels), labels
    assert max(y for line in ax.get_lines() for y in line.get_ydata()) == 10000e-9


def test_a_published_bound_reads_alike_on_the_page_and_in_the_terminal() -> None:
    """ "≤ 500 ms" on the page, "0.25" in the terminal and "250 ms" in the plot's
    text, with an error of -60.5 % against a middle nobody published (a review)."""
    from rich.console import Console

    from irqlab.cli.reproduce import _table
    from irqlab.report import figure_plot, figure_table

    row = {
        "name": "host under 0.5 s",
        "kind": "prediction",
        "published": 0.25e9,
        "simulated": 0.099e9,
        "tolerance": 1.0,
        "unit": "ns",
        "within_tolerance": True,
        "metric": "m",
        "source": "s",
        "error": -0.605,
        "scenario": "f",
        "overrides": [],
        "relative_to": None,
    }
    page = figure_table([row], {})
    assert "&le; 500 ms" in page and "in range" in page and "60.5" not in page
    assert "published ≤ 500 ms" in figure_plot(row)
    console = Console(width=200, record=True)
    console.print(_table([row], Path("r")))
    text = console.export_text()
    assert "≤ 500" in text and "in range" in text and "60.5" not in text, text
