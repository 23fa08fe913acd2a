"""`irqlab kvm-order`: M4, orders of KVM's request list ranked by cancelled VM-enters."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from .._util import UserError, check_overrides, progress, read_scenario, refuse_input_outputs
from . import ForceOpt, ScenarioArg, SeedOpt, SetOpt, app, check_seed, check_workers, output_file, user_errors
from .render import out, to_stdout, write_json


@app.command("kvm-order")
@user_errors
def kvm_order(
    scenario: ScenarioArg,
    requests: Annotated[
        str | None, typer.Option("--requests", help="Requests to permute, comma-separated (default SMI,NMI,PMU,PMI).")
    ] = None,
    set_: SetOpt = None,
    seed: SeedOpt = None,
    top: Annotated[int, typer.Option("--top", help="Orders to show.")] = 5,
    workers: Annotated[int | None, typer.Option("--workers", help="Parallel runs (default: CPU count).")] = None,
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Write the ranking as JSON ('-' = stdout).", callback=output_file)
    ] = None,
    force: ForceOpt = False,
) -> None:
    """M4: rank orders of KVM's request list by cancelled VM-enters, and explain what still cancels."""
    from .. import kvm_order as ko

    if top < 1:
        raise UserError(f"--top {top}: expected at least 1")
    check_workers(workers)
    text, origin = read_scenario(scenario)
    refuse_input_outputs(json=json_out)
    if requests is not None and not requests.strip():
        raise UserError('--requests "": expected request names, comma-separated (e.g. SMI,NMI,PMU,PMI)')
    chosen = requests.split(",") if requests else list(ko.DEFAULT_REQUESTS)
    total = ko.expected_runs(len(chosen)) or 0
    with progress(f"evaluating orders of {', '.join(chosen)}", total) as advance:
        res = ko.search(
            text,
            origin,
            check_overrides(set_),
            chosen,
            check_seed(seed),
            workers=workers or os.cpu_count() or 1,
            advance=advance,
            force=force,
        )
    if json_out is not None:
        write_json(json_out, res)
    if to_stdout(json_out):
        return
    b = res["base"]
    out.print(
        f"[bold]{res['scenario']}[/bold]: {res['evaluated']} orders ({res['method']}); "
        f"the scenario's order cancels {b['cancels_per_s']:,.1f}/s",
        soft_wrap=True,
    )
    t = Table(title="best orders", title_justify="left")
    for c in ("#", "order of " + ",".join(res["requests"]), "cancels/s", "lost ns/s", "PMI latency ns"):
        t.add_column(c, justify="left" if c.startswith("order") else "right", no_wrap=True)
    shown = res["ranked"][:top]
    for i, e in enumerate(shown, 1):
        sub = [r for r in e["order"] if r in res["requests"]]
        lat = "" if e["pmi_latency_mean_ns"] is None else f"{e['pmi_latency_mean_ns']:,.0f}"
        t.add_row(str(i), " > ".join(sub), f"{e['cancels_per_s']:,.1f}", f"{e['guest_time_lost_ns_per_s']:,.0f}", lat)
    out.print(t)
    for i, e in enumerate(shown, 1):
        out.print(f"#{i} still cancels: " + ("; ".join(e["explanation"]) or "nothing"), soft_wrap=True)
    out.print("dependencies: " + "; ".join(res["dependencies"]), soft_wrap=True)
