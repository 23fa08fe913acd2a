"""What `irqlab run` prints: a summary of the headline metrics in human units,
then the aggregate metrics and the histograms; per-CPU and per-source rows on
request (`--per-cpu`), everything with `--all`. Also its csv form and the check
that a run was long enough for its warm-up.

The headline metrics are picked by name, whatever the scenario: throughput
(`*.iops`, `*goodput_gbps`, or another `*_gbps`), `ops_per_s`,
`interrupts_per_s`, `vm_exits_per_s`, the CPU time shares, the latency
histograms (`*latency`, `*clat`: the throughput's own first), and the metrics
the scenario's `[[expect]]` entries and `[variants]` name.

Tables are plain text laid out for the console's width (a pipe: $COLUMNS, else
80) and never truncated: a table too wide for it is wrapped into groups of
columns, each repeating the first. Plain text also keeps a 2048-CPU table fast.
"""

from __future__ import annotations

import csv
import io
import math
import re
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._util import time_ns
from ..reproduce import lookup
from .render import fmt, note_flagged, out, print_header

INDENT = "  "
GAP = "  "
#: Histogram statistics: all of them (`--all`, csv) and the ones shown by default.
HIST_STATS = ["count", "mean", "min", "p50", "p90", "p99", "p99.9", "p99.99", "max"]
HIST_SHORT = ["count", "mean", "p50", "p99", "p99.99", "max"]
#: Percentiles of a latency in the summary.
SUMMARY_PCTS = ["p50", "p99", "p99.99"]
#: At most this many of the scenario's own figure and study metrics in the summary.
MAX_FIGURE_ROWS = 6
#: The short-run check (`short_run`): a measured window shorter than this share
#: of the warm-up, or fewer completions than this of the headline.
MIN_WINDOW_OF_WARMUP = 0.5
MIN_COMPLETIONS = 100
#: The halves rule: a headline throughput whose two halves of the measured
#: window differ by more than this share, or a headline p99 over the first half
#: that differs from the whole window's by more than `HALF_P99` (taken on at
#: least `HALF_MIN_COUNT` completions, so that sampling noise stays well under
#: it), was read on a transient. Settled runs of the bundled scenarios differ by
#: under 0.3 % on both.
HALF_RATE = 0.02
HALF_P99 = 0.05
HALF_MIN_COUNT = 1000

