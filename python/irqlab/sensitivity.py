"""One-at-a-time sensitivity: run a scenario as given (the base), then once per
(parameter, factor) with that parameter scaled, and say how much each headline
metric moves. Used by `irqlab sensitivity` and by `irqlab reproduce`'s tornado
plots of the M5 figures.

A scaled value is handed to the core as one more `--set KEY=VALUE`, so it is
checked exactly like a value typed on the command line; nothing here knows the
scenario schema beyond "a number, or a number with a unit", except to show a
rate, which the core resolves to a bare number, with its "/s"."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from . import _core
from ._util import UserError, one_line
from .reproduce import FigureRun, known_values, lookup

DEFAULT_FACTORS = (0.5, 2.0)

# A number and a unit as scenarios write them: "325ns", "1.7375M", "1e6/s",
# "46cycles", "256M", "0". The unit is kept as written; the core judges it.
_QUANTITY = re.compile(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ/]*)\s*")

# Per-CPU copies of the totals: dozens of names that would bury the useful ones
# in a "known:" list.
_PER_CPU = re.compile(r"cpu\d+\.")


@dataclass
class Variation:
    """One scaled parameter: what the scenario had, what it gets, and the override saying so."""

    param: str
    factor: float
    original: Any
    value: Any

    @property
    def override(self) -> str:
        return f"{self.param}={toml_literal(self.value)}"


@dataclass
class Plan:
    """The base run and one run per variation, in the order they were asked for."""

    base: FigureRun
    variations: list[Variation]
    runs: list[FigureRun]


def parse_factors(specs: Sequence[str] | None) -> list[float]:
    """`--factor 0.5,2` (or repeated): positive finite numbers, duplicates dropped."""
    if not specs:
        return list(DEFAULT_FACTORS)
    out: list[float] = []
    for spec in specs:
        for raw in spec.split(","):
            try:
                f = float(raw)
            except ValueError:
                f = math.nan
            # Beyond a factor of 1000 either way a cost is no longer a "what if" of the
            # same machine, and its value would be printed with hundreds of digits.
            if not (math.isfinite(f) and 1e-3 <= f <= 1e3):
                raise UserError(f"--factor {raw.strip()!r}: expected a factor from 0.001 to 1000, like 0.5 or 2")
            if f not in out:
                out.append(f)
    return out


def check_params(params: Sequence[str] | None) -> list[str]:
    """The --param keys, each once, in the order given."""
    if not params:
        raise UserError("sensitivity needs at least one --param KEY, e.g. --param fabric.msi_write")
    for p in params:
        keys = split_key(p)
        if not keys:
            raise UserError(f"--param {p!r}: expected a key path, e.g. fabric.msi_write or nvme.0.per_cqe")
        if keys == ["seed"]:
            # Scaling a seed changes the random draws, not a parameter: the change it shows is noise.
            raise UserError("--param seed: the seed is not a parameter to scale; every run uses the same --seed")
        if keys[0] in NOT_INPUTS:
            # Their rows read +0.00 %, "insensitive", where nothing was varied (an audit).
            raise UserError(
                f"--param {p}: [{keys[0]}] is not a simulation input; "
                "expected a key of the model, e.g. fabric.msi_write"
            )
    # One row per key, however it is written (`source[0].rate` is `source.0.rate`).
    return list(dict.fromkeys(".".join(split_key(p)) for p in params))


#: Top-level keys that say what to check, show or record, not what to simulate.
NOT_INPUTS = frozenset({"name", "description", "expect", "variants", "cite", "trace", "stats"})


def split_key(key: str) -> list[str]:
    # The same reading as the core's overrides (`source[0].rate` = `source.0.rate`),
    # so a key found here is the key the override will set.
    return [k for k in key.strip().replace("[", ".").replace("]", "").split(".") if k]


def load(text: str, origin: str, overrides: Sequence[str]) -> dict[str, Any]:
    """The scenario as the core resolves it (overrides applied, defaults filled in)."""
    try:
        scen: dict[str, Any] = json.loads(_core.load(text, origin, list(overrides)))
    except _core.ScenarioError as e:
        raise UserError(one_line(str(e))) from None
    return scen


def current_value(scenario: dict[str, Any], key: str) -> Any:
    """The value at a dotted key path of a resolved scenario, or a UserError
    naming the first part of the path that is not there."""
    cur: Any = scenario
    done: list[str] = []
    for part in split_key(key):
        here = ".".join(done) or "the scenario"
        if isinstance(cur, dict):
            if part not in cur:
                raise UserError(f"--param {key}: {here} has no key {part!r}; it has: {', '.join(cur)}")
            cur = cur[part]
        elif isinstance(cur, list):
            if not part.isdigit():
                raise UserError(f"--param {key}: {here} is a list, expected an index instead of {part!r}")
            if int(part) >= len(cur):
                raise UserError(f"--param {key}: {here} has {len(cur)} entries, no index {part}")
            cur = cur[int(part)]
        else:
            raise UserError(f"--param {key}: {here} is a single value, not a table")
        if cur is None:
            # An optional section left out (no `[gsim]`): there is no value to scale.
            raise UserError(f"--param {key}: {'.'.join([*done, part])} is not set in this scenario (set it first)")
        done.append(part)
    return cur


def _round(x: float) -> float:
    # 12 significant digits: 325ns x 1.1 is 357.5ns, not 357.50000000000006ns.
    return float(f"{x:.12g}")


def _plain(x: float) -> str:
    """A number without an exponent: rates in scenarios ("1.5M") take none."""
    if x.is_integer() and abs(x) < 1e16:
        return str(int(x))
    return format(Decimal(repr(x)), "f")


def scale_value(value: Any, factor: float) -> int | float | str:
    """`value` times `factor`, written as `value` was: an integer stays an
    integer (rounded half up, and at least 1 if it was at least 1, so a count
    never becomes none), a float a float, and a string keeps its unit ("325ns"
    x 2 = "650ns", "1.7375M" x 2 = "3.475M"). ValueError for anything that is
    not a number: booleans, names, tables, lists."""
    if isinstance(value, bool):
        raise ValueError(f"{json.dumps(value)} is a boolean, not a number")
    if isinstance(value, int):
        n = math.floor(value * factor + 0.5)
        return max(n, 1) if value >= 1 else n
    if isinstance(value, float):
        return _round(value * factor)
    if isinstance(value, str):
        m = _QUANTITY.fullmatch(value)
        if m is None:
            raise ValueError(f"{json.dumps(value, ensure_ascii=False)} is not a number, a time, a rate or a size")
        return _plain(_round(float(m.group(1)) * factor)) + m.group(2)
    kind = "a table" if isinstance(value, dict) else "a list" if isinstance(value, list) else type(value).__name__
    raise ValueError(f"{kind}, not a number")


_PS_PER = {"ps": 1.0, "ns": 1e3, "us": 1e6, "µs": 1e6, "ms": 1e9, "s": 1e12}


@functools.cache
def _definitions() -> tuple[dict[str, Any], dict[str, Any]]:
    from . import schema

    doc = schema()
    return doc, doc.get("definitions") or doc.get("$defs") or {}


def is_rate(key: str) -> bool:
    """Whether scenario key `key` (`source.0.rate`, `nvme.0.iops`) is a `Rate`
    in the scenario schema, which the core resolves to a bare number of events
    per second."""
    node, defs = _definitions()
    for part in key.split("."):
        node, _ = _resolve(node, defs)
        if "properties" in node and part in node["properties"]:
            node = node["properties"][part]
        elif "items" in node and part.isdigit():
            node = node["items"]
        else:
            return False
    return "Rate" in _resolve(node, defs)[1]


def _resolve(node: dict[str, Any], defs: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """`node` with its references followed, and an optional's or a wrapper's
    (`allOf`/`anyOf` with one schema besides null) one schema taken; and the
    names of the definitions it went through."""
    names: list[str] = []
    for _ in range(16):
        if "$ref" in node:
            names.append(node["$ref"].rsplit("/", 1)[-1])
            node = defs.get(names[-1], {})
            continue
        subs = [n for n in node.get("allOf", node.get("anyOf", [])) if n.get("type") != "null"]
        if len(subs) == 1 and "properties" not in node and "items" not in node:
            node = subs[0]
            continue
        break
    return node, names


def _as_run(v: Any) -> float | None:
    """The number the core runs for a value: a time in whole picoseconds (its
    clock: "1.5ps" runs as 2 ps), anything else as written; None if not a number."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return float(v)
    if isinstance(v, str) and (m := _QUANTITY.fullmatch(v)) is not None:
        x, unit = float(m.group(1)), m.group(2)
        return float(math.floor(x * _PS_PER[unit] + 0.5)) if unit in _PS_PER else x
    return None


