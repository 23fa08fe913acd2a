"""Outputs never lie (issue 11, item 5): all requested outputs or none; FIFOs and
symlinks are written through, never replaced; '-' is stdout for one output."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import threading

import pytest

from helpers import assert_ok, assert_user_error, run_cli


def test_a_failing_trace_leaves_no_json_behind(small, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory is needed")
    out = tmp_path / "o.json"
    p = run_cli("run", small, "--json", out, "--trace", blocker / "t.pftrace")
    assert_user_error(p, "--trace", "t.pftrace", "blocker is not a directory")
    assert not out.exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["blocker"], "no temp file either"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_device_that_fails_leaves_the_json_as_it_was(small, tmp_path):
    """`--json keep.json --trace /dev/full` failed, yet had put a complete result in
    keep.json: the file was renamed into place before the device was written (a review)."""
    kept, fresh = tmp_path / "keep.json", tmp_path / "fresh.json"
    kept.write_text("sentinel")
    for out in (kept, fresh):
        p = run_cli("run", small, "--json", out, "--trace", "/dev/full")
        assert_user_error(p, "/dev/full", "No space left on device")
    assert kept.read_text() == "sentinel"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["keep.json"], "no result, no temp file"


def test_json_into_a_fifo_is_written_through(small, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    # A daemon: if the run failed before opening the FIFO, the reader must not keep pytest alive.
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    p = run_cli("run", small, "--json", fifo)
    reader.join(timeout=60)
    assert_ok(p)
    assert json.loads(got[0])["scenario"] == "small"
    assert stat.S_ISFIFO(fifo.stat().st_mode), "the FIFO is still a FIFO"


def test_json_onto_a_symlink_replaces_its_target_not_the_link(small, tmp_path):
    target = tmp_path / "results" / "r.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    assert_ok(run_cli("run", small, "--json", link))
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert json.loads(target.read_text())["scenario"] == "small"


def test_stdout_takes_one_output(small, tmp_path):
    assert_user_error(run_cli("run", small, "--json", "-", "--trace", "-"), "only one output")
    env = {**os.environ, "CI": "true"}
    cmd = [sys.executable, "-m", "irqlab", "run", str(small)]
    p = subprocess.run([*cmd, "--trace", "-", "--json", str(tmp_path / "r.json")], capture_output=True, env=env)
    assert p.returncode == 0, p.stderr
    assert json.loads((tmp_path / "r.json").read_text())["scenario"] == "small"
    # The trace, and nothing else, on stdout: the same bytes as a trace file.
    assert_ok(run_cli("run", small, "--trace", tmp_path / "t.pftrace"))
    assert p.stdout == (tmp_path / "t.pftrace").read_bytes()


def test_an_output_that_cannot_be_written_is_refused_before_any_work(small, tmp_path):
    """Checked when the options are read: a long run or sweep is not thrown away at the end."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory is needed")
    for args, needles in [
        (
            ["run", small, "--set", "duration=1000s", "--force", "--json", blocker / "r.json"],
            ["--json", "not a directory"],
        ),
        (["run", small, "--json", tmp_path], ["--json", "is a directory; expected a file"]),
        (["sweep", small, "--grid", "seed=1,2", "--out", blocker / "x"], ["--out", "not a directory"]),
        (["reproduce", "--only", "m1-gettid", "--out", blocker], ["--out", "not a directory; expected a directory"]),
        (["record", "--duration", "1", "--out", blocker / "t.parquet"], ["--out", "not a directory"]),
        (["sweep", small, "--grid", "seed=1,2", "--out", tmp_path / "r.csv"], ["--out", "a sweep writes Parquet"]),
    ]:
        p = run_cli(*args, timeout=60)
        assert_user_error(p, *needles)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["blocker"]


def test_json_and_trace_to_one_file_are_refused(small, tmp_path):
    """Else the trace would replace the JSON and the run exit 0 with its result gone."""
    out = tmp_path / "x.json"
    (tmp_path / "link.json").symlink_to(out)
    for trace in [out, tmp_path / "." / "x.json", tmp_path / "link.json"]:
        p = run_cli("run", small, "--json", out, "--trace", trace)
        assert_user_error(p, "--json", "--trace", "name the same file")
    assert not out.exists()


