"""Published-figure reproductions: run every figure scenario and compare each
`[[expect]]` entry with the simulated metric."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import _core
from ._util import UserError, duration_s, one_line, read_scenario

if TYPE_CHECKING:
    from .sensitivity import Plan


@dataclass
class FigureRun:
    """One simulation of a figure file: the file with one variant's overrides
    (an `[[expect]]` entry's `set`), and the expectations read from it."""

    stem: str
    origin: str
    text: str
    scenario: dict[str, Any]
    overrides: list[str]
    expects: list[dict[str, Any]]
    result: dict[str, Any] | None = None
    # A `[[variants.run]]` of a study: its name (no expectations are read from it).
    variant: str | None = None
    # None: the scenario's own seed (figures); `irqlab sensitivity --seed` gives one.
    seed: int | None = None
    # Run with a Perfetto trace (`trace_runs`), kept here once it ran (None: it
    # was not asked for, or the core made none).
    traced: bool = False
    trace: bytes | None = None

    @property
    def label(self) -> str:
        if self.variant is not None:
            return f"{self.stem}: {self.variant}"
        return f"{self.stem} [{', '.join(self.overrides)}]" if self.overrides else self.stem


def figure_files(figdir: Path, only: Sequence[str] | None) -> list[Path]:
    """The figure scenarios to run, sorted by name, filtered by `--only` stems."""
    if figdir.exists() and not figdir.is_dir():
        raise UserError(f"{figdir}: not a directory, expected a directory of figure scenarios")
    if not figdir.is_dir():
        raise UserError(f"{figdir}: no such directory of figure scenarios")
    files = sorted(figdir.glob("*.toml"))
    if not files and not only:
        # A wrong directory named in CI went green with an empty report (an audit).
        raise UserError(f"{figdir}: no figure scenarios (*.toml) in it, expected a directory of figure scenarios")
    if not only:
        return files
    known = {f.stem: f for f in files}
    unknown = [n for n in only if n not in known]
    if unknown:
        names = ", ".join(known) if known else "(none)"
        raise UserError(f"--only {unknown[0]}: no such figure in {figdir}; known: {names}")
    return [known[n] for n in dict.fromkeys(only)]


def prepare(files: list[Path], extra: Sequence[str] = ()) -> list[FigureRun]:
    """Read and validate every figure (and every variant) before running any.
    `extra` are a user's `--set`s (`validate`), applied after each entry's own, as
    `run --variant` applies them."""
    runs = []
    extra = list(extra)
    for f in files:
        text, origin = read_scenario(f)
        try:
            scen = json.loads(_core.load(text, origin, extra))
            variants: dict[tuple[str, ...], list[dict[str, Any]]] = {}
            for exp in scen.get("expect", []):
                variants.setdefault(tuple(exp.get("set", [])), []).append(exp)
            # A relative figure needs the run it is relative to, expectations or not.
            for exp in scen.get("expect", []):
                if exp.get("relative_to") is not None:
                    variants.setdefault(tuple(exp["relative_to"]), [])
            study = scen.get("variants")
            if not variants and not study:
                variants[()] = []
            # Each entry's overrides apply, named by their entry (the core names a bad one
            # as a `--set` the user never typed).
            for i, exp in enumerate(scen.get("expect", [])):
                for field in ("set", "relative_to"):
                    if exp.get(field) is not None:
                        try:
                            _core.load(text, origin, [*exp[field], *extra])
                        except _core.ScenarioError as e:
                            why = one_line(str(e)).removeprefix(f"{origin}: ").removeprefix("--set ")
                            raise UserError(f"{origin}: expect[{i}].{field} ({exp.get('name')}): {why}") from None
            for sets, expects in variants.items():
                runs.append(FigureRun(f.stem, origin, text, scen, [*sets, *extra], expects))
            for i, v in enumerate(study["run"] if study else []):
                try:
                    _core.load(text, origin, [*v["set"], *extra])
                except _core.ScenarioError as e:
                    why = one_line(str(e)).removeprefix(f"{origin}: ").removeprefix("--set ")
                    raise UserError(f"{origin}: variants.run[{i}] ({v['name']}): {why}") from None
                runs.append(FigureRun(f.stem, origin, text, scen, [*v["set"], *extra], [], variant=v["name"]))
        except _core.ScenarioError as e:
            raise UserError(one_line(str(e))) from None
    return runs


def variant_overrides(path: Path, name: str) -> list[str]:
    """The overrides of the run `prepare` makes of `path` for the variant called
    `name`: a `[[variants.run]]` of that name, else the run of the `[[expect]]`
    entry of that name (its `set`). A name the file does not have is a
    UserError naming the ones it has."""
    runs = prepare([path])
    for r in runs:
        if r.variant == name:
            return list(r.overrides)
    for r in runs:
        if r.variant is None and any(e.get("name") == name for e in r.expects):
            return list(r.overrides)
    variants = [f'"{r.variant}"' for r in runs if r.variant is not None]
    expects = [f'"{e["name"]}"' for r in runs if r.variant is None for e in r.expects if e.get("name")]
    known = "; ".join(
        f"{kind}: {', '.join(names)}" for kind, names in (("variants", variants), ("expectations", expects)) if names
    )
    raise UserError(f"--variant {name!r}: no such variant in {path}; " + (known or "it has no [[variants.run]]"))


#: A figure's trace holds at most this many events (fewer if its file says so):
#: some 6 MB, which the Perfetto UI opens at once.
TRACE_MAX_EVENTS = 200_000


def trace_runs(runs: Sequence[FigureRun]) -> list[FigureRun]:
    """Mark one run per figure file to be traced: its base run (the file as is,
    else its first run, a study's first variant) and return them."""
    picked: dict[str, FigureRun] = {}
    for r in runs:
        best = picked.get(r.stem)
        if best is None or (not r.overrides and r.variant is None and (best.overrides or best.variant is not None)):
            picked[r.stem] = r
    for r in picked.values():
        r.traced = True
    return list(picked.values())


def trace_limit(run: FigureRun) -> int:
    """The events a traced run keeps: the file's `trace.max_events`, at most `TRACE_MAX_EVENTS`."""
    own = (run.scenario.get("trace") or {}).get("max_events")
    return min(own, TRACE_MAX_EVENTS) if isinstance(own, int) else TRACE_MAX_EVENTS


def execute(runs: list[FigureRun], workers: int, advance: Callable[[], None], force: bool = False) -> None:
    """Run every run on a thread pool (the core releases the GIL), storing each
    result (and trace, for a run marked `traced`) on its run: completion order
    cannot change what a run holds. A trace changes no result: the core
    records it beside the simulation. `force`: past the run budget too."""
    stop = _core.StopFlag()

    def one(r: FigureRun) -> tuple[dict[str, Any], bytes | None]:
        trace = None
        if r.traced:
            try:
                sets = [*r.overrides, f"trace.max_events={trace_limit(r)}"]
                raw, trace = _core.run(r.text, r.origin, sets, r.seed, True, stop, force)
            except _core.ScenarioError:
                # A trace past the run's memory budget: the run without one (the report lists none).
                raw, _ = _core.run(r.text, r.origin, r.overrides, r.seed, False, stop, force)
        else:
            raw, _ = _core.run(r.text, r.origin, r.overrides, r.seed, False, stop, force)
        result: dict[str, Any] = json.loads(raw)
        return result, trace

    with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
        futs = {ex.submit(one, r): r for r in runs}
        try:
            for f in as_completed(futs):
                futs[f].result, futs[f].trace = f.result()
                advance()
        except (KeyboardInterrupt, SystemExit):
            # SystemExit: SIGTERM (cli.main). Without the flag and the cancel,
            # leaving the pool would wait for every queued run to finish.
            stop.set()
            ex.shutdown(wait=True, cancel_futures=True)
            raise
        except _core.ScenarioError as e:
            ex.shutdown(wait=True, cancel_futures=True)
            raise UserError(one_line(str(e))) from None


def _finite(x: float) -> float | None:
    # NaN/inf are not JSON; a non-finite value can never be within tolerance.
    return x if math.isfinite(x) else None


def _statistic(result: dict[str, Any], metric: str) -> tuple[str, dict[str, Any], str] | None:
    """The histogram, its name and the statistic that `HISTOGRAM.STAT` names."""
    for name, hist in result.get("histograms", {}).items():
        stat = metric[len(name) + 1 :]
        if metric.startswith(name + ".") and stat != "unit" and isinstance(hist.get(stat), (int, float)):
            return name, hist, stat
    return None


def lookup(result: dict[str, Any], metric: str) -> float | None:
    """A metric by name, or a histogram statistic as `HISTOGRAM.STAT`
    (`irq_latency.mean`, `irq_latency.p99.9`); None if there is no such value."""
    metrics = result.get("metrics", {})
    if metric in metrics:
        # A metric the run produces without a value (null in JSON: e.g. an
        # unfinished command's `spe.effective_mhz`) is produced all the same.
        v = metrics[metric]
        return math.nan if v is None else float(v)
    found = _statistic(result, metric)
    return float(found[1][found[2]]) if found else None


def known_values(result: dict[str, Any]) -> list[str]:
    hist = [f"{h}.STAT" for h in result.get("histograms", {})]
    return sorted(result.get("metrics", {})) + sorted(hist)


def check(run: FigureRun, runs: Sequence[FigureRun] = ()) -> list[dict[str, Any]]:
    """Compare each expectation of a run with its simulated metric; a relative
    one (`relative_to`) with the ratio to the same metric of the other variant
    (found among `runs`)."""
    assert run.result is not None
    rows = []
    for exp in run.expects:
        i, sim = _expected_value(run, exp)
        metric = exp["metric"]
        relative_to = exp.get("relative_to")
        if relative_to is not None:
            other = next((r for r in runs if r.stem == run.stem and r.overrides == list(relative_to)), None)
            if other is None or other.result is None:
                raise UserError(f"{run.origin}: expect[{i}].relative_to: the variant {relative_to} was not run")
            base = _value(other, metric, i)
            sim = sim / base if base != 0 else math.inf
        pub = float(exp["published"])
        tol = float(exp["tolerance"])
        # Relative error, except against a published zero where only an
        # absolute difference means anything; the tolerance is then absolute.
        err = (sim - pub) / abs(pub) if pub != 0 else sim - pub
        ok = math.isfinite(err) and abs(err) <= tol
        rows.append(
            {
                "name": exp.get("name") or f"{run.stem}.{metric}",
                "kind": exp["kind"],
                "fitted": list(exp.get("fitted", [])),
                "relative_to": relative_to,
                "published": pub,
                "simulated": _finite(sim),
                "unit": exp.get("unit", ""),
                "error": _finite(err),
                "tolerance": tol,
                "within_tolerance": ok,
                "source": exp.get("source", ""),
                "scenario": run.stem,
                "overrides": run.overrides,
                "metric": metric,
                "doc": exp.get("doc"),
            }
        )
    return rows


def _expected_value(run: FigureRun, exp: dict[str, Any]) -> tuple[int, float]:
    """Expectation `exp`'s index in its file and its metric's value in `run`,
    checked against the unit it gives (a relative one's is a ratio)."""
    i = run.scenario["expect"].index(exp)
    v = _value(run, exp["metric"], i)
    if exp.get("relative_to") is None:
        _check_unit(run, exp["metric"], exp, i)
    return i, v


def _value(run: FigureRun, metric: str, i: int) -> float:
    assert run.result is not None
    v = lookup(run.result, metric)
    if v is None:
        known = ", ".join(known_values(run.result)) or "(none)"
        raise UserError(
            f"{run.origin}: expect[{i}].metric: `{metric}` is not produced by this scenario; known: {known}"
        )
    return v


def _check_unit(run: FigureRun, metric: str, exp: dict[str, Any], i: int) -> None:
    """`published` is in the metric's own unit, which `unit` only names: a
    histogram statistic's unit is known (`ns`), so an expectation that names
    another (`ms`, with a published 17 meant as 17 ms) would be compared a
    million times off. Plain metrics carry no unit to check against."""
    assert run.result is not None
    given, found = exp.get("unit"), _statistic(run.result, metric)
    if metric in run.result.get("metrics", {}) or found is None:
        return
    name, hist, stat = found
    if given and stat != "count" and hist.get("unit") and given != hist["unit"]:
        raise UserError(
            f"{run.origin}: expect[{i}].unit: `{given}`, but `{name}` is in {hist['unit']}: "
            f'expected unit = "{hist["unit"]}" and `published` in {hist["unit"]}'
        )


def studies(runs: Sequence[FigureRun]) -> list[dict[str, Any]]:
    """The studies' results (runs without expectations): per scenario, its
    variants and the metrics its `[variants]` lists."""
    out: dict[str, dict[str, Any]] = {}
    for r in runs:
        if r.variant is None:
            continue
        assert r.result is not None
        metrics = r.scenario["variants"]["metrics"]
        plot = r.scenario["variants"].get("plot")
        study = out.setdefault(r.stem, {"scenario": r.stem, "metrics": metrics, "plot": plot, "runs": []})
        values = {m: _finite(_study_value(r, m)) for m in metrics}
        group = next((v.get("group") for v in r.scenario["variants"]["run"] if v["name"] == r.variant), None)
        study["runs"].append({"name": r.variant, "group": group, "overrides": r.overrides, "values": values})
    return list(out.values())


def _study_value(run: FigureRun, metric: str) -> float:
    assert run.result is not None
    v = lookup(run.result, metric)
    if v is None:
        known = ", ".join(known_values(run.result)) or "(none)"
        raise UserError(f"{run.origin}: variants.metrics: `{metric}` is not produced by this scenario; known: {known}")
    return v


# Long enough for every metric to appear (a task's `ns_per_op` needs an
# operation done), short enough to cost nothing beside building the machine.
#: How long a probe runs, at most (in ps): 100 µs.
PROBE_PS = 100_000_000


def probe(runs: Sequence[FigureRun]) -> None:
    """Before any long run, each run's scenario (its overrides kept) runs for
    100 µs of simulated time (or its own duration, if shorter), and every metric its expectations compare and its
    study lists must be among those it produces, in the units they give: a
    misspelt metric then fails at once, not after minutes of simulation
    (`validate` and `reproduce` ask). A scenario that refuses so short a window
    (an event it places later) is checked once it has run, as before."""
    stop = _core.StopFlag()
    for r in runs:
        if not r.expects and r.variant is None:
            continue  # nothing to compare: no need to run it
        try:
            # No longer than the run itself: that is within the run budget (checked
            # unless --force), where a --set that shortened a flood made the 100 µs
            # probe the longest part (40 s to validate a 1 µs run; a review).
            ps = min(round(duration_s(r.text, r.origin, r.overrides) * 1e12), PROBE_PS)
            probe_sets = [f'duration="{ps}ps"', 'warmup="0s"']
            raw, _ = _core.run(r.text, r.origin, [*r.overrides, *probe_sets], r.seed, False, stop, True)
        except _core.ScenarioError:
            continue
        p = replace(r, result=json.loads(raw))
        for exp in r.expects:
            _expected_value(p, exp)
        if r.variant is not None:
            for m in r.scenario["variants"]["metrics"]:
                _study_value(p, m)


def counts(rows: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Predictions within tolerance (what confirms the model) apart from fits
    reproduced (what only shows a fitted value was fitted)."""
    pred = [r for r in rows if r["kind"] == "prediction"]
    fits = [r for r in rows if r["kind"] == "fit"]
    return {
        "predictions": len(pred),
        "predictions_within_tolerance": sum(r["within_tolerance"] for r in pred),
        "fits": len(fits),
        "fits_reproduced": sum(r["within_tolerance"] for r in fits),
    }


def verdict(row: dict[str, Any]) -> str:
    """pass; a fit that does not reproduce FAILs; a prediction out of tolerance is a miss."""
    if row["within_tolerance"]:
        return "pass"
    return "FAIL" if row["kind"] == "fit" else "miss"


#: A tolerance this wide stands for a published range or bound ("under 0.5 s",
#: "a few MHz"), not a number: such a pass says less, and the summary says so.
LOOSE = 0.5


def published_range(row: dict[str, Any]) -> tuple[float, float] | None:
    """The range a loose figure stands for (a published range or bound, its
    tolerance `LOOSE` or wider): (low, high), low 0 for a bound; None for a
    figure read as a value. The page, the terminal and the plots show it alike."""
    pub, tol = row["published"], row["tolerance"]
    if tol < LOOSE or not (pub > 0 and math.isfinite(pub)):
        return None
    return max(pub * (1 - tol), 0.0), pub * (1 + tol)


def summary(rows: Sequence[dict[str, Any]]) -> str:
    c = counts(rows)
    loose = sum(r["within_tolerance"] and r["kind"] != "fit" and r["tolerance"] >= LOOSE for r in rows)
    note = f" ({loose} of them within a published range or bound, ±{LOOSE:.0%} or wider)" if loose else ""
    return (
        f"{c['predictions_within_tolerance']} of {c['predictions']} predictions within tolerance{note}; "
        f"{c['fits_reproduced']} of {c['fits']} fits reproduced"
    )


#: The M5 figures' tornado plots: per figure, the parameters `reproduce` halves
#: and doubles, one at a time. They are the fitted fabric costs and the assumed
#: CPU costs on the interrupt path: the inputs a reader of the figure would ask
#: "and if that were off by 2x?" about. Kept here rather than in the figure
#: files because the scenario schema belongs to the Rust core.
SENSITIVITY: dict[str, tuple[str, ...]] = {
    "m5-nvme-8ssd": (
        "fabric.msi_write",
        "fabric.dma_write",
        "fabric.latency",
        "nvme.0.dma_credits",
        "nvme.0.handle_cqe",
        "nvme.0.per_cqe",
        "nvme.0.handler",
        "cpu.irq_entry",
    ),
    "m5-nic-100g": (
        "fabric.msi_write",
        "fabric.dma_per_kib",
        "fabric.latency",
        "nic.0.posted_credits",
        "nic.0.per_packet",
        "nic.0.handler",
        "cpu.irq_entry",
    ),
}
SENSITIVITY_FACTORS = (0.5, 2.0)


def sensitivity_plans(runs: Sequence[FigureRun]) -> list[Plan]:
    """A plan per M5 figure among `runs` (none for a figure `--only` left out),
    around the run of the file as is: the figures' own when they have it, so
    it is not run twice."""
    from . import sensitivity as sens  # it imports this module

    plans = []
    for stem, params in SENSITIVITY.items():
        mine = [r for r in runs if r.stem == stem]
        if not mine:
            continue
        base = next((r for r in mine if not r.overrides and r.variant is None), None)
        if base is None:
            base = replace(mine[0], overrides=[], expects=[], result=None, variant=None)
        try:
            plans.append(sens.plan(base, params, SENSITIVITY_FACTORS))
        except UserError as e:
            raise UserError(f"{base.origin}: the sensitivity of {stem}: {e}") from None
    return plans


def sensitivity_runs(plans: Sequence[Plan], runs: Sequence[FigureRun]) -> list[FigureRun]:
    """The runs the plans add to the figures' (a base too, where no figure runs it)."""
    out: list[FigureRun] = []
    for p in plans:
        if not any(r is p.base for r in runs):
            out.append(p.base)
        out.extend(p.runs)
    return out


def sensitivities(plans: Sequence[Plan]) -> list[dict[str, Any]]:
    """Per M5 figure: its headline metric (the first expectation's) at the
    file as is and with each parameter scaled, and the relative changes."""
    from . import sensitivity as sens

    out = []
    for p in plans:
        assert p.base.result is not None
        expects = p.base.scenario.get("expect", [])
        wanted = [expects[0]["metric"]] if expects else sens.default_metrics(p.base.scenario, p.base.result)[:1]
        metrics = sens.check_metrics(wanted, p.base.result, p.base.origin)
        entry: dict[str, Any] = {"scenario": p.base.stem, "metric": metrics[0] if metrics else None}
        entry["factors"] = list(SENSITIVITY_FACTORS)
        out.append(entry | sens.summarise(p, metrics))
    return out