def run_factor(original: Any, value: Any) -> float | None:
    """The factor a scaled value really is of its original (a count rounds:
    25 x 0.5 runs 13, x 0.52; a time rounds to whole ps); None if either is
    not a number."""
    a, b = _as_run(original), _as_run(value)
    if a is None or b is None:
        return None
    return b / a if a else None


def shown(value: Any, key: str | None = None) -> str:
    """A parameter's value as a person reads it: the core writes a resolved
    time in whole ps ("39700ps"), shown here as 39.7 ns, and a rate as a bare
    number, shown with "/s" when its `key` is given; numbers with thousands
    separators; anything else as it is."""
    if key is not None and isinstance(value, (int, float)) and not isinstance(value, bool) and is_rate(key):
        return shown(value) + "/s"
    if isinstance(value, str):
        m = _QUANTITY.fullmatch(value)
        if m is not None and m.group(2) in _PS_PER:
            ps = float(m.group(1)) * _PS_PER[m.group(2)]
            # The largest unit it is at least 1 of, every digit kept (19.85 ns, not 19.9).
            unit = next((u for u in ("s", "ms", "µs", "ns") if ps >= _PS_PER[u]), "ps")
            return f"{ps / _PS_PER[unit]:.9g} {unit}"
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:,}" if isinstance(value, int) or value != int(value) else f"{int(value):,}"
    return str(value)


