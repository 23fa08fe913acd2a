"""M4 order search: which orders of KVM's request list cancel fewest VM-enters
for a workload, and why the remaining cancels happen.

Every order is evaluated by running the Rust model (`[kvm]` scenario with
`kvm.order` overridden); nothing about KVM is re-implemented here. The requests
that interact (one's servicing raises another: PMI -> NMI through an NMI-mode
LVTPC, SMI/NMI -> EVENT, PMU -> PMI only for an emulated counter overflow; a
hardware overflow raises PMI and PMU itself) are permuted exhaustively among the positions they hold in the base
order; with more than `max_exhaustive` requests, a local search by swaps.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from . import _core
from ._util import UserError, one_line

DEFAULT_REQUESTS = ("SMI", "NMI", "PMU", "PMI")


@dataclass
class Cause:
    """One row of the run's `cancel_causes` table: `request`'s cancels per second,
    raised by servicing another request (`kind` "raised_by") or by a source."""

    request: str
    kind: str
    cause: str
    per_s: float

    def key(self) -> str:
        return f"cancels.{self.request}.{self.kind}.{self.cause}"


@dataclass
class Evaluated:
    order: list[str]
    cancels_per_s: float
    lost_ns_per_s: float
    pmi_latency_mean_ns: float | None
    causes: list[Cause]

    def explain(self) -> list[str]:
        """Each remaining cause of cancels in words, most frequent first."""
        out = []
        for c in sorted(self.causes, key=lambda c: -c.per_s):
            req, what, per_s = c.request, c.cause, c.per_s
            if c.kind == "raised_by":
                out.append(f"servicing {what} raises {req} after {req}'s check: {per_s:,.1f}/s")
            elif req == "EVENT":
                late = f"arrives after injection, interrupts off: {per_s:,.1f}/s"
                if what.endswith("_window") or what == "eoi":  # an exit of the guest's, not an interrupt
                    out.append(f"the {what.replace('_', ' ')} exit's EVENT {late}")
                else:
                    article = "an" if what[:1] in "aeiou" else "a"
                    out.append(f"{article} {what} interrupt (EVENT) {late}")
            elif req in ("UNBLOCK", "RESCHED"):
                out.append(f"{req} from {what} arrives during the pass, which no list services: {per_s:,.1f}/s")
            else:
                out.append(f"{req} from {what} arrives after its check in the list: {per_s:,.1f}/s")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "order": self.order,
            "cancels_per_s": self.cancels_per_s,
            "guest_time_lost_ns_per_s": self.lost_ns_per_s,
            "pmi_latency_mean_ns": self.pmi_latency_mean_ns,
            "causes_per_s": {c.key(): c.per_s for c in self.causes},
            "explanation": self.explain(),
        }


def base_order(scenario: dict[str, Any], origin: str = "the scenario") -> list[str]:
    _, presets, _ = _core.kvm_requests()
    kvm = scenario.get("kvm")
    if not kvm:
        raise UserError(
            f"{origin}: no [kvm] section: order search needs a KVM workload, expected e.g. figures/m4-kvm-cancels"
        )
    order = kvm.get("order", "upstream-before")
    if isinstance(order, str):
        return list(dict(presets)[order])
    return [n.upper() for n in order]


def evaluate(
    text: str, origin: str, overrides: Sequence[str], order: Sequence[str], seed: int | None, force: bool = False
) -> Evaluated:
    sets = [*overrides, "kvm.order=" + json.dumps(list(order))]
    try:
        raw, _ = _core.run(text, origin, sets, seed, False, None, force)
    except _core.ScenarioError as e:
        raise UserError(one_line(str(e))) from None
    m = json.loads(raw)
    metrics, hist = m["metrics"], m["histograms"].get("pmi_latency", {})
    table = m["tables"]["cancel_causes"]
    causes = [
        Cause(
            **{k: row[table["columns"].index(k)] for k in ("request", "kind", "cause")},
            per_s=row[table["columns"].index("cancels_per_s")],
        )
        for row in table["rows"]
    ]
    return Evaluated(
        list(order),
        metrics["cancels_per_s"],
        metrics["guest_time_lost_ns_per_s"],
        hist.get("mean") if hist.get("count") else None,
        causes,
    )


def _candidates(base: list[str], chosen: list[str]) -> list[list[str]]:
    slots = [i for i, r in enumerate(base) if r in chosen]
    out = []
    for perm in itertools.permutations([base[i] for i in slots]):
        o = list(base)
        for i, r in zip(slots, perm):
            o[i] = r
        out.append(o)
    return out


def search(
    text: str,
    origin: str,
    overrides: Sequence[str] = (),
    requests: Sequence[str] | None = None,
    seed: int | None = None,
    max_exhaustive: int = 6,
    workers: int = 1,
    advance: Callable[[], None] | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Rank orders of `requests` (names; default the interacting ones) by cancels/s, then lost time."""
    try:
        scen = json.loads(_core.load(text, origin, list(overrides)))
    except _core.ScenarioError as e:
        raise UserError(one_line(str(e))) from None
    base = base_order(scen, origin)
    names, _, edges = _core.kvm_requests()
    chosen = [r.strip().upper() for r in (requests or DEFAULT_REQUESTS)]
    for r in chosen:
        if not r:
            raise UserError(f"--requests {','.join(chosen)}: an empty name, expected comma-separated requests")
        if r not in names:
            raise UserError(f"--requests {r}: unknown request, expected some of {', '.join(names)}")
    if (twice := next((r for i, r in enumerate(chosen) if r in chosen[:i]), None)) is not None:
        raise UserError(f"--requests {twice}: given twice, expected each request once")
    if len(chosen) < 2:
        raise UserError("--requests: name at least two different requests")

    def run_all(orders: list[list[str]]) -> list[Evaluated]:
        def one(o: list[str]) -> Evaluated:
            e = evaluate(text, origin, overrides, o, seed, force)
            if advance:
                advance()
            return e

        with ThreadPoolExecutor(max_workers=max(1, workers)) as ex:
            return list(ex.map(one, orders))

    if len(chosen) <= max_exhaustive:
        method = "exhaustive"
        results = run_all(_candidates(base, chosen))
    else:
        # Hill-climb by swapping two chosen requests until no swap helps.
        method = "local search (pairwise swaps)"
        best = run_all([base])[0]
        results = [best]
        improved = True
        while improved:
            improved = False
            slots = [i for i, r in enumerate(best.order) if r in chosen]
            moves = []
            for a, b in itertools.combinations(slots, 2):
                o = list(best.order)
                o[a], o[b] = o[b], o[a]
                moves.append(o)
            tried = run_all(moves)
            results.extend(tried)
            cand = min(tried, key=lambda e: (e.cancels_per_s, e.lost_ns_per_s))
            if (cand.cancels_per_s, cand.lost_ns_per_s) < (best.cancels_per_s, best.lost_ns_per_s):
                best, improved = cand, True
    ranked = sorted(results, key=lambda e: (e.cancels_per_s, e.lost_ns_per_s, e.order))
    baseline = next(e for e in results if e.order == base)
    return {
        "scenario": scen.get("name"),
        "method": method,
        "requests": chosen,
        "dependencies": [f"servicing {a} raises {b}" + (f" {when}" if when else "") for a, b, when in edges],
        "evaluated": len(results),
        "base": baseline.to_dict(),
        "ranked": [e.to_dict() for e in ranked],
    }


def expected_runs(n: int, max_exhaustive: int = 6) -> int | None:
    """Runs an exhaustive search takes (None: a local search, open-ended)."""
    return len(list(itertools.permutations(range(n)))) if n <= max_exhaustive else None
