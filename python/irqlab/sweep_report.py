"""`irqlab report`: a sweep's results (what `irqlab sweep --out` wrote: a
Parquet file, or a dataset directory of parts, see sweep_store.py) as one
self-contained HTML page. Per metric, a plot of the metric against the grid's
first key, a line per combination of the other keys; where a configuration ran
more than once (`--replications`, or a `--grid seed=...` axis) the line is the
mean and a band its 95 % confidence interval (Student t). Then a table of the
same numbers in their units."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from html import escape
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from . import _core
from ._util import UserError, one_line
from .cli.summary import column_unit, unit_of
from .plotting import COLORS, axis_in, img, number, page, table
from .sweep import BOOKKEEPING, mean_ci
from .sweep_store import MANIFEST, json_or_none, results_source

#: A per-instance metric (`cpu3.interrupts_per_s`, `nic.vf2.rx_gbps`): not a headline.
_INSTANCE = re.compile(r"(^|\.)[A-Za-z_-]*\d+\.")
#: More lines than this on one plot: the legend goes beside it, smaller.
MANY_LINES = 8


@dataclass
class Results:
    """A sweep's rows and what its files say about it."""

    path: Path
    table: pa.Table
    #: The grid's axes in order, as `--grid` gave them (a `seed` axis included).
    grid: list[tuple[str, list[str]]]
    definition: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, str] = field(default_factory=dict)
    #: Runs the sweep has in all (None: unknown), to tell an unfinished one.
    expected: int | None = None

    @property
    def keys(self) -> list[str]:
        """The grid keys that are columns (a seed axis is the `seed` column)."""
        return [k for k, _ in self.grid if k != "seed" and k in self.table.column_names]


def _read_file(p: Path) -> pa.Table:
    try:
        return pq.read_table(p)
    except (OSError, pa.ArrowException, ValueError) as e:
        raise UserError(f"{p}: cannot read it as Parquet ({one_line(str(e))})") from None


def read(path: Path) -> Results:
    """The rows of a sweep's `--out`: one NAME.parquet, or a dataset directory
    (that of a sweep still running or killed too: its parts so far)."""
    source, dataset = results_source(path)
    manifest: dict[str, Any] = {}
    if dataset:
        directory = Path(source).parent
        parts = sorted(directory.glob("part-*.parquet"))
        tables = [_read_file(p) for p in parts]
        # Parts' columns only grow with the part number: promote the older ones.
        try:
            t = pa.concat_tables(tables, promote_options="default")
        except (pa.ArrowException, ValueError) as e:
            raise UserError(f"{path}: its parts do not read as one table ({one_line(str(e))})") from None
        try:
            doc = json.loads((directory / MANIFEST).read_text(encoding="utf-8"))
            manifest = doc if isinstance(doc, dict) else {}
        except (OSError, ValueError):
            manifest = {}
        schema_meta = tables[-1].schema.metadata or {}
    else:
        t = _read_file(Path(source))
        schema_meta = t.schema.metadata or {}
    meta = {k.decode("utf-8", "replace"): v.decode("utf-8", "replace") for k, v in schema_meta.items()}
    if "point" not in t.column_names or "replication" not in t.column_names:
        raise UserError(f"{path}: not the results of an irqlab sweep (no `point` and `replication` columns)")
    definition = json_or_none(meta.get("irqlab.sweep")) or manifest.get("sweep") or {}
    grid = _grid(json_or_none(meta.get("irqlab.grid")) or definition.get("grid"), t)
    expected = manifest.get("points") if isinstance(manifest.get("points"), int) else None
    if expected is None and grid and isinstance(definition.get("replications"), int):
        expected = math.prod(len(v) for _, v in grid) * int(definition["replications"])
    return Results(
        path, t.sort_by([("point", "ascending"), ("replication", "ascending")]), grid, definition, meta, expected
    )


