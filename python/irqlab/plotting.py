"""What the HTML reports share (`irqlab reproduce`'s and `irqlab report`'s):
every number in its unit as `irqlab run` prints it (`cli.summary.human`:
3.20 M ops/s, 7.65 ms, 94.1 Gbit/s), axes in the same units, matplotlib
figures inlined as base64 PNG, tables, and the page around them: one file,
nothing fetched."""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Collection, Sequence
from html import escape
from typing import Any

# The object-oriented API with no pyplot: no GUI backend and no current
# figure, so this is safe in CI and from threads.
import matplotlib
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter, FuncFormatter, LogLocator, NullFormatter

from .cli.summary import human, human_rate, sig3, unit_of

# Titles and legends carry names from users' scenarios: a `$` there is text,
# not TeX (a figure named `$\mathrm{x$` raised ValueError after every run had
# finished, and no report was written; a review). Read when a text is made, so
# set once here, before any report module draws: the one global setting.
matplotlib.rcParams["text.parse_math"] = False


COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]

CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1600px; color: #222; padding: 0 1em; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.88em; }
.wide { overflow-x: auto; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; vertical-align: top; }
th { background: #f0f0f0; }
td.l, th.l { text-align: left; }
td.src { min-width: 12em; max-width: 24em; color: #444; }
tr > td.l:first-child { min-width: 10em; }
tr.fail td { background: #fde8e8; }
tr.miss td { background: #fff4e0; }
tr.pass td.v { color: #1a7f37; font-weight: bold; }
tr.fail td.v { color: #c62828; font-weight: bold; }
tr.miss td.v { color: #b45309; font-weight: bold; }
.kind { display: inline-block; padding: 0 0.4em; border-radius: 0.3em; }
.kind.fit { background: #eee; color: #555; }
.kind.prediction { background: #dbeafe; color: #1e40af; }
.plots img { max-width: 100%; margin: 0.5em 0; border: 1px solid #eee; }
.note { color: #666; }
code { font-size: 0.95em; }
"""

_TIMES = ("ps", "ns", "us", "µs", "ms", "s")
_SECONDS = {"ps": 1e-12, "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}


# -- numbers -----------------------------------------------------------------


def _plain(x: float) -> str:
    """A number with no unit the page knows: 14,629; 0.999; 3.20 M."""
    if abs(x) >= 1e6:
        return human_rate(x, "").strip()
    if x.is_integer() or abs(x) >= 100:
        return f"{x:,.0f}"
    return sig3(x)


def value_text(x: Any, unit: str = "") -> str:
    """`x` in `unit` as a person reads it, plain text (for plot labels). `unit`
    is a metric's (`cli.summary.unit_of`: IOPS, Gbit/s, /s, ns, fraction...) or
    an `[[expect]]` entry's free text: `ns/call` is a time per call, `ops/s` a
    rate of ops, anything else follows the number."""
    if x is None or isinstance(x, bool) or not isinstance(x, (int, float)):
        return "n/a" if x is None else str(x)
    v = float(x)
    if not math.isfinite(v):
        return "n/a"
    u = unit.strip()
    if u == "1/s":
        u = "/s"
    if u in ("", "IOPS", "Gbit/s", "/s", "ns/s", "fraction", "MB", "MHz", *_TIMES):
        return human(v, u) if u else _plain(v)
    head, slash, tail = u.partition("/")
    if slash and head in _TIMES:  # ns/call: a time per something
        return f"{human(v, head)}/{tail}"
    if u.endswith("/s"):  # ops/s: a rate of something
        return human_rate(v, u)
    return f"{_plain(v)} {u}"


def number(x: Any, unit: str = "") -> str:
    """The reports' one number formatter, for HTML: `value_text`, escaped."""
    return escape(value_text(x, unit))


def metric_unit(metric: str, result: dict[str, Any] | None) -> str:
    """The unit of a value `lookup` finds: a metric's from its name, a histogram
    statistic's from its histogram (the count has none)."""
    if result is not None and metric not in result.get("metrics", {}):
        for name, h in result.get("histograms", {}).items():
            if metric.startswith(name + "."):
                return "" if metric.endswith(".count") else str(h.get("unit", ""))
    return unit_of(metric)


def axis_in(ax: Axes, unit: str, which: str = "y", values: Sequence[Any] = ()) -> float:
    """Format an axis for values in `unit`; returns the factor to multiply the
    values by first (times are plotted in seconds, with an SI prefix). Rates
    get an SI prefix (200 k) unless `values` stay below 1,000, a plain number
    only when they reach 10,000: never 500 m."""
    axis = ax.yaxis if which == "y" else ax.xaxis
    scale = 1.0
    finite = [abs(float(v)) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if unit in _SECONDS:
        scale = _SECONDS[unit]
        axis.set_major_formatter(EngFormatter(unit="s"))
    elif unit == "fraction":
        # Digits as the value needs them: on a log axis 0.01 % and 0.1 % both read "0%".
        axis.set_major_formatter(FuncFormatter(_percent))
    else:
        top = max(finite, default=math.inf)
        # Any rate (ops/s, IOPS): 2 M, not 2 with a "1e6" above the axis.
        rate = unit in ("IOPS", "ns/s") or (unit.endswith("/s") and not unit.startswith("Gbit"))
        if (rate and top >= 1e3) or (unit == "" and finite and top >= 1e4):
            axis.set_major_formatter(EngFormatter())
    return scale


def _percent(x: float, _pos: object = None) -> str:
    pct = x * 100
    if pct == 0 or abs(pct) >= 10:
        return f"{pct:.0f}%"
    return f"{pct:.2g}%"


def log_ticks(ax: Axes, lo: float, hi: float, which: str = "x") -> None:
    """Major ticks on a log axis that spans `lo`..`hi`: under a few decades the
    decades alone leave one tick, or none (a 250-750 µs latency had no label)."""
    axis = ax.xaxis if which == "x" else ax.yaxis
    if lo > 0 and hi / lo < 30:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 3.0, 5.0, 7.0)))
    elif lo > 0 and hi / lo < 1000:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_minor_formatter(NullFormatter())


# -- page pieces -------------------------------------------------------------


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    # Fixed metadata keeps the PNG bytes (and so the page) reproducible.
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight", metadata={"Software": None})
    return base64.b64encode(buf.getvalue()).decode("ascii")


def img(fig: Figure, alt: str) -> str:
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{_png(fig)}">'


def page(title: str, body: Sequence[str]) -> str:
    """A whole self-contained page: no script, no stylesheet or image fetched."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No favicon request either: an empty data: icon.
        '<link rel="icon" href="data:,">',
        f"<title>{escape(title)}</title>",
        f"<style>{CSS}</style></head><body>",
    ]
    return "\n".join([*head, *body, "</body></html>\n"])


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], left: Collection[int] = (0,), id_: str = "") -> str:
    """An HTML table of cells already escaped: text columns (`left`, by index)
    left-aligned, numbers right-aligned."""

    def cell(tag: str, i: int, v: str) -> str:
        return f'<{tag} class="l">{v}</{tag}>' if i in left else f"<{tag}>{v}</{tag}>"

    # Wide tables scroll on their own rather than push the page sideways.
    ident = f' id="{escape(id_)}"' if id_ else ""
    out = [f'<div class="wide"><table{ident}><tr>' + "".join(cell("th", i, h) for i, h in enumerate(headers)) + "</tr>"]
    out.extend("<tr>" + "".join(cell("td", i, v) for i, v in enumerate(r)) + "</tr>" for r in rows)
    out.append("</table></div>")
    return "\n".join(out)
