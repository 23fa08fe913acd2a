"""Bad input never ends in a traceback: one `error:` line on stderr naming what
is wrong, exit code 2, and no output file left behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import assert_ok, assert_user_error, run_cli
from irqlab import SCENARIOS_DIR

UNKNOWN_KEY = """
name = "t"
duration = "1ms"
[cpu]
maskin = "daif"
"""

MALFORMED = """
name = "t"
duration =
"""


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / "in" / name
    p.parent.mkdir(exist_ok=True)
    p.write_text(text)
    return p


# (id, argv builder(small, tmp in-dir) -> args, substrings the one line must contain)
CROSSCALL_WAITS = """
name = "x"
duration = "20ms"
[platform]
cpus = 2
[[crosscall]]
name = "bt"
at = "1ms"
mechanisms = ["ipi", "sdei"]
waits = ["1ms"]
handler = "1us"
"""

CASES = [
    ("unknown-key", lambda s, d: ["run", write(d, "u.toml", UNKNOWN_KEY)], ["u.toml", "cpu.maskin", "unknown field"]),
    ("wrong-type", lambda s, d: ["run", s, "--set", "platform.cpus=lots"], ["platform.cpus", "invalid type"]),
    ("bad-enum", lambda s, d: ["run", s, "--set", "cpu.masking=pmrr"], ["cpu.masking", "pmrr", "daif"]),
    ("negative-duration", lambda s, d: ["run", s, "--set", "duration=-1s"], ["duration"]),
    ("time-without-unit", lambda s, d: ["run", s, "--set", "source.0.handler=300"], ["source[0].handler", "unit"]),
    ("missing-file", lambda s, d: ["run", d / "nope.toml"], ["nope.toml", "no such file"]),
    ("directory", lambda s, d: ["run", d], ["directory"]),
    ("set-without-equals", lambda s, d: ["run", s, "--set", "duration"], ["--set", "KEY=VALUE"]),
    ("set-bad-index", lambda s, d: ["run", s, "--set", "source.5.rate=1"], ["source", "no index 5"]),
    ("set-index-of-absent-list", lambda s, d: ["run", s, "--set", "nvme.5.queues=2"], ["nvme has 0 entries"]),
    ("time-nan", lambda s, d: ["run", s, "--set", "duration=nan"], ["duration", "expected a finite time"]),
    ("time-huge", lambda s, d: ["run", s, "--set", "duration=1e308"], ["duration: 1e308:", "unit"]),
    (
        "pmhe-without-dsb",
        lambda s, d: ["run", s, "--set", "cpu.masking=pmr", "--set", "cpu.pmr.pmhe=true"],
        ["cpu.pmr.dsb", "pmhe = true", "pmhe = false"],
    ),
    ("gic-version", lambda s, d: ["run", s, "--set", "gic.version=3"], ["gic.version", '"4.0" or "4.1"']),
    (
        "idle-states-out-of-order",
        lambda s, d: [
            "run",
            s,
            "--set",
            'cpu.idle_state=[{name="C6",exit="133us",residency="600us"},{name="C1",exit="2us",residency="2us"}]',
        ],
        ["cpu.idle_state[1].residency", "2us is not above C6's 600us", "shallowest first"],
    ),
    (
        "crosscall-waits-count",
        lambda s, d: ["run", write(d, "x.toml", CROSSCALL_WAITS)],
        ["crosscall[0].waits", "one per mechanism"],
    ),
    (
        "nmi-without-pseudo-nmi",
        lambda s, d: ["run", s, "--set", "source.0.nmi=true", "--set", "cpu.masking=daif"],
        ["source[0].nmi", 'cpu.masking = "pmr"'],
    ),
    (
        "hlt-without-vm",
        lambda s, d: ["run", s, "--set", 'hypervisor.guest_idle="hlt"'],
        ["hypervisor.guest_idle", "[[vm]]"],
    ),
    (
        "guest-idle-value",
        lambda s, d: ["run", s, "--set", 'hypervisor.guest_idle="nap"'],
        ["guest_idle", "spin", "hlt"],
    ),
    (
        "iommu-past-the-socket",
        lambda s, d: ["run", SCENARIOS_DIR / "examples" / "m5-nvme-12ssd.toml", "--set", "nvme.0.iommus=[0, 1]"],
        ["nvme[0].iommus[1]", "platform.iommus_per_socket"],
    ),
    (
        "fetch-slots-without-dies",
        lambda s, d: [
            "run",
            SCENARIOS_DIR / "examples" / "m5-nvme-qd1.toml",
            "--set",
            "nvme.0.fetch_slots=64",
            "--set",
            'nvme.0.service_order="fifo"',
        ],
        ["nvme[0].fetch_slots", 'service_order = "die"'],
    ),
    # fio's jobs run only where the CPU would idle: a task there starved them
    # without a word (0 I/Os beside a busy loop; an audit).
    (
        "task-beside-fio-jobs",
        lambda s, d: [
            "run",
            write(
                d,
                "t.toml",
                (SCENARIOS_DIR / "examples" / "m5-nvme-qd1.toml").read_text()
                + '\n[[task]]\nname = "spin"\ncpus = [1]\nwork = "1us"\n',
            ),
        ],
        ["nvme[0].cpus[1]", 'cpu 1 also runs task "spin"', "fio's jobs", "CPUs without a [[task]]"],
    ),
    # Likewise NAPI's ksoftirqd: beside a task a NIC queue stopped for good (an audit).
    (
        "task-beside-napi",
        lambda s, d: [
            "run",
            write(
                d,
                "t.toml",
                (SCENARIOS_DIR / "figures" / "m5-nic-100g.toml").read_text()
                + '\n[[task]]\nname = "spin"\ncpus = [0]\nwork = "1us"\n',
            ),
        ],
        ["nic[0].cpus[0]", 'cpu 0 also runs task "spin"', "NAPI's ksoftirqd"],
    ),
    ("whatif-fractional-cpus", lambda s, d: ["whatif", "--cpus", "1.5"], ["--cpus", "whole CPU counts"]),
    (
        "trace-after-the-run",
        lambda s, d: ["run", s, "--set", "trace.start=1000s"],
        ["trace.start", "before the run ends"],
    ),
    ("time-below-1ps", lambda s, d: ["run", s, "--set", "source.0.handler=0.0001ps"], ["resolution of 1 ps"]),
    ("malformed-toml", lambda s, d: ["run", write(d, "m.toml", MALFORMED)], ["m.toml:3", "TOML"]),
    ("not-utf8", lambda s, d: ["run", _binary(d)], ["b.toml", "UTF-8"]),
    ("negative-seed", lambda s, d: ["run", s, "--seed", "-1"], ["--seed"]),
    ("validate-bad", lambda s, d: ["validate", s, "--set", "platform.cpus=0"], ["platform.cpus"]),
    ("grid-without-equals", lambda s, d: ["sweep", s, "--grid", "platform.cpus"], ["--grid", "KEY=V1,V2"]),
    ("grid-empty-value", lambda s, d: ["sweep", s, "--grid", "platform.cpus=2,,4"], ["--grid", "empty value"]),
    ("grid-bad-value", lambda s, d: ["sweep", s, "--grid", "platform.cpus=2,lots"], ["platform.cpus", "lots"]),
    ("grid-missing", lambda s, d: ["sweep", s], ["--grid"]),
    ("grid-twice", lambda s, d: ["sweep", s, "--grid", "seed=1", "--grid", "seed=2"], ["given twice"]),
    # The last of two values won without a word (a review).
    (
        "set-twice",
        lambda s, d: ["run", s, "--set", "duration=10ms", "--set", "duration = 20ms"],
        ["--set duration given twice (10ms, then 20ms)"],
    ),
    # serde's Rust type names said what to write: "expected struct Platform".
    (
        "set-struct",
        lambda s, d: ["run", s, "--set", "platform=3"],
        ["platform: invalid type: integer `3`, expected a table"],
    ),
    (
        "set-enum",
        lambda s, d: ["run", s, "--set", "source.0.arrival=3"],
        ["source[0].arrival", "expected `poisson` or `periodic`"],
    ),
    ("grid-bad-seed", lambda s, d: ["sweep", s, "--grid", "seed=1,x"], ["seed", "'x'"]),
    ("unknown-backend", lambda s, d: ["sweep", s, "--grid", "seed=1", "--backend", "slurm"], ["slurm", "local"]),
    ("zero-workers", lambda s, d: ["sweep", s, "--grid", "seed=1", "--workers", "0"], ["--workers"]),
    ("only-unknown", lambda s, d: ["reproduce", "--figures", d, "--only", "nosuch"], ["nosuch", "known"]),
    ("figures-missing", lambda s, d: ["reproduce", "--figures", d / "nodir"], ["nodir"]),
    # Issue 11, item 1: these ended in tracebacks.
    ("grid-seed-too-big", lambda s, d: ["sweep", s, "--grid", "seed=18446744073709551616"], ["--grid seed", "2^64-1"]),
    (
        "grid-dask-bad-address",
        lambda s, d: ["sweep", s, "--grid", "seed=1", "--backend", "dask", "--address", "notaurl"],
        ["--address notaurl", "tcp://HOST:PORT"],
    ),
    ("whatif-cpus-inf", lambda s, d: ["whatif", "--cpus", "inf"], ["--cpus", "from 1 to 4096"]),
    # -1 and 0 were refused with different ranges (at least 0; from 1).
    ("whatif-cpus-neg", lambda s, d: ["whatif", "--cpus", "8,-1"], ["--cpus '8,-1'", "from 1 to 4096"]),
    ("whatif-cpus-0", lambda s, d: ["whatif", "--cpus", "0"], ["--cpus '0'", "from 1 to 4096"]),
    ("whatif-wedge-nan", lambda s, d: ["whatif", "--wedge-ms", "nan"], ["--wedge-ms", "finite"]),
    ("whatif-sdei-after-nan", lambda s, d: ["whatif", "--sdei-after-ms", "nan"], ["--sdei-after-ms", "finite"]),
    # 0 and -1 refused with the same words (it said "at least 0" for -1, then refused 0).
    ("whatif-exceptions-0", lambda s, d: ["whatif", "--exceptions-per-s", "0"], ["--exceptions-per-s 0", "above 0"]),
    (
        "whatif-exceptions-neg",
        lambda s, d: ["whatif", "--exceptions-per-s", "-1"],
        ["--exceptions-per-s -1", "above 0"],
    ),
    # Out of the core's time range: named by the option, not the generated scenario's key (a review).
    (
        "whatif-dispatch-huge",
        lambda s, d: ["whatif", "--sdei-dispatch-ns", "1e30"],
        ["--sdei-dispatch-ns 1e+30", "1 ps to about 104 days"],
    ),
    ("whatif-wedge-tiny", lambda s, d: ["whatif", "--wedge-ms", "1e-12"], ["--wedge-ms 1e-12", "1 ps to"]),
    ("whatif-exceptions-tiny", lambda s, d: ["whatif", "--exceptions-per-s", "1e-30"], ["--exceptions-per-s 1e-30"]),
    ("measure-calls-huge", lambda s, d: ["measure", "syscall", "--calls", str(2**64)], ["--calls", "expected 1 to"]),
    # An empty name was "--requests : unknown request".
    (
        "kvm-order-empty-request",
        lambda s, d: ["kvm-order", SCENARIOS_DIR / "figures" / "m4-kvm-cancels.toml", "--requests", "SMI,,NMI"],
        ["SMI,,NMI", "empty name"],
    ),
    # Each task maps its --mb at once: 4 x 1 TB went for the OOM killer (a review).
    (
        "measure-pagefault-over-ram",
        lambda s, d: ["measure", "pagefault", "--mb", str(1 << 20), "--tasks", "4"],
        ["--mb 1048576 x --tasks 4", "half of this machine's memory"],
    ),
    ("record-duration-nan", lambda s, d: ["record", "--duration", "nan", "--out", d / "t.parquet"], ["--duration"]),
    ("record-duration-inf", lambda s, d: ["record", "--duration", "inf", "--out", d / "t.parquet"], ["--duration"]),
    # It wrote Parquet under the .csv name, where a sweep refuses it.
    ("record-out-csv", lambda s, d: ["record", "--duration", "1", "--out", d / "t.csv"], ["--out", "t.csv", "Parquet"]),
    # Ran until killed (a review): a count past 1,000 runs is a typo.
    ("bench-repeat-huge", lambda s, d: ["bench", "--repeat", "100000000000000000000"], ["--repeat", "1 to 1000"]),
    # Item 2: click's usage errors are one line too.
    ("usage-seed-type", lambda s, d: ["run", s, "--seed", "abc"], ["irqlab run", "--seed", "integer"]),
    ("usage-workers-type", lambda s, d: ["sweep", s, "--workers", "abc"], ["irqlab sweep", "--workers"]),
    ("usage-missing-argument", lambda s, d: ["run"], ["irqlab run", "Missing argument", "--help"]),
    ("usage-extra-argument", lambda s, d: ["run", s, "extra"], ["unexpected extra argument", "extra"]),
    ("usage-unknown-option", lambda s, d: ["run", s, "--bogus"], ["No such option", "--bogus"]),
    ("usage-unknown-command", lambda s, d: ["bogus"], ["No such command", "bogus"]),
    # An empty path read as `.` (".: is a directory"); an unset shell variable, named.
    ("usage-empty-scenario", lambda s, d: ["run", ""], ["irqlab run: argument 2 is empty", "expected a value"]),
    ("usage-empty-json", lambda s, d: ["run", s, "--json", ""], ["irqlab run: --json's value is empty"]),
    ("usage-empty-json-eq", lambda s, d: ["run", s, "--json="], ["irqlab run: --json's value is empty"]),
    # It named `irqlab`, not the command whose option lacked its value.
    ("usage-missing-value", lambda s, d: ["run", s, "--seed"], ["irqlab run:", "--seed", "requires an argument"]),
    # An option that takes one value, given twice: click ran the last one silently.
    ("usage-repeated-seed", lambda s, d: ["run", s, "--seed", "1", "--seed=2"], ["irqlab run", "--seed", "2 times"]),
    (
        "usage-repeated-workers",
        lambda s, d: ["sweep", s, "--grid", "seed=1,2", "--workers", "1", "--workers", "2"],
        ["irqlab sweep", "--workers given 2 times"],
    ),
]


def _binary(tmp: Path) -> Path:
    p = write(tmp, "b.toml", "")
    p.write_bytes(b'name = "\xff\xfe"\n')
    return p


def _outputs(case_id: str, out: Path) -> list[str]:
    # Every command gets the output flags it has, so that "no file written" is checked.
    if case_id.startswith(("grid", "unknown-backend", "zero-workers", "usage-workers", "usage-repeated-workers")):
        return ["--out", str(out / "sweep.parquet")]
    if case_id.startswith(("only", "figures")):
        return ["--out", str(out / "report")]
    if case_id.startswith(
        ("bench", "validate", "whatif", "measure", "record", "usage-unknown-command", "usage-missing", "usage-empty")
    ):
        return []
    if case_id.startswith("kvm-order"):
        return ["--json", str(out / "r.json")]
    return ["--json", str(out / "r.json"), "--trace", str(out / "r.pftrace")]


@pytest.mark.parametrize("case_id,argv,needles", CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(case_id, argv, needles, small, tmp_path):
    indir = tmp_path / "in"
    indir.mkdir()
    out = tmp_path / "out"
    out.mkdir()
    args = argv(small, tmp_path) + _outputs(case_id, out)
    p = run_cli(*args)
    assert_user_error(p, *needles)
    assert list(out.iterdir()) == [], "an output (or temp) file was left behind"


def test_a_bad_point_late_in_the_grid_stops_the_sweep_before_any_run(small, tmp_path):
    out = tmp_path / "s.parquet"
    p = run_cli("sweep", small, "--grid", "seed=1,2", "--grid", "source.0.rate=10k/s,fast", "--out", out)
    line = assert_user_error(p, "source[0].rate", "fast", "grid point")
    assert "seed=1" in line
    assert not out.exists()


def test_a_metric_missing_from_the_results_is_named(small, tmp_path):
    figs = tmp_path / "figs"
    figs.mkdir()
    (figs / "f.toml").write_text(
        small.read_text()
        + '\n[[expect]]\nmetric = "no_such_metric"\npublished = 1.0\ntolerance = 0.1\nsource = "test"\n'
        + 'kind = "prediction"\n'
    )
    report = tmp_path / "report"
    p = run_cli("reproduce", "--figures", figs, "--out", report)
    assert_user_error(p, "no_such_metric", "interrupts")
    assert not report.exists()


def test_ray_backend_without_ray_says_how_to_get_it(small, tmp_path):
    # The locks install ray: hide it (a None in sys.modules makes `import ray` fail).
    hide = "import sys; sys.modules['ray'] = None; from irqlab.cli import main; main()"
    p = subprocess.run(
        [
            sys.executable,
            "-c",
            hide,
            "sweep",
            str(small),
            "--grid",
            "seed=1",
            "--backend",
            "ray",
            "--out",
            str(tmp_path / "s.parquet"),
        ],
        env={**os.environ, "CI": "true"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_user_error(p, "ray", "pip install")
    assert not (tmp_path / "s.parquet").exists()


def test_no_command_prints_the_overview_and_help_exits_0():
    for args in ([], ["--help"], ["run", "--help"]):
        p = run_cli(*args)
        assert p.returncode == 0 and "Usage: irqlab" in p.stdout, (args, p.stderr)


def _trace(tmp: Path, times: list[int | None], names: list[str | None], fmt: bytes = b"1") -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from irqlab.host.record import SCHEMA_TAG

    n = len(times)
    table = pa.table(
        {
            "time": pa.array(times, pa.int64()),
            "cpu": pa.array([0] * n, pa.int32()),
            "irq": pa.array([24] * n, pa.int32()),
            "name": pa.array(names, pa.string()),
            "event": pa.array(["entry"] * n, pa.string()),
        }
    ).replace_schema_metadata({SCHEMA_TAG: fmt})
    p = tmp / "t.parquet"
    pq.write_table(table, p)
    return p


REPLAY = """
name = "replay"
duration = "1ms"
[[source]]
name = "disk"
rate = 0
replay = "24"
handler = "1us"
"""


def test_replay_of_a_trace_with_null_names_uses_the_irq_number(tmp_path):
    pytest.importorskip("pyarrow")
    sc = write(tmp_path, "r.toml", REPLAY)
    trace = _trace(tmp_path, [0, 1000, None, 3000], [None, "nvme0q1", "x", None])
    out = tmp_path / "r.json"
    p = run_cli("replay", trace, "--scenario", sc, "--json", out)
    assert p.returncode == 0, p.stderr
    import json

    assert json.loads(out.read_text())["metrics"]["replay.24.recorded"] == 3  # the row without a time is skipped


def test_replay_of_a_trace_format_it_does_not_know_is_refused(tmp_path):
    """A trace tagged with another format (a later irqlab's) was replayed without a word."""
    pytest.importorskip("pyarrow")
    sc = write(tmp_path, "r.toml", REPLAY)
    for fmt, shown in ((b"99", "'99'"), (b"\xff", "'\ufffd'")):
        trace = _trace(tmp_path, [0, 1000], ["a", "a"], fmt)
        out = tmp_path / "r.json"
        assert_user_error(run_cli("replay", trace, "--scenario", sc, "--json", out), f"format {shown}", "expected '1'")
        assert not out.exists()


def test_replay_of_a_trace_too_long_for_simulated_time_is_refused(tmp_path):
    pytest.importorskip("pyarrow")
    sc = write(tmp_path, "r.toml", REPLAY)
    trace = _trace(tmp_path, [0, 2**62], ["a", "a"])
    assert_user_error(
        run_cli("replay", trace, "--scenario", sc, "--json", tmp_path / "r.json"),
        "the trace spans",
        "up to",
        str(trace),
    )
    assert not (tmp_path / "r.json").exists()


def test_the_python_api_raises_typed_errors(small, tmp_path):
    import irqlab

    with pytest.raises(TypeError, match="wrap it in"):
        irqlab.run(small, "platform.cpus=4")  # type: ignore[arg-type]
    for bad in (tmp_path / "nope.toml", tmp_path, _binary(tmp_path)):
        with pytest.raises(irqlab.ScenarioError):
            irqlab.run(bad)
    with pytest.raises(irqlab.ScenarioError, match="2\\^64-1"):
        irqlab.run(small, seed=-1)
    with pytest.raises(irqlab.ScenarioError, match="2\\^64-1"):
        irqlab.run(small, seed=2**64)
    with pytest.raises(TypeError, match="seed"):
        irqlab.run(small, seed=True)
    with pytest.raises(TypeError, match="wrap it in"):
        irqlab.load(small, "x")  # type: ignore[arg-type]


def test_unbounded_work_is_refused_naming_the_key_unless_forced(small, tmp_path):
    flood = write(
        tmp_path,
        "flood.toml",
        'name = "f"\nduration = "1s"\n[[source]]\nname = "x"\nrate = "1e12/s"\nhandler = "1us"\n',
    )
    out = tmp_path / "r.json"
    assert_user_error(run_cli("run", flood, "--json", out), "source.0.rate", "events", "--force")
    # validate refuses it alike, and takes the --force its refusal names (it had none).
    # (An hour at 1e9/s: over the budget, yet a quick probe, which --force still runs.)
    long = ["--set", "duration=3600s", "--set", "source.0.rate=1e9/s"]
    assert_user_error(run_cli("validate", flood, *long), "source.0.rate", "events", "--force")
    p = run_cli("validate", flood, *long, "--force")
    assert_ok(p)
    assert "not checked: --force" in p.stdout
    assert_user_error(run_cli("run", small, "--set", "source.0.count=2147483647"), "source.0.count", "memory")
    # 2^32 - 1 slots of 8 B, 34 GB: over the limit (half the RAM) below 69 GB of RAM,
    # and the largest count the key takes; a larger machine would run it.
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if ram / 2 < (2**32 - 1) * 8:
        assert_user_error(run_cli("run", small, "--set", "fabric.slots=4294967295"), "fabric.slots", "memory")
    # --force lifts the limits, not what the allocator can give: 1.1 PB of I/O state
    # (past any x86-64 or arm64 address space) is one line, not an abort.
    disks = ["nvme.0.count=64", "nvme.0.fio.jobs=4096", "nvme.0.fio.iodepth=65535"]
    nvme = write(
        tmp_path,
        "nvme.toml",
        'name = "n"\nduration = "1ms"\n[[nvme]]\nname = "d"\ncpus = [0]\niops = "1M"\n',
    )
    args: list[object] = ["run", nvme, "--force", "--json", out]
    for s in disks:
        args += ["--set", s]
    assert_user_error(run_cli(*args), "nvme.0.fio", "cannot allocate")
    zero = write(
        tmp_path,
        "zero.toml",
        'name = "z"\nduration = "1ms"\n[[task]]\nname = "t"\nwork = "0ns"\nexception = "syscall"\n',
    )
    assert_user_error(run_cli("run", zero), "task[0].work", "takes no time")
    # Refused under --force too, for every exception (a page fault and a yield
    # with no costs ran at one instant for ever, deaf to Ctrl-C; an audit).
    for exc in ("syscall", "pagefault", "yield"):
        sets = ["--set", f"task.0.exception={exc}", "--set", "task.0.count=2"]
        assert_user_error(run_cli("run", zero, "--force", *sets, timeout=60), "task[0].work", "takes no time")
    assert_user_error(run_cli("sweep", flood, "--grid", "seed=1,2"), "source.0.rate", "grid point")
    assert not out.exists()
    # The events ceiling is a documented default; --force runs past it.
    import subprocess
    import sys

    env = {**os.environ, "CI": "true", "IRQLAB_MAX_EVENTS": "1000"}
    cmd = [sys.executable, "-m", "irqlab", "run", str(small), "--json", str(out)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    assert p.returncode == 2 and "over the limit of 1.0e3 events" in p.stderr, p.stderr
    p = subprocess.run([*cmd, "--force"], env=env, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert out.exists()
    # A ceiling that is not a number is refused, not ignored.
    p = subprocess.run(cmd, env={**env, "IRQLAB_MAX_EVENTS": "abc"}, capture_output=True, text=True)
    assert_user_error(p, "IRQLAB_MAX_EVENTS=abc", "positive number")


def test_validate_names_a_bad_expect_or_variant_entry(small, tmp_path):
    """`validate` passed them; `run --variant` then blamed a `--set` nobody typed (a review)."""
    base = small.read_text()
    expect = (
        '\n[[expect]]\nname = "a"\nmetric = "interrupts_per_s"\npublished = 1\ntolerance = 0.1\n'
        'source = "test"\nkind = "prediction"\n'
    )
    cases = [
        (expect + 'set = ["duration"]\n', ["expect[0].set (a)", "duration: expected key.path=value"]),
        (expect + 'set = ["bogus=1"]\n', ["expect[0].set (a)", "bogus"]),
        (expect + 'relative_to = ["source.0.rate=bogus"]\n', ["expect[0].relative_to (a)", "source[0].rate"]),
        (
            '\n[variants]\nmetrics = ["interrupts_per_s"]\n[[variants.run]]\nname = "v"\nset = ["duration=5"]\n',
            ["variants.run[0] (v)", "duration"],
        ),
    ]
    for extra, needles in cases:
        f = tmp_path / "s.toml"
        f.write_text(base + extra)
        line = assert_user_error(run_cli("validate", f), *needles)
        assert "--set" not in line, line


def test_validate_and_reproduce_find_a_metric_no_run_produces_before_running(small, tmp_path):
    """`validate` passed a misspelt `[[expect]]` metric, and `reproduce` found it
    only after every figure had run (minutes for the M5 ones): a 100 µs probe of
    each run now finds it, and the wrong unit of a histogram statistic, first."""
    base = small.read_text()

    def expect(metric: str, unit: str = "") -> str:
        return (
            f'\n[[expect]]\nname = "a"\nmetric = "{metric}"\npublished = 1\ntolerance = 0.1\n'
            f'unit = "{unit}"\nsource = "test"\nkind = "prediction"\n'
        )

    study = '\n[variants]\nmetrics = ["interupts_per_s"]\n[[variants.run]]\nname = "v"\nset = []\n'
    cases = [
        (expect("interupts_per_s"), ["expect[0].metric", "`interupts_per_s`", "not produced", "interrupts_per_s"]),
        (expect("irq_latency.p99", "ms"), ["expect[0].unit", "`ms`", "in ns"]),
        (study, ["variants.metrics", "`interupts_per_s`", "not produced"]),
    ]
    figures = tmp_path / "figures"
    figures.mkdir()
    for extra, needles in cases:
        f = figures / "s.toml"
        f.write_text(base + extra)
        assert_user_error(run_cli("validate", f), *needles)
        # Over the run budget (an hour simulated): the whole run would be refused
        # for it, so an error that names the metric comes from the probe, before it.
        f.write_text(base.replace('duration = "4ms"', 'duration = "3600s"', 1) + extra)
        line = assert_user_error(run_cli("reproduce", "--figures", figures, "--out", tmp_path / "r"), *needles)
        assert "limit" not in line, line
        assert not (tmp_path / "r").exists()
    # The metric as the run names it passes.
    (figures / "s.toml").write_text(base + expect("interrupts_per_s"))
    assert_ok(run_cli("validate", figures / "s.toml"))
    # The probe runs what the user's --set makes of the file (it ran the file
    # alone): GSIM's metrics exist once a --set turns it on.
    (figures / "s.toml").write_text(base + expect("gsim.mod_ns"))
    assert_user_error(run_cli("validate", figures / "s.toml"), "`gsim.mod_ns`", "not produced")
    assert_ok(run_cli("validate", figures / "s.toml", "--set", "gsim.delay_us=100"))


def test_help_shows_the_toml_table_names_its_text_gives():
    """Rich reads `[name]` in a help text as markup and drops it: `[[expect]]` once
    rendered as `[]`. Every table name a command's text gives must reach its help."""
    import re

    import typer.main
    from typer.testing import CliRunner

    from irqlab.cli import app

    group = typer.main.get_command(app)
    names = re.compile(r"\[\[?[a-z_.]+\]\]?")
    checked = 0
    for name, cmd in group.commands.items():
        texts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
        # As the help should show them: rich's escape (`\\[`) taken off first.
        wanted = {m.group(0) for t in texts for m in names.finditer(t.replace("\\[", "["))}
        if not wanted:
            continue
        shown = CliRunner().invoke(app, [name, "--help"], env={"COLUMNS": "240"}).output
        for w in wanted:
            assert w in shown, f"irqlab {name} --help lost {w}"
            checked += 1
    assert checked, "no help text names a TOML table: the test checks nothing"