def _grid(raw: Any, t: pa.Table) -> list[tuple[str, list[str]]]:
    """The grid's axes as the sweep recorded them; failing that, the string
    columns before the bookkeeping ones, their values in row order."""
    if isinstance(raw, list) and all(isinstance(a, list) and len(a) == 2 for a in raw):
        return [(str(k), [str(v) for v in vals]) for k, vals in raw]
    axes = []
    for f in t.schema:
        if f.name in BOOKKEEPING:
            break
        if pa.types.is_string(f.type):
            axes.append((f.name, list(dict.fromkeys(str(v) for v in t.column(f.name).to_pylist()))))
    return axes


def numeric_columns(res: Results) -> list[str]:
    keys = {k for k, _ in res.grid}
    return [
        f.name
        for f in res.table.schema
        if f.name not in keys and f.name not in BOOKKEEPING and pa.types.is_floating(f.type)
    ]


def headline(columns: Sequence[str], table: pa.Table | None = None) -> list[str]:
    """The metrics a sweep is usually about, those the results have: IOPS,
    goodput, operations per second, the interrupt rate, latency p99s (aggregate
    ones, not per CPU); with `table`, not those that are 0 in every run (the
    interrupt rate of a syscall loop)."""
    agg = [c for c in columns if not _INSTANCE.search(c)]
    out = [c for c in agg if unit_of(c) == "IOPS"]
    out += [c for c in agg if c.endswith("goodput_gbps")]
    out += [c for c in agg if c == "ops_per_s"]
    out += [c for c in agg if c == "interrupts_per_s"]
    out += [c for c in agg if c.endswith(("latency.p99", "clat.p99"))]
    picked = list(dict.fromkeys(out))
    if table is not None:
        picked = [c for c in picked if any(v for v in table.column(c).to_pylist())]
    return picked


def pick_metrics(res: Results, wanted: Sequence[str] | None) -> list[str]:
    cols = numeric_columns(res)
    if not wanted:
        picked = headline(cols, res.table)
        if not picked:
            raise UserError(
                f"{res.path}: none of the headline metrics (IOPS, goodput, interrupts_per_s, latency p99) is "
                f"in the results; name one with --metric: {_known(cols)}"
            )
        return picked
    for m in wanted:
        if m not in cols:
            what = (
                "not a metric (a grid key or bookkeeping column)" if m in res.table.column_names else "no such column"
            )
            raise UserError(f"--metric {m}: {what} in {res.path}; known: {_known(cols)}")
    return list(dict.fromkeys(wanted))


def _known(cols: Sequence[str], limit: int = 25) -> str:
    """The aggregate columns (up to `limit`), and how many more there are of
    them and of the per-CPU / per-instance ones left out."""
    agg = [c for c in cols if not _INSTANCE.search(c)] or list(cols)
    shown = ", ".join(agg[:limit]) or "(none)"
    more = len(agg) - limit if len(agg) > limit else 0
    per = len(cols) - len(agg)
    tail = [f"{more} more"] if more else []
    tail += [f"{per} per-CPU or per-instance (cpuN.*, ...)"] if per else []
    return shown + (" and " + " and ".join(tail) if tail else "")


# -- the x axis ---------------------------------------------------------------


@dataclass
class Axis:
    """The first grid key as an x axis: numbers (in `unit`) or categories in grid order."""

    key: str
    values: list[str]
    positions: dict[str, float]
    unit: str = ""
    categorical: bool = False

    @property
    def log(self) -> bool:
        xs = [x for x in self.positions.values() if x > 0]
        return not self.categorical and len(xs) == len(self.positions) and max(xs) / min(xs) >= 100


def _unquote(v: str) -> str:
    return v[1:-1] if len(v) >= 2 and v[0] == v[-1] and v[0] in "\"'" else v


def x_axis(key: str, values: Sequence[str]) -> Axis:
    """Numbers if every value is one (1000000, 1.5e6), else times ("8us": in ns),
    else rates ("1M/s"); otherwise categories in the grid's order."""
    raw = [_unquote(v.strip()) for v in values]
    parsers: list[tuple[str, Any]] = [
        ("", float),
        ("ns", lambda s: _core.parse_time_ps(s) / 1e3),
        ("/s", _core.parse_rate),
    ]
    for unit, parse in parsers:
        try:
            pos = {v: float(parse(r)) for v, r in zip(values, raw)}
        except (ValueError, _core.ScenarioError):
            continue
        if all(math.isfinite(x) for x in pos.values()):
            return Axis(key, list(values), pos, unit or unit_of(key))
    return Axis(key, list(values), {v: float(i) for i, v in enumerate(values)}, categorical=True)