def toml_literal(value: int | float | str) -> str:
    """The override's right-hand side: a string quoted, so the core never reads
    "0" or "5e5" as a number where a unit was written; a float always with a point."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float):
        s = _plain(value)
        return s if "." in s else s + ".0"
    return str(value)


def variations(scenario: dict[str, Any], params: Sequence[str], factors: Sequence[float]) -> list[Variation]:
    """Every (param, factor), params outer: the table reads one parameter at a time."""
    out = []
    for p in params:
        v = current_value(scenario, p)
        for f in factors:
            try:
                new = scale_value(v, f)
            except ValueError as e:
                raise UserError(f"--param {p}: {e}; expected a numeric key like fabric.msi_write") from None
            # A 0 (a cost left at its default), or a count that rounds back: a row
            # of +0.00 % would read as "insensitive" where nothing was varied.
            ran = _as_run(new)
            if new == v or (ran is not None and ran == _as_run(v)):
                raise UserError(
                    f"--param {p}: {shown(v)} x {f:g} is {shown(new)} again, so its row would vary nothing; "
                    "expected a parameter whose value the factors change"
                )
            out.append(Variation(p, f, v, new))
    return out


def plan(base: FigureRun, params: Sequence[str], factors: Sequence[float], force: bool = False) -> Plan:
    """The runs of a sensitivity around `base`, each checked (schema and run
    budget) before any runs, so a bad value stops it before minutes of runs."""
    scen = load(base.text, base.origin, base.overrides)
    vs = variations(scen, params, factors)
    runs = []
    for v in vs:
        r = replace(base, overrides=[*base.overrides, v.override], expects=[], result=None, variant=None)
        try:
            _core.load(r.text, r.origin, r.overrides)
            if not force:
                _core.check_budget(r.text, r.origin, r.overrides)
        except _core.ScenarioError as e:
            # Named by the --param and factor: the core names it as a --set nobody typed.
            why = one_line(str(e)).removeprefix(f"{r.origin}: ").removeprefix(f"--set {v.override}: ")
            raise UserError(f"{r.origin}: --param {v.param} x {v.factor:g} = {v.value}: {why}") from None
        runs.append(r)
    return Plan(base, vs, runs)


def default_metrics(scenario: dict[str, Any], result: dict[str, Any]) -> list[str]:
    """What a run is about: the metrics its `[[expect]]` entries check, else
    device throughput, the interrupt rate and the hardirq share."""
    expected = [e["metric"] for e in scenario.get("expect", [])]
    found = [m for m in dict.fromkeys(expected) if lookup(result, m) is not None]
    if found:
        return found
    names = result.get("metrics", {})
    picked = [m for m in names if m.endswith((".iops", ".goodput_gbps"))]
    picked += [m for m in ("interrupts_per_s", "hardirq_share") if m in names]
    return picked


def check_metrics(metrics: Sequence[str], result: dict[str, Any], origin: str) -> list[str]:
    """`--metric` names the base run produced; a UserError listing the known ones otherwise."""
    for m in metrics:
        if lookup(result, m) is None:
            known = [k for k in known_values(result) if not _PER_CPU.match(k)]
            raise UserError(f"--metric {m}: not produced by {origin}; known: {', '.join(known)} (and per-CPU cpuN.*)")
    return list(dict.fromkeys(metrics))


def relative_change(value: float | None, base: float | None) -> float | None:
    """(value - base) / |base|; None where that means nothing (no value, a zero base)."""
    if value is None or base is None or base == 0:
        return None
    change = (value - base) / abs(base)
    return change if math.isfinite(change) else None


def _values(result: dict[str, Any] | None, metrics: Sequence[str]) -> dict[str, float | None]:
    assert result is not None, "summarised before it ran"
    out = {}
    for m in metrics:
        v = lookup(result, m)
        out[m] = v if v is not None and math.isfinite(v) else None
    return out


def summarise(p: Plan, metrics: Sequence[str]) -> dict[str, Any]:
    """{base: {values, metrics}, runs: [{param, factor, value, metrics, change}]}."""
    base = _values(p.base.result, metrics)
    rows = []
    for v, r in zip(p.variations, p.runs):
        vals = _values(r.result, metrics)
        change = {m: relative_change(vals[m], base[m]) for m in metrics}
        ran = run_factor(v.original, v.value)
        rows.append(
            {
                "param": v.param,
                "factor": v.factor,
                # What the value run is of the original, where rounding a count moved it.
                "ran_factor": v.factor if ran is None or math.isclose(ran, v.factor, rel_tol=1e-9) else ran,
                "value": v.value,
                "metrics": vals,
                "change": change,
            }
        )
    originals = {v.param: v.original for v in p.variations}
    return {"base": {"values": originals, "metrics": base}, "runs": rows}


def tornado(summary: dict[str, Any], metric: str) -> list[tuple[str, dict[float, float | None]]]:
    """Per parameter, the metric's change at each factor, the parameter that
    moves it most first (the widest bar of a tornado on top)."""
    per: dict[str, dict[float, float | None]] = {}
    for r in summary["runs"]:
        per.setdefault(r["param"], {})[r["factor"]] = r["change"][metric]

    def reach(item: tuple[str, dict[float, float | None]]) -> float:
        return max((abs(c) for c in item[1].values() if c is not None), default=0.0)

    # sorted() is stable: equal reach keeps the order the parameters were given in.
    return sorted(per.items(), key=reach, reverse=True)