def test_an_output_that_names_an_input_is_refused_and_the_input_kept(small, tmp_path):
    """`--json scenario.toml` replaced the scenario with the result, exit 0 (a review)."""
    import irqlab

    scen = tmp_path / "in.toml"
    shutil.copy(small, scen)
    (tmp_path / "link.toml").symlink_to(scen)
    before = scen.read_bytes()
    measured = tmp_path / "m.json"
    measured.write_text(json.dumps({"metrics": {"ns_per_call": 100.0}}))
    trace = tmp_path / "t.parquet"
    shutil.copy(irqlab.SCENARIOS_DIR / "traces" / "virtio-disk.parquet", trace)
    replay = irqlab.SCENARIOS_DIR / "examples" / "replay-disk.toml"
    for args, flag in [
        (("run", scen, "--json", scen), "--json"),
        (("run", scen, "--trace", tmp_path / "link.toml"), "--trace"),
        (("run", scen, "--set-from", f"{measured}:ns_per_call=source.0.handler", "--json", measured), "--json"),
        (("sensitivity", scen, "--param", "source.0.rate", "--json", scen), "--json"),
        (("bench", "--scenario", scen, "--json", scen), "--json"),
        (("replay", trace, "--scenario", replay, "--json", trace), "--json"),
    ]:
        p = run_cli(*args, timeout=120)
        assert_user_error(p, flag, "is an input of this command")
    assert scen.read_bytes() == before
    assert json.loads(measured.read_text()) == {"metrics": {"ns_per_call": 100.0}}
    assert trace.read_bytes() == (irqlab.SCENARIOS_DIR / "traces" / "virtio-disk.parquet").read_bytes()


def test_set_from_names_a_metric_that_is_not_a_number(small, tmp_path):
    import irqlab

    measured = tmp_path / "m.json"
    measured.write_text(json.dumps({"metrics": {"ns_per_call": "fast", "ops": 3, "on": True, "none": None}}))
    p = run_cli("run", small, "--set-from", f"{measured}:ns_per_call=source.0.handler")
    assert_user_error(p, "'ns_per_call' is \"fast\", expected a number")
    # A value the scenario refuses is named by its --set-from (it read as a --set never typed).
    measured.write_text(json.dumps({"metrics": {"ns_per_call": -5}}))
    spec = f"{measured}:ns_per_call=source.0.handler"
    line = assert_user_error(run_cli("run", small, "--set-from", spec), f"--set-from {spec}", "source.0.handler=-5ns")
    assert "--set source" not in line, line
    # Checked with the user's --set, as the run applies them: a measured per_op
    # that the file's entry cost leaves no body for is right once a --set lowers
    # that cost (checked alone, it was refused).
    measured.write_text(json.dumps({"metrics": {"ns_per_call": 90}}))
    yield_ = irqlab.SCENARIOS_DIR / "examples" / "wis-sched-yield.toml"
    short = ["--set", "duration=50us", "--set", "warmup=0s"]
    spec = f"{measured}:ns_per_call=task.0.body"
    assert_user_error(run_cli("run", yield_, "--set-from", spec, *short), f"--set-from {spec}", "task.0.per_op=90ns")
    assert_ok(run_cli("run", yield_, "--set-from", spec, "--set", "cpu.exception_entry=10ns", *short))
    measured.write_text(json.dumps({"metrics": {"ns_per_call": "fast", "ops": 3, "on": True, "none": None}}))
    # As the file writes them, not as Python does (it said True and None).
    for metric, shown in (("on", "true"), ("none", "null")):
        p = run_cli("run", small, "--set-from", f"{measured}:{metric}=source.0.handler")
        assert_user_error(p, f"'{metric}' is {shown}, expected a number")


def test_a_replay_scenario_without_its_trace_is_refused() -> None:
    """It would run and report zeros that look like a result."""
    import irqlab

    scenario = irqlab.SCENARIOS_DIR / "examples" / "replay-disk.toml"
    p = run_cli("run", scenario)
    assert_user_error(p, "source[0].replay", "irqlab replay TRACE --scenario")


def test_a_killed_writers_temp_file_is_removed_by_the_next_write(small, tmp_path):
    """SIGKILL runs no cleanup, so a temp file can outlive its writer; the next
    write of the same output removes it, and leaves a live writer's alone."""
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead = int(gone.stdout)  # exited: its PID names no process (reused this fast only by chance)
    orphan = tmp_path / f".r.json.irqlab-partial-{dead}-0a1b2c3d"
    live = tmp_path / ".r.json.irqlab-partial-1-0a1b2c3d"  # PID 1 is always alive
    other = tmp_path / f".other.json.irqlab-partial-{dead}-0a1b2c3d"  # another output's
    for f in (orphan, live, other):
        f.write_text("half")
    assert_ok(run_cli("run", small, "--set", "duration=1ms", "--json", tmp_path / "r.json"))
    assert json.loads((tmp_path / "r.json").read_text())["metrics"]
    assert not orphan.exists() and live.exists() and other.exists()
    leftovers = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".r.json"))
    assert leftovers == [live.name]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root to become nobody")
