"""`irqlab sensitivity`: how a scenario's headline metrics move when one parameter at a time is scaled."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer
from rich import box
from rich.table import Table

from .. import _core
from .._util import check_overrides, progress, read_scenario, refuse_input_outputs
from ..provenance import commit
from . import ForceOpt, JsonOpt, ScenarioArg, SeedOpt, SetOpt, app, check_seed, check_workers, user_errors
from .render import err, out, to_stdout, write_json
from .summary import column_unit, human, short_run

ParamOpt = Annotated[
    list[str] | None,
    typer.Option("--param", help="A numeric key to scale, e.g. fabric.msi_write or nvme.0.per_cqe (repeatable)."),
]
FactorOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--factor",
        help="Factors to scale each --param by, comma-separated, each from 0.001 to 1000 (default: 0.5,2). "
        "A count is rounded half up, and stays at least 1; the table then says the factor it ran.",
    ),
]
MetricOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--metric",
        help="A result metric or HISTOGRAM.STAT to report (repeatable; default: the metrics the scenario's "
        "expectations check, else device throughput, interrupts_per_s and hardirq_share).",
    ),
]


@app.command()
@user_errors
def sensitivity(
    scenario: ScenarioArg,
    param: ParamOpt = None,
    factor: FactorOpt = None,
    metric: MetricOpt = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    workers: Annotated[int | None, typer.Option("--workers", help="Parallel runs (default: CPU count).")] = None,
    json_out: JsonOpt = None,
    force: ForceOpt = False,
) -> None:
    """Scale one parameter at a time and show how the headline metrics move.

    The scenario runs once as given (with --set), then once per --param and
    --factor with that parameter's value scaled; every run has the same seed."""
    from .. import sensitivity as sens
    from ..reproduce import FigureRun, execute

    check_workers(workers)
    params = sens.check_params(param)
    factors = sens.parse_factors(factor)
    sets = check_overrides(set_)
    s = check_seed(seed)
    text, origin = read_scenario(scenario)
    refuse_input_outputs(json=json_out)
    scen = sens.load(text, origin, sets)
    base = FigureRun(Path(origin).stem, origin, text, scen, sets, [], seed=s)
    plan = sens.plan(base, params, factors, force)
    n = 1 + len(plan.runs)
    with progress(f"sensitivity ({n} runs)", n) as advance:
        # The base alone first: a --metric it does not produce stops the command
        # now, not after every other run.
        execute([base], 1, advance, force)
        assert base.result is not None
        metrics = sens.check_metrics(metric, base.result, origin) if metric else sens.default_metrics(scen, base.result)
        execute(plan.runs, workers or min(os.cpu_count() or 1, len(plan.runs)), advance, force)
    doc = {
        "scenario": scen.get("name"),
        "origin": origin,
        "seed": base.result["seed"],
        "overrides": sets,
        "factors": factors,
        "metrics": metrics,
        **sens.summarise(plan, metrics),
        "provenance": {"irqlab": _core.__version__, "commit": commit()},
    }
    if json_out is not None:
        write_json(json_out, doc)
    # As `run` warns: judged on the base run, whose duration every scaled run shares.
    if (short := short_run(base.result, scen)) is not None:
        err.print(f"warning: {short}", markup=False, soft_wrap=True)
    if not to_stdout(json_out):
        out.print(_table(doc, json_out))


def _change(c: float | None) -> str:
    return "n/a" if c is None else f"{c:+.2%}"


def _value(metric: str, v: Any) -> str:
    """In the metric's unit, as `run` shows it (3.94 M IOPS, 10.5 ms); a count or a plain number as is."""
    return human(v, column_unit(metric))


def _table(doc: dict[str, Any], json_out: Path | None) -> Table:
    """A block of rows per (parameter, factor), one row per metric; the base first."""
    from ..sensitivity import shown

    title = f"sensitivity of {doc['origin']} (seed {doc['seed']})" + (f" -> {json_out}" if json_out else "")
    t = Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, collapse_padding=True
    )
    for c in ("parameter", "factor", "set to", "metric", "value", "change"):
        # Names wrap rather than lose their end (nvme.ssd.latency.p99 vs .p50) on 80 columns.
        named = c in ("parameter", "metric")
        t.add_column(c, justify="left" if named or c == "set to" else "right", overflow="fold" if named else "ellipsis")
    metrics = doc["metrics"]
    if not metrics:
        t.add_row("(no metric: pass --metric NAME)", "", "", "", "", "")
        return t
    for i, m in enumerate(metrics):
        t.add_row(
            "as is" if i == 0 else "",
            "",
            "",
            m,
            _value(m, doc["base"]["metrics"][m]),
            "",
            end_section=i == len(metrics) - 1,
        )
    for r in doc["runs"]:
        for i, m in enumerate(metrics):
            factor = f"{r['factor']:g}"
            if r["ran_factor"] != r["factor"]:
                factor += f" (ran x{r['ran_factor']:.3g})"
            head = (r["param"], factor, shown(r["value"], r["param"])) if i == 0 else ("", "", "")
            t.add_row(*head, m, _value(m, r["metrics"][m]), _change(r["change"][m]), end_section=i == len(metrics) - 1)
    return t