# -- lines --------------------------------------------------------------------


@dataclass
class Line:
    """One combination of the other grid keys: per x value, (x, mean, CI half-width, n)."""

    label: str
    points: list[tuple[str, float, float | None, int]]


#: Row indices per combination of the other grid keys, then per x value, both in grid order.
Groups = dict[tuple[str, ...], dict[str, list[int]]]


def group_rows(res: Results, axis: Axis) -> Groups:
    others = [k for k in res.keys if k != axis.key]
    cols = {k: [str(v) for v in res.table.column(k).to_pylist()] for k in res.keys}
    out: Groups = {}
    for i in range(res.table.num_rows):
        combo = tuple(cols[k][i] for k in others)
        out.setdefault(combo, {}).setdefault(cols[axis.key][i], []).append(i)
    for combo, per_x in out.items():
        out[combo] = dict(sorted(per_x.items(), key=lambda e: axis.positions.get(e[0], math.inf)))
    return out


def stat(values: Sequence[Any], rows: Sequence[int]) -> tuple[float, float | None, int] | None:
    """(mean, 95 % CI half-width or None, n) of a column's finite values on `rows`."""
    vals = [float(values[i]) for i in rows if isinstance(values[i], (int, float)) and math.isfinite(values[i])]
    if not vals:
        return None
    mean, half = mean_ci(vals)
    return mean, half, len(vals)


def lines(res: Results, axis: Axis, metric: str, groups: Groups) -> list[Line]:
    others = [k for k in res.keys if k != axis.key]
    values = res.table.column(metric).to_pylist()
    out = []
    for combo, per_x in groups.items():
        pts = []
        for x, rows in per_x.items():
            st = stat(values, rows)
            if st is not None:
                pts.append((x, *st))
        label = ", ".join(f"{k}={v}" for k, v in zip(others, combo)) or metric
        out.append(Line(label, pts))
    return out


def metric_plot(res: Results, axis: Axis, metric: str, ls: Sequence[Line]) -> str:
    unit = column_unit(metric)
    many = len(ls) > MANY_LINES
    fig = Figure(figsize=(8.5 if many else 7.0, 3.8))
    ax = fig.add_subplot()
    values = [p[1] for line in ls for p in line.points]
    scale = axis_in(ax, unit, values=values)
    xscale = 1e-9 if axis.unit == "ns" else 1.0
    for i, line in enumerate(ls):
        if not line.points:
            continue
        c = COLORS[i % len(COLORS)]
        style = "-" if i < len(COLORS) else "--"
        xs = [axis.positions[p[0]] * xscale for p in line.points]
        ys = [p[1] * scale for p in line.points]
        ax.plot(xs, ys, style, marker="o", markersize=4, color=c, label=line.label)
        if any(p[2] is not None for p in line.points):
            lo = [(p[1] - (p[2] or 0.0)) * scale for p in line.points]
            hi = [(p[1] + (p[2] or 0.0)) * scale for p in line.points]
            ax.fill_between(xs, lo, hi, color=c, alpha=0.18, linewidth=0)
    if axis.categorical:
        ax.set_xticks(list(axis.positions.values()), axis.values, rotation=20 if len(axis.values) > 4 else 0)
    else:
        if axis.log:
            ax.set_xscale("log")
        if axis.unit == "ns":
            ax.xaxis.set_major_formatter(EngFormatter(unit="s"))
        elif max((abs(x) for x in axis.positions.values()), default=0) >= 1e4:
            ax.xaxis.set_major_formatter(EngFormatter(unit="/s" if axis.unit == "/s" else ""))
    ax.set_xlabel(axis.key)
    ax.set_ylabel(f"{metric}" + (f" ({unit})" if unit and unit not in ("ns", "fraction") else ""))
    ax.set_title(f"{metric} against {axis.key}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if len(ls) > 1 or any(p[2] is not None for line in ls for p in line.points):
        if many:
            ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.01, 1.0))
        else:
            ax.legend(fontsize=7)
    return img(fig, f"{metric} against {axis.key}")


