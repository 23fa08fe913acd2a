"""Every result says where it comes from: the scenario as run, the overrides,
the version and commit, each parameter's status, and the metrics that rest on
a cost nobody set (issue 15)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import irqlab
from helpers import assert_ok, assert_user_error, run_cli

FIG = irqlab.SCENARIOS_DIR / "figures" / "m1-gettid.toml"
MD1 = irqlab.SCENARIOS_DIR / "examples" / "md1-queue.toml"
SHORT = ["--set", "duration=3ms", "--set", "warmup=1ms"]


def test_a_run_carries_the_resolved_scenario_overrides_commit_and_statuses(tmp_path: Path) -> None:
    measured = tmp_path / "syscall.json"
    measured.write_text(json.dumps({"metrics": {"ns_per_call": 167.0}}))
    out = tmp_path / "r.json"
    p = run_cli(
        "run", FIG, *SHORT, "--set", "cpu.ghz=3.0", "--set-from", f"{measured}:ns_per_call=task.0.body", "--json", out
    )
    assert_ok(p)
    prov = json.loads(out.read_text())["provenance"]
    assert prov["irqlab"] == irqlab.__version__
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", prov["commit"])
    assert prov["overrides"] == ["task.0.per_op=167ns", "duration=3ms", "warmup=1ms", "cpu.ghz=3.0"]
    # The scenario as run: overrides applied, defaults filled in.
    assert prov["scenario"]["cpu"]["ghz"] == 3.0 and prov["scenario"]["task"][0]["per_op"] == "167ns"
    st = prov["parameters"]
    assert st["task.0.per_op"] == f"measured: {measured}:ns_per_call"
    assert st["cpu.ghz"] == "set"
    assert st["cpu.pmr.access"] == "fitted on gettid pmr"
    assert st["task.0.work"] == "assumed"
    assert st["cpu.irq_entry"] == "default"
    assert "name" not in st and not any(k.startswith("expect") for k in st)


def test_the_run_header_says_commit_and_parameter_counts() -> None:
    p = run_cli("run", FIG, *SHORT)
    assert_ok(p)
    head = p.stdout.splitlines()[:2]
    assert "irqlab" in head[0] and "(" in head[0]
    assert re.search(r"parameters: 2 fitted, \d+ sourced, \d+ assumed, \d+ default; 2 override\(s\)", head[1]), head


def test_cited_values_are_sourced_and_a_wrong_key_is_one_line(tmp_path: Path) -> None:
    small = (Path(__file__).parent / "data" / "small.toml").read_text()
    sc = tmp_path / "s.toml"
    sc.write_text(small + '\n[cite]\n"task.0.work" = "libc wrapper, measured elsewhere"\n')
    doc, _ = irqlab.run(sc)
    assert doc["provenance"]["parameters"]["task.0.work"] == "sourced: libc wrapper, measured elsewhere"
    assert doc["provenance"]["parameters"]["task.0.body"] == "assumed"
    sc.write_text(small + '\n[cite]\n"task.0.wrok" = "typo"\n')
    assert_user_error(run_cli("run", sc), 'cite."task.0.wrok"', "not a parameter")
    sc.write_text(small + '\n[cite]\n"task.0" = "a section"\n')
    assert_user_error(run_cli("run", sc), 'cite."task.0"', "a section")


def test_metrics_resting_on_a_zero_default_cost_are_flagged(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = run_cli("run", MD1, "--set", "duration=30ms", "--set", "warmup=1ms", "--json", out)
    assert_ok(p)
    prov = json.loads(out.read_text())["provenance"]
    assert set(prov["zero_default_costs"]) == {"cpu.irq_entry", "cpu.irq_exit", "fabric.msi_write"}
    assert prov["flagged_metrics"]["irq_latency"] == ["cpu.irq_entry", "cpu.irq_exit", "fabric.msi_write"]
    assert "interrupts_per_s" not in prov["flagged_metrics"]
    # Said on the console too, and gone once someone states the costs (even as zero).
    p = run_cli("run", MD1, "--set", "duration=30ms", "--set", "warmup=1ms")
    assert "depends on a cost left at its zero default: cpu.irq_entry, cpu.irq_exit, fabric.msi_write" in p.stderr
    stated = ["cpu.irq_entry=0ns", "cpu.irq_exit=100ns", "fabric.msi_write=0ns", "duration=30ms", "warmup=1ms"]
    doc, _ = irqlab.run(MD1, stated)
    assert doc["provenance"]["zero_default_costs"] == {} and doc["provenance"]["flagged_metrics"] == {}


def test_costs_of_parts_a_scenario_lacks_are_not_flagged() -> None:
    # No SDEI cross-call: its zero costs do not matter; the KVM figure states its costs.
    doc, _ = irqlab.run(FIG, ["duration=3ms", "warmup=1ms"])
    assert not any(k.startswith("cpu.sdei") for k in doc["provenance"]["zero_default_costs"])
    kvm, _ = irqlab.run(irqlab.SCENARIOS_DIR / "figures" / "m4-kvm-cancels.toml", ["duration=50ms"])
    assert set(kvm["provenance"]["zero_default_costs"]) <= {"kvm.costs.host_resched"}


def test_gsim_flags_an_msix_mask_left_at_zero(tmp_path: Path) -> None:
    # Every source GSIM holds that fires again is masked by its CPU: with GSIM,
    # that cost matters, and a scenario that does not state it is told so.
    fig = irqlab.SCENARIOS_DIR / "figures" / "m5-nvme-8ssd.toml"
    text = "\n".join(line for line in fig.read_text().splitlines() if not line.startswith("msix_mask"))
    bare = tmp_path / "bare.toml"
    bare.write_text(text)
    sets = ["gsim.delay_us=200", "duration=3ms", "warmup=1ms"]
    doc, _ = irqlab.run(bare, sets)
    assert "cpu.msix_mask" in doc["provenance"]["zero_default_costs"]
    assert "cpu.msix_mask" in doc["provenance"]["flagged_metrics"]["hardirq_share"]
    stated, _ = irqlab.run(fig, sets)
    assert "cpu.msix_mask" not in stated["provenance"]["zero_default_costs"]
    # Without GSIM nothing is held, so nothing is masked: no flag.
    plain, _ = irqlab.run(bare, ["duration=3ms", "warmup=1ms"])
    assert "cpu.msix_mask" not in plain["provenance"]["zero_default_costs"]


def test_a_git_stopped_by_a_signal_is_asked_again(monkeypatch) -> None:
    # A Ctrl-C that reached `git` mid-sweep left "unknown" cached for every
    # later part, which --resume then refused as another irqlab's (an audit).
    import subprocess

    from irqlab import provenance

    real = subprocess.run
    calls = {"n": 0}

    def interrupted_once(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise subprocess.CalledProcessError(-2, args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(provenance, "_commit", None)
    monkeypatch.setattr(provenance.subprocess, "run", interrupted_once)
    assert provenance.commit() == "unknown"
    second = provenance.commit()
    assert calls["n"] > 1, "the failed read was kept"
    assert provenance.commit() == second
    n = calls["n"]
    provenance.commit()
    assert calls["n"] == n, "a settled read is kept"