def test_an_output_behind_a_directory_it_cannot_search_is_one_line(small, tmp_path):
    """Not root, `--json /root/x.json` cannot even be looked at: the check
    itself raised PermissionError (a traceback) before it said so."""
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o700)  # root's; nobody may not search it
    tmp_path.chmod(0o755)
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    env = {**os.environ, "CI": "true", "HOME": str(tmp_path)}
    runs = [
        (["run", small, "--set", "duration=1ms", "--json"], "x.json"),
        (["sweep", small, "--grid", "seed=1,2", "--out"], "sw"),
    ]
    for args, name in runs:
        cmd = [*nobody, sys.executable, "-m", "irqlab", *map(str, args), str(locked / name)]
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
        assert_user_error(p, "cannot reach it", "Permission denied")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_full_stdout_is_one_line_not_a_traceback(small):
    """`irqlab run ... > /dev/full` printed a 41-line traceback (a review)."""
    env = {**os.environ, "CI": "true", "COLUMNS": "200"}
    for extra in [[], ["--format", "csv"], ["--json", "-"]]:
        with open("/dev/full", "w") as full:
            p = subprocess.run(
                [sys.executable, "-m", "irqlab", "run", str(small), *extra],
                stdout=full,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                timeout=120,
            )
        assert p.returncode == 1, p.stderr
        assert p.stderr.strip().splitlines() == ["error: cannot write the output: No space left on device"], p.stderr


def test_an_endless_scenario_file_is_one_line_not_all_of_memory(tmp_path):
    """/dev/zero was read whole: 24 GB and the OOM killer (a review)."""
    p = run_cli("validate", "/dev/zero", timeout=60)
    assert_user_error(p, "/dev/zero: more than 64 MB")


def test_set_from_keeps_a_whole_number_whole_and_refuses_infinity(small, tmp_path):
    counts = tmp_path / "counts.json"
    counts.write_text('{"metrics": {"queues": 3, "big": Infinity}}')
    out = tmp_path / "r.json"
    # 3.0 was refused by a count ("expected a whole number").
    assert_ok(run_cli("run", small, "--set-from", f"{counts}:queues=source.0.count", "--json", out))
    assert json.loads(out.read_text())["provenance"]["scenario"]["source"][0]["count"] == 3
    p = run_cli("run", small, "--set-from", f"{counts}:big=source.0.rate")
    assert_user_error(p, "metric 'big' is inf, expected a finite number")


def test_a_reader_that_goes_away_ends_the_command_as_sigpipe_would(small):
    """`irqlab run ... | head -1`: the reader closes the pipe, and the command
    ends quietly with a Unix tool's SIGPIPE status (141), not 1, which typer's
    own handling gave one write path and rich's the other, and reads as a
    failure under `set -o pipefail`. The output (132 KB) is twice a pipe's
    buffer, so the command is still writing when the reader goes."""
    cmd = [sys.executable, "-m", "irqlab", "run", str(small), "--set", "platform.cpus=1024", "--per-cpu"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    os.read(p.stdout.fileno(), 10)
    p.stdout.close()
    rc = p.wait(timeout=120)
    assert rc == 141, (rc, p.stderr.read())
    assert p.stderr.read() == b""


def test_a_reader_of_stderr_that_goes_away_ends_the_command_as_sigpipe_too():
    """`irqlab run ... 2>&1 | head`: the lines run writes to stderr after its
    table (the costs left at zero) met the closed pipe and exited 1 (an audit).
    Here stderr is a pipe whose reader is gone before the first line."""
    code = (
        "import os\n"
        "from irqlab.cli.render import err\n"
        "r, w = os.pipe()\n"
        "os.close(r)\n"
        "os.dup2(w, 2)\n"
        "err.print('a line for a reader that went away')\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert p.returncode == 141, (p.returncode, p.stdout, p.stderr)


def test_a_metric_with_no_value_reads_n_a_in_tables() -> None:
    # An unfinished M2 command's `spe.effective_mhz` is null: the summary said "None".
    from irqlab.cli.render import fmt
    from irqlab.cli.summary import human

    assert fmt(None) == "n/a"
    assert human(None, "MHz") == "n/a"
    assert fmt(3.0) == "3" and human(155.0, "MHz") == "155 MHz"


def test_an_output_in_missing_directories_creates_them(small, tmp_path):
    # As `mkdir -p` would (docs/bad-input.md); an audit found it undocumented.
    out = tmp_path / "a" / "b" / "r.json"
    assert_ok(run_cli("run", small, "--json", out))
    assert json.loads(out.read_text())["metrics"]
    assert [p.name for p in out.parent.iterdir()] == ["r.json"], "no temp file left beside it"