_CPU = re.compile(r"[vp]?cpu\d+")
_NUMBERED = re.compile(r"([A-Za-z_-]*?)(\d+)")
_TIME_UNITS = {"ps": 1e-3, "ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9}


# -- units -------------------------------------------------------------------


def unit_of(name: str) -> str:
    """A metric's unit, from its name: IOPS, Gbit/s, ns/s, /s, fraction (0…1),
    ns, us, s, MB, MHz; "" for a count or a plain number."""
    last = name.rsplit(".", 1)[-1]
    if last == "iops" or last.endswith("_iops"):
        return "IOPS"
    if last.endswith(("gbps", "gbit_per_s")):
        return "Gbit/s"
    if last.endswith("_ns_per_s"):
        return "ns/s"
    if last.endswith(("per_s", "per_s_per_task")):
        return "/s"
    if last.endswith(("_share", "_fraction", "utilisation", "utilization")) or "_share_of_" in last:
        return "fraction"
    if last.endswith(("_ns", "ns_per_op", "ns_per_call", "ns_per_fault")):
        return "ns"
    if last.endswith("_us"):
        return "us"
    if last.endswith("_s"):
        return "s"
    if last.endswith("_mb"):
        return "MB"
    if last.endswith("_mhz"):
        return "MHz"
    return ""


def column_unit(name: str) -> str:
    """`unit_of`, and ns for a histogram statistic (`.p99`, `.mean`, `.min`, ...):
    every histogram of the core is in ns. A histogram's `.count` is a count."""
    u = unit_of(name)
    if u == "" and any(name.endswith("." + s) for s in HIST_STATS if s != "count"):
        return "ns"
    return u


def sig3(x: float, trim: bool = False) -> str:
    """`x` to 3 significant digits, never in exponent form; `trim`: without
    trailing zeros (60 rather than 60.0)."""
    ax = abs(x)
    if ax == 0:
        return "0"
    if ax >= 99.95:
        return f"{x:.0f}"
    # Decimals from the rounded value: 0.9997 is 1.00, not 1.000.
    s = f"{x:.{max(0, 2 - math.floor(math.log10(abs(float(f'{x:.3g}')))))}f}"
    return s.rstrip("0").rstrip(".") if trim and "." in s else s


def _scaled(x: float, scales: Sequence[tuple[float, str]], trim: bool = False) -> tuple[str, str]:
    # The largest scale at which x is at least 1 once rounded (999.7 ns is 1.00 µs).
    for scale, name in reversed(scales):
        if abs(x) >= scale * 0.9995:
            return sig3(x / scale, trim), name
    return sig3(x / scales[0][0], trim), scales[0][1]


def human_time(ns: float, micro: str = "µ", trim: bool = False) -> str:
    """750 ns, 12.3 µs, 7.65 ms, 2.00 s (`trim`: 2 s)."""
    if ns == 0:
        return "0 ns"
    v, u = _scaled(ns, [(1.0, "ns"), (1e3, f"{micro}s"), (1e6, "ms"), (1e9, "s")], trim)
    return f"{v} {u}"


def human_rate(x: float, unit: str = "/s") -> str:
    """1.25 M/s, 978/s; 13.9 M IOPS, 299 IOPS."""
    v, p = _scaled(x, [(1.0, ""), (1e3, "k"), (1e6, "M"), (1e9, "G")])
    if unit == "/s":
        return f"{v} {p}/s" if p else f"{v}/s"
    return f"{v} {p} {unit}" if p else f"{v} {unit}"


def human_share(x: float) -> str:
    """A fraction as a percentage: 12.5 %, 0.27 %, 100 %."""
    return f"{sig3(100 * x)} %"


def human(v: Any, unit: str, micro: str = "µ") -> str:
    """A value in its unit as a person reads it (`unit` as `unit_of` gives it,
    or a histogram's)."""
    if v is None:
        return fmt(v)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return str(v)
    x = float(v)
    if not math.isfinite(x):
        return str(v)
    if unit in _TIME_UNITS:
        return human_time(x * _TIME_UNITS[unit], micro)
    if unit == "fraction":
        return human_share(x)
    if unit in ("/s", "IOPS"):
        return human_rate(x, unit)
    if unit == "Gbit/s":
        return f"{sig3(x)} Gbit/s" if abs(x) >= 1 or x == 0 else f"{sig3(x * 1e3)} Mbit/s"
    if unit in ("MB", "MHz", "ns/s"):
        return f"{x:,.0f} {unit}" if abs(x) >= 1000 else f"{sig3(x)} {unit}"
    return fmt(v)


# -- what a metric is about --------------------------------------------------


@dataclass
class Group:
    """Metrics (or histograms) of one kind of instance: `cpu3.idle_share` is
    instance 3 of group `cpu`, field `idle_share`; `nic.vf2.rx_gbps` is
    instance 2 of `nic.vf`; `source.nic.rx.interrupts_per_s` instance `nic.rx`
    of `source`."""

    label: str
    per_cpu: bool
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)  # instance -> field -> value


def _instance(name: str) -> tuple[str, str, str] | None:
    """(group label, instance, field) of a per-instance metric name, or None."""
    if name.startswith("source."):
        inst, _, fld = name[len("source.") :].rpartition(".")
        return ("source", inst, fld) if inst else None
    parts = name.split(".")
    for i, seg in enumerate(parts[:-1]):
        m = _NUMBERED.fullmatch(seg)
        if m:
            return ".".join([*parts[:i], m.group(1)]), m.group(2), ".".join(parts[i + 1 :])
    return None


@dataclass
class Split:
    """A result's metrics (and histograms) sorted into aggregate, per-CPU and per-source."""

    aggregate: dict[str, Any]
    per_cpu: dict[str, Any]
    per_source: dict[str, Any]
    groups: dict[str, Group]
    hists: dict[str, dict[str, Any]]
    instance_hists: dict[str, dict[str, Any]]


