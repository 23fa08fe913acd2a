"""Outputs never lie (issue 11, item 5): all requested outputs or none; FIFOs and
symlinks are written through, never replaced; '-' is stdout for one output."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

from helpers import assert_ok, assert_user_error, run_cli


def test_a_failing_trace_leaves_no_json_behind(small, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a directory is needed")
    out = tmp_path / "o.json"
    p = run_cli("run", small, "--json", out, "--trace", blocker / "t.pftrace")
    assert_user_error(p, "t.pftrace", "cannot write")
    assert not out.exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == ["blocker"], "no temp file either"


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