def _cell(mean: float, half: float | None, unit: str, n: int, runs: int) -> str:
    text = number(mean, unit) if half is None else f"{number(mean, unit)} &plusmn; {number(half, unit)}"
    # Over the runs that have a value: say how many where that is fewer than the row's.
    return text if n >= runs else f"{text} (n {n})"


def render(res: Results, metrics: Sequence[str]) -> str:
    """The whole page as a string."""
    if not res.keys:
        raise UserError(f"{res.path}: the sweep has no grid key to plot against (only seeds)")
    if res.table.num_rows == 0:
        raise UserError(f"{res.path}: no rows: no run of the sweep has ended yet")
    x = res.keys[0]
    axis = x_axis(x, next((v for k, v in res.grid if k == x), []) or _distinct(res, x))
    # Values the rows have that the recorded grid lacks (a file written by hand) go last.
    for v in _distinct(res, x):
        if v not in axis.positions:
            axis = x_axis(x, [*axis.values, v])
    name = res.meta.get("irqlab.scenario") or res.definition.get("scenario") or res.path.name
    reps = sorted(set(res.table.column("replication").to_pylist()))
    body = [f"<h1>irqlab sweep: {escape(str(name))}</h1>"]
    facts = [f"{res.table.num_rows} runs from <code>{escape(str(res.path))}</code>"]
    if res.expected is not None and res.expected > res.table.num_rows:
        facts.append(f"<strong>unfinished: {res.table.num_rows} of {res.expected} runs</strong>")
    if res.definition.get("scenario"):
        facts.append(f"scenario <code>{escape(str(res.definition['scenario']))}</code>")
    if res.definition.get("set"):
        facts.append("--set " + escape(" ".join(map(str, res.definition["set"]))))
    if res.meta.get("irqlab.version"):
        facts.append(f"irqlab {escape(res.meta['irqlab.version'])} ({escape(res.meta.get('irqlab.commit', '?')[:12])})")
    body.append(f'<p class="note">{" &middot; ".join(facts)}</p>')
    grid = "; ".join(f"<code>{escape(k)}</code> = {escape(', '.join(v))}" for k, v in res.grid)
    body.append(f'<p class="note">Grid: {grid}.</p>')
    replicated = len(reps) > 1 or any(k == "seed" for k, _ in res.grid)
    if replicated:
        body.append(
            '<p class="note">Each point is the mean over the runs of one configuration (its replications and '
            "seeds); the band and the &plusmn; are the 95 % confidence interval of that mean (Student t, "
            "n &minus; 1 degrees of freedom, n the runs that have a value: a cell says its own n where some "
            "runs have none, as a percentile of an empty histogram). A latency percentile is read from an HDR "
            "histogram that keeps 3 "
            "significant digits, so runs whose values fall in one bucket give the same percentile, and few "
            "replications can then show an interval narrower than the histogram's resolution (0.1 %).</p>"
        )
    body.append("<h2>Plots</h2>")
    body.append('<div class="plots">')
    groups = group_rows(res, axis)
    for m in metrics:
        body.append(metric_plot(res, axis, m, lines(res, axis, m, groups)))
    body.append("</div>")
    body.append("<h2>Table</h2>")
    others = [k for k in res.keys if k != x]
    heads = [*(escape(k) for k in others), escape(x), "n", *(f"<code>{escape(m)}</code>" for m in metrics)]
    columns = {m: res.table.column(m).to_pylist() for m in metrics}
    rows = []
    for combo, per_x in groups.items():
        for xv, idx in per_x.items():
            cells = [*(escape(c) for c in combo), escape(xv), str(len(idx))]
            for m in metrics:
                st = stat(columns[m], idx)
                cells.append("n/a" if st is None else _cell(st[0], st[1], column_unit(m), st[2], len(idx)))
            rows.append(cells)
    body.append(table(heads, rows, left=range(len(others) + 1), id_="results"))
    return page(f"irqlab sweep: {name}", body)


def _distinct(res: Results, key: str) -> list[str]:
    return list(dict.fromkeys(str(v) for v in res.table.column(key).to_pylist()))