def split(result: dict[str, Any]) -> Split:
    """Per-CPU: `cpuN.*`, `vcpuN.*`, `pcpuN.*`. Per-source: `source.NAME.*`, and
    numbered instances of anything else when there are at least two of them
    (`nic.vf0.*` … `nic.vf9.*`; a lone `vm0.*` stays aggregate)."""
    metrics: dict[str, Any] = result.get("metrics", {})
    groups: dict[str, Group] = {}
    where: dict[str, tuple[str, str, str]] = {}
    for k in metrics:
        inst = _instance(k)
        if inst is None:
            continue
        where[k] = inst
        label, i, fld = inst
        g = groups.setdefault(label, Group(label, "." not in label and bool(_CPU.fullmatch(label + "0"))))
        g.rows.setdefault(i, {})[fld] = metrics[k]
    many = {label for label, g in groups.items() if g.per_cpu or label == "source" or len(g.rows) >= 2}
    groups = {label: g for label, g in groups.items() if label in many}
    agg, cpu, src = {}, {}, {}
    for k, v in metrics.items():
        inst = where.get(k)
        if inst is None or inst[0] not in groups:
            agg[k] = v
        elif groups[inst[0]].per_cpu:
            cpu[k] = v
        else:
            src[k] = v
    hists: dict[str, dict[str, Any]] = result.get("histograms", {})
    hist_groups: dict[str, set[str]] = {}
    for h in hists:
        inst = _instance(h)
        if inst is not None:
            hist_groups.setdefault(inst[0], set()).add(inst[1])
    shared = {h for h in hists if (inst := _instance(h)) is not None and len(hist_groups[inst[0]]) >= 2}
    return Split(
        agg,
        cpu,
        src,
        groups,
        {h: v for h, v in hists.items() if h not in shared},
        {h: v for h, v in hists.items() if h in shared},
    )


def _table_kind(columns: Sequence[str]) -> str:
    if not columns:
        return "other"
    if _CPU.fullmatch(columns[0] + "0") or "cpu" in columns:
        return "cpu"
    if columns[0] == "source":
        return "source"
    return "other"


# -- the summary -------------------------------------------------------------


@dataclass
class Row:
    label: str
    value: str
    key: str


def _family_key(name: str) -> str:
    """`nic.vf*.latency` for `nic.vf3.latency`: the name of its numbered instances together."""
    inst = _instance(name)
    return f"{inst[0]}*.{inst[2]}" if inst is not None and inst[0] != "source" else name


def _family(metrics: dict[str, Any], unit: str) -> list[tuple[str, float, int]]:
    """(shown key, value, members) per metric family in `unit` (not per-CPU):
    numbered instances (`nic.vf0.x` … `nic.vf9.x`) summed into one `nic.vf*.x`;
    a lone one keeps its name."""
    out: dict[str, list[tuple[str, float]]] = {}
    for k, v in metrics.items():
        if unit_of(k) == unit and not _CPU.fullmatch(k.split(".")[0]):
            out.setdefault(_family_key(k), []).append((k, float(v)))
    return [(k if len(vs) > 1 else vs[0][0], sum(v for _, v in vs), len(vs)) for k, vs in out.items()]


def _throughputs(metrics: dict[str, Any]) -> list[tuple[str, float, int, str]]:
    """(key, value, members, unit): IOPS, and per device goodput (else another Gbit/s rate)."""
    iops = [(k, v, n, "IOPS") for k, v, n in _family(metrics, "IOPS")]
    gbps = [(k, v, n, "Gbit/s") for k, v, n in _family(metrics, "Gbit/s")]
    goodput = {k.rsplit(".", 1)[0] for k, *_ in gbps if k.endswith("goodput_gbps")}
    gbps = [t for t in gbps if t[0].endswith("goodput_gbps") or t[0].rsplit(".", 1)[0] not in goodput]
    return iops + gbps


def _latency_hists(result: dict[str, Any], firsts: Sequence[str]) -> list[tuple[str, dict[str, Any], int]]:
    """(shown key, histogram, members) of the latency histograms with samples:
    those whose name starts with one of `firsts` first. A family of numbered
    instances is one row: its member with the highest p99."""
    hists: dict[str, dict[str, Any]] = result.get("histograms", {})
    fams: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for name, h in hists.items():
        if not name.endswith(("latency", "clat")) or not h.get("count"):
            continue
        fams.setdefault(_family_key(name), []).append((name, h))
    rows = []
    for key, members in fams.items():
        name, h = max(members, key=lambda m: float(m[1].get("p99") or 0))
        rows.append((name if len(members) == 1 else key, h, len(members)))

    def rank(r: tuple[str, dict[str, Any], int]) -> int:
        return next((i for i, f in enumerate(firsts) if r[0].startswith(f)), len(firsts))

    return sorted(rows, key=rank)


def _latency_value(h: dict[str, Any], micro: str) -> str:
    unit = str(h.get("unit", ""))
    return "  ".join(f"{p} {human(h.get(p), unit, micro)}" for p in SUMMARY_PCTS)


def _drop_shares(metrics: dict[str, Any]) -> list[tuple[str, float, int]]:
    """(shown key, share, members) per NIC family that dropped frames: the
    dropped share of what was offered, over its numbered instances together."""
    fams: dict[str, list[tuple[str, float, float]]] = {}
    for k, v in metrics.items():
        if k.startswith("nic.") and k.endswith(".drop_share"):
            offered = float(metrics.get(k[: -len("drop_share")] + "offered_pkts_per_s") or 0.0)
            fams.setdefault(_family_key(k), []).append((k, float(v), offered))
    out = []
    for key, vs in fams.items():
        offered = sum(o for *_, o in vs)
        share = sum(v * o for _, v, o in vs) / offered if offered else 0.0
        if share > 0:
            out.append((key if len(vs) > 1 else vs[0][0], share, len(vs)))
    return out


def summary_rows(result: dict[str, Any], micro: str = "µ") -> list[Row]:
    """The headline metrics, in human units, with the key each comes from."""
    m: dict[str, Any] = result.get("metrics", {})
    flagged = (result.get("provenance") or {}).get("flagged_metrics", {})
    rows: list[Row] = []
    shown: set[str] = set()

    def add(label: str, value: str, key: str, *keys: str) -> None:
        mark = " *" if any(k in flagged for k in (key, *keys)) else ""
        rows.append(Row(label, value, key + mark))
        shown.update((key, *keys))

    firsts = []
    for key, v, n, unit in _throughputs(m):
        value = human(v, unit, micro) + (f" (sum of {n})" if n > 1 else "")
        add("throughput", value, key)
        firsts.append(key.rsplit(".", 1)[0] + ".")
    # Beside a NIC's throughput, what it dropped: a collapsed run's short tail
    # reads as healthy when 79 % of the frames never reached a queue.
    for key, share, n in _drop_shares(m):
        add("dropped", human_share(share) + " of offered frames" + (f" (over {n})" if n > 1 else ""), key)
    if "ops_per_s" in m:
        add("ops/s", human_rate(float(m["ops_per_s"])), "ops_per_s")
        firsts.append("op_latency")
    if "interrupts_per_s" in m:
        value = human_rate(float(m["interrupts_per_s"]))
        # As /proc/interrupts counts them: each posted-MSI notification (the
        # PMN vector) and each device handler it runs. Said, or turning posted
        # MSI on reads as doubling the interrupts the CPUs take.
        if m.get("posted_msi.notifications_per_s"):
            value += f", of which {human_rate(float(m['posted_msi.notifications_per_s']))} posted-MSI notifications"
            shown.add("posted_msi.notifications_per_s")
        add("interrupts", value, "interrupts_per_s")
    if m.get("vm_exits_per_s"):
        add("VM exits", human_rate(float(m["vm_exits_per_s"])), "vm_exits_per_s")
    for key, label in (("hardirq_share", "hardirq share"), ("softirq_share", "softirq share")):
        if key in m and (m[key] or key == "hardirq_share"):
            add(label, human_share(float(m[key])), key)
    if "busy_share" in m:
        add("busy share", human_share(float(m["busy_share"])), "busy_share")
    hist_shown: set[str] = set()
    for key, h, n in _latency_hists(result, firsts):
        # irq latency, op latency; a device's: latency; a mechanism's by its own
        # name (vblk.clat: clat, hyp.wake_latency: wake latency; two read "latency").
        last = key.rsplit(".", 1)[-1]
        label = last.replace("_", " ") if last.endswith(("_latency", "clat")) else "latency"
        add(label, _latency_value(h, micro), key + (f" (worst p99 of {n})" if n > 1 else ""))
        hist_shown.update(f"{key}.{p}" for p in SUMMARY_PCTS)
    # The metrics the scenario's figures and studies are about.
    scen = (result.get("provenance") or {}).get("scenario") or {}
    named = [e.get("metric") for e in scen.get("expect", [])]
    named += list((scen.get("variants") or {}).get("metrics", []))
    extra = 0
    for key in named:
        if not isinstance(key, str) or key in shown or key in hist_shown:
            continue
        found = lookup(result, key)
        if found is None:
            continue
        if extra == MAX_FIGURE_ROWS:
            rows.append(Row("", "(more in metrics below)", ""))
            break
        hists = {} if key in m else result.get("histograms", {})
        hname, hist = next(((n, h) for n, h in hists.items() if key.startswith(n + ".")), ("", None))
        # Named by what it is (`nic.eth.drop_share` → "drop share", `vblk.clat.p99.9` →
        # "clat p99.9"); the key beside it says whose.
        if hist:
            label = hname.rsplit(".", 1)[-1] + " " + key[len(hname) + 1 :]
        else:
            label = key.rsplit(".", 1)[-1]
        add(label.replace("_", " "), human(found, str(hist.get("unit", "")) if hist else unit_of(key), micro), key)
        extra += 1
    return rows


def summary_title(result: dict[str, Any]) -> str:
    scen = (result.get("provenance") or {}).get("scenario") or {}
    sim_s = result.get("metrics", {}).get("sim_s")
    parts = []
    if isinstance(sim_s, (int, float)):
        measured = human_time(float(sim_s) * 1e9, trim=True)
        warm = _scenario_ns(scen, "warmup")
        warmup = human_time(warm, trim=True)
        parts.append(f"{measured} measured after a {warmup} warm-up" if warm else f"{measured} measured")
    cpus = (scen.get("platform") or {}).get("cpus")
    kvm = scen.get("kvm") or {}
    vcpus, vms = kvm.get("vcpus"), kvm.get("vms")
    if isinstance(vcpus, int):
        # M4's KVM model runs vCPUs (`vcpus` per VM), each on a host CPU of its own:
        # the platform's CPUs are not used.
        vms = vms if isinstance(vms, int) else 1
        n = vcpus * vms
        parts.append(f"{n} vCPU{'s' if n != 1 else ''}" + (f" in {vms} VMs" if vms > 1 else ""))
    elif isinstance(cpus, int):
        parts.append(f"{cpus} CPU{'s' if cpus != 1 else ''}")
    return "summary" + (": " + ", ".join(parts) if parts else "")


def _scenario_ns(scen: dict[str, Any], key: str) -> float:
    v = scen.get(key)
    if not isinstance(v, str):
        return 0.0
    try:
        return time_ns(v)
    except ValueError:
        return 0.0


# -- plain-text tables -------------------------------------------------------


def table_lines(
    title: str | None,
    headers: Sequence[str],
    rows: Sequence[Sequence[str]],
    right: Sequence[bool],
    width: int,
    rule: str = "─",
    lead: int = 1,
) -> list[str]:
    """A table of `rows` (strings) under `headers`; wider than `width`, it is
    wrapped into groups of columns, each starting with the first `lead` columns
    (what names a row: a sweep's grid keys). Nothing is cut: a single column
    wider than `width` stays as wide as it is."""
    n = len(headers)
    lead = max(1, min(lead, n))
    w = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            if len(c) > w[i]:
                w[i] = len(c)
    groups: list[list[int]] = []
    start = len(INDENT) + sum(w[:lead]) + len(GAP) * (lead - 1)
    cur, used = list(range(lead)), start
    for i in range(lead, n):
        if used + len(GAP) + w[i] > width and len(cur) > lead:
            groups.append(cur)
            cur, used = list(range(lead)), start
        cur.append(i)
        used += len(GAP) + w[i]
    groups.append(cur)
    lines = [title] if title else []
    for gi, cols in enumerate(groups):
        if gi:
            lines.append("")
        heads = (headers[i].rjust(w[i]) if right[i] else headers[i].ljust(w[i]) for i in cols)
        lines.append((INDENT + GAP.join(heads)).rstrip())
        lines.append((INDENT + GAP.join(rule * w[i] for i in cols)).rstrip())
        for r in rows:
            cells = (r[i].rjust(w[i]) if right[i] else r[i].ljust(w[i]) for i in cols)
            lines.append((INDENT + GAP.join(cells)).rstrip())
    return lines


def pairs_lines(pairs: Sequence[tuple[str, str]], width: int) -> list[str]:
    """`name value` rows, in two columns (down, then across) when they fit."""
    if not pairs:
        return []
    wn = max(len(k) for k, _ in pairs)
    wv = max(len(v) for _, v in pairs)
    cell = wn + len(GAP) + wv
    k = 2 if len(pairs) > 6 and len(INDENT) + 2 * cell + 4 <= width else 1
    nrows = -(-len(pairs) // k)
    lines = []
    for r in range(nrows):
        cells = [pairs[c * nrows + r] for c in range(k) if c * nrows + r < len(pairs)]
        lines.append((INDENT + "    ".join(f"{a.ljust(wn)}{GAP}{b.rjust(wv)}" for a, b in cells)).rstrip())
    return lines


def _cell(v: Any, unit: str, micro: str) -> str:
    if isinstance(v, float) and v.is_integer() and unit == "" and abs(v) < 1e15:
        return fmt(int(v))
    return human(v, unit, micro)


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def _result_table(name: str, table: dict[str, Any], width: int, micro: str, rule: str) -> list[str]:
    cols: list[str] = list(table.get("columns", []))
    rows = table.get("rows", [])
    units = [unit_of(c) for c in cols]
    cells = [[_cell(v, units[i], micro) for i, v in enumerate(r)] for r in rows]
    right = [all(isinstance(r[i], (int, float)) for r in rows) for i in range(len(cols))]
    return table_lines(f"{name} ({_rows(len(rows))})", cols, cells, right, width, rule)


def _group_table(g: Group, width: int, micro: str, rule: str) -> list[str]:
    fields: list[str] = []
    for row in g.rows.values():
        fields.extend(f for f in row if f not in fields)
    insts = sorted(g.rows, key=lambda i: (len(i), i) if i.isdigit() else (0, i))
    units = [unit_of(f) for f in fields]
    cells = [[i, *(_cell(g.rows[i].get(f, ""), u, micro) for f, u in zip(fields, units))] for i in insts]
    right = [all(i.isdigit() for i in insts), *(True for _ in fields)]
    title = f"{g.label}* ({_rows(len(insts))}, from the metrics {g.label}N.*)"
    if g.label == "source":
        title = f"source ({_rows(len(insts))}, from the metrics source.NAME.*)"
    return table_lines(title, [g.label, *fields], cells, right, width, rule)


def _hist_lines(hists: dict[str, dict[str, Any]], stats: Sequence[str], width: int, micro: str, rule: str) -> list[str]:
    rows = []
    for name, h in hists.items():
        unit = str(h.get("unit", ""))
        label = name if unit in _TIME_UNITS else f"{name} ({unit})" if unit else name
        if not h.get("count"):
            # No sample: a dash, not "0 ns" that reads as a measurement.
            dash = "—" if micro == "µ" else "-"  # an ASCII console gets "u" for µ, and "-"
            rows.append([label, *("0" if s == "count" else dash for s in stats)])
            continue
        rows.append([label, *(fmt(h.get(s)) if s == "count" else human(h.get(s), unit, micro) for s in stats)])
    return table_lines("histograms", ["histogram", *stats], rows, [False, *(True for _ in stats)], width, rule)


def render(result: dict[str, Any], width: int, detail: str = "summary", unicode: bool = True) -> str:
    """The text `irqlab run` prints below its header; `detail` is "summary"
    (the default), "per-cpu" or "all"."""
    micro, rule = ("µ", "─") if unicode else ("u", "-")
    prov = result.get("provenance") or {}
    flagged = prov.get("flagged_metrics", {})
    sp = split(result)
    everything = detail == "all"
    per_cpu = detail in ("per-cpu", "all")
    lines: list[str] = [summary_title(result)]
    srows = summary_rows(result, micro)
    if srows:
        lw = max(len(r.label) for r in srows)
        # Keys aligned after the widest value, unless that pushes a key past the
        # width: then after the widest value that does not (longer values, the
        # latencies, have their key right after them).
        lead = len(INDENT) + lw + len(GAP)
        widths = sorted({len(r.value) for r in srows}, reverse=True)
        vw = next(
            (v for v in widths if all(lead + v + len(GAP) + len(r.key) <= width for r in srows if len(r.value) <= v)),
            widths[-1],
        )
        for r in srows:
            line = f"{INDENT}{r.label.ljust(lw)}{GAP}{r.value.ljust(vw)}{GAP}{r.key}".rstrip()
            if len(line) > width and r.key:
                lines.append(f"{INDENT}{r.label.ljust(lw)}{GAP}{r.value}".rstrip())
                line = " " * (len(INDENT) + lw + len(GAP)) + r.key
            lines.append(line)
    shown = result.get("metrics", {}) if everything else sp.aggregate
    if shown:
        lines += ["", "metrics" + ("" if everything else " (aggregate)")]
        lines += pairs_lines([(k + (" *" if k in flagged else ""), fmt(v)) for k, v in shown.items()], width)
    hists = result.get("histograms", {}) if per_cpu else sp.hists
    if hists:
        lines += ["", *_hist_lines(hists, HIST_STATS if everything else HIST_SHORT, width, micro, rule)]
    tables: dict[str, dict[str, Any]] = result.get("tables", {})
    keyed = {t["columns"][0] for t in tables.values() if t.get("columns")}
    for name, t in tables.items():
        kind = _table_kind(t.get("columns", []))
        if t.get("rows") and (kind == "other" or per_cpu):
            lines += ["", *_result_table(name, t, width, micro, rule)]
    if per_cpu and not everything:
        # Per-instance metrics no table of the result carries (vcpuN.*, nic.vfN.*).
        for g in sp.groups.values():
            if g.label.rsplit(".", 1)[-1] not in keyed:
                lines += ["", *_group_table(g, width, micro, rule)]
    series = result.get("series", {})
    if series:
        lines += [
            "",
            *textwrap.wrap(
                f"series: {', '.join(series)} (in --json)",
                width,
                subsequent_indent=INDENT,
                break_long_words=False,
                break_on_hyphens=False,
            ),
        ]
    if not per_cpu:
        kinds = {_table_kind(t.get("columns", [])) for t in tables.values()}
        hidden = []
        if sp.per_cpu or "cpu" in kinds:
            hidden.append("per-CPU")
        if sp.per_source or sp.instance_hists or "source" in kinds:
            hidden.append("per-source")
        if hidden:
            lines.append(f"{' and '.join(hidden)} rows: --per-cpu; every metric and statistic: --all")
    return "\n".join(lines) + "\n"


# -- csv ---------------------------------------------------------------------


def csv_rows(result: dict[str, Any]) -> Iterable[tuple[str, Any, str]]:
    """(name, value, unit): every metric, then every histogram statistic as
    `HISTOGRAM.STAT` (the names `[[expect]]` uses)."""
    for k, v in result.get("metrics", {}).items():
        yield k, v, unit_of(k)
    for name, h in result.get("histograms", {}).items():
        for s in HIST_STATS:
            if s in h:
                yield f"{name}.{s}", h[s], "" if s == "count" else str(h.get("unit", ""))


def to_csv(result: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(["metric", "value", "unit"])
    for name, v, unit in csv_rows(result):
        w.writerow([name, repr(v) if isinstance(v, float) else v, unit])
    return buf.getvalue()


# -- was the run long enough -------------------------------------------------


def headline_histogram(result: dict[str, Any]) -> str | None:
    """The histogram whose count is the headline's completions: the first
    throughput's latency, else `op_latency` (tasks), else `irq_latency` when the
    scenario has interrupt sources."""
    m: dict[str, Any] = result.get("metrics", {})
    hists: dict[str, Any] = result.get("histograms", {})
    for key, *_ in _throughputs(m):
        prefix = key.rsplit(".", 1)[0] + "."
        for name in hists:
            if name.endswith(("latency", "clat")) and prefix in (name[: len(prefix)], _family_key(name)[: len(prefix)]):
                return name
    if "ops_per_s" in m and "op_latency" in hists:
        return "op_latency"
    if "irq_latency" in hists and (m.get("interrupts_per_s") or any(k.startswith("source.") for k in m)):
        return "irq_latency"
    return None


def measured_ns(scenario: dict[str, Any]) -> float:
    """The measured window of a resolved scenario: duration - warmup, in ns."""
    return _scenario_ns(scenario, "duration") - _scenario_ns(scenario, "warmup")


def short_window(scenario: dict[str, Any]) -> str | None:
    """`short_run`'s first rule, which needs no result (a sweep checks it per grid
    point before running): the measured window is shorter than half the warm-up."""
    warm, window = _scenario_ns(scenario, "warmup"), measured_ns(scenario)
    if warm > 0 and window < MIN_WINDOW_OF_WARMUP * warm:
        return (
            f"the measured window ({human_time(window, trim=True)}) is shorter than half the warm-up "
            f"({human_time(warm, trim=True)})"
        )
    return None


def short_run(result: dict[str, Any], scenario: dict[str, Any]) -> str | None:
    """Why a run with a warm-up was too short for it to settle, or None. Three
    rules: the measured window (duration - warmup) is shorter than half the
    warm-up (the scenario's own estimate of how long it takes to settle); the
    headline (`headline_histogram`) completed fewer than 100 times in it; or
    the two halves of the window disagree (`unsettled_halves`). A scenario
    without a warm-up is not checked."""
    warm = _scenario_ns(scenario, "warmup")
    if warm <= 0:
        return None
    if (why := short_window(scenario)) is not None:
        return f"{why}: the run may not have settled; lengthen duration"
    h = headline_histogram(result)
    if h is not None:
        n = int(result.get("histograms", {}).get(h, {}).get("count") or 0)
        if n < MIN_COMPLETIONS:
            return (
                f"only {n} completions in {h} after the {human_time(warm, trim=True)} warm-up (fewer than "
                f"{MIN_COMPLETIONS}): too few for its figures to settle; lengthen duration"
            )
    if (why := unsettled_halves(result)) is not None:
        return f"{why}: the run had not settled; lengthen warmup (and duration with it)"
    return None


def unsettled_halves(result: dict[str, Any]) -> str | None:
    """How the two halves of the measured window disagree, or None: each
    headline throughput's halves by more than `HALF_RATE` (the second half's
    rate is twice the whole's less the first's), or the headline p99 over the
    first half against the whole window's by more than `HALF_P99` (a tail
    still growing: the p99 of a window that has not settled reads low). The
    core reports the first half beside the whole (`first_half`)."""
    first = result.get("first_half")
    if not isinstance(first, dict):
        return None
    m, fm = result.get("metrics", {}), first.get("metrics", {})
    for key, _, n, unit in _throughputs(m):
        keys = [key] if n == 1 else [k for k in m if _family_key(k) == key]
        whole, a = sum(float(m[k]) for k in keys), sum(float(fm.get(k) or 0.0) for k in keys)
        if whole <= 0 or a <= 0:
            continue
        b = 2 * whole - a
        if abs(b / a - 1) > HALF_RATE:
            return (
                f"{key} was {human(a, unit)} in the first half of the measured window and {human(b, unit)} "
                f"in the second ({(b / a - 1) * 100:+.1f} %)"
            )
    h = headline_histogram(result)
    if h is None:
        return None
    whole_h, first_h = result.get("histograms", {}).get(h) or {}, (first.get("histograms") or {}).get(h) or {}
    p, p1 = float(whole_h.get("p99") or 0.0), float(first_h.get("p99") or 0.0)
    if int(first_h.get("count") or 0) >= HALF_MIN_COUNT and p > 0 and abs(p1 / p - 1) > HALF_P99:
        return (
            f"the p99 of {h} was {human_time(p1, trim=True)} over the first half of the measured window and "
            f"{human_time(p, trim=True)} over the whole ({(p1 / p - 1) * 100:+.1f} %)"
        )
    return None


def print_summary(result: dict[str, Any], variant: str | None = None, detail: str = "summary") -> None:
    """What `run` prints of a result (and `replay`, whose result has the same
    shape): its header, `render`'s tables at the terminal's width, and the
    footnote for the metrics marked `*`."""
    print_header(result, variant)
    unicode = (out.encoding or "").lower().startswith("utf")
    out.file.write(render(result, out.width, detail, unicode))
    out.file.flush()
    note_flagged(result.get("provenance") or {})
