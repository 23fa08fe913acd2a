"""The plumbing every command relies on: atomic writes and quiet output when
not on a terminal."""

from __future__ import annotations

import os
import pty
import subprocess
import sys

import pytest

from helpers import assert_ok, run_cli
from irqlab._util import UserError, atomic_write, check_overrides, one_line, progress_enabled


def test_atomic_write_replaces_whole_files_and_leaves_no_temp(tmp_path):
    dest = tmp_path / "sub" / "out.json"
    atomic_write(dest, "x" * 10_000)
    atomic_write(dest, "short")
    assert dest.read_text() == "short"
    assert sorted(p.name for p in dest.parent.iterdir()) == ["out.json"]
    # Written files get the usual umask-derived mode, not mkstemp's 0600.
    umask = os.umask(0)
    os.umask(umask)
    assert dest.stat().st_mode & 0o777 == 0o666 & ~umask


def test_atomic_write_failure_is_a_user_error_and_keeps_the_old_file(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("old")
    with pytest.raises(UserError, match="cannot write"):
        atomic_write(blocker / "child.json", "new")  # parent is a file
    assert blocker.read_text() == "old"
    with pytest.raises(UserError):
        atomic_write(tmp_path, "x")  # destination is a directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_check_overrides_and_one_line():
    assert check_overrides(["a.b=1", "c=x=y"]) == ["a.b=1", "c=x=y"]
    with pytest.raises(UserError, match="KEY=VALUE"):
        check_overrides(["=1"])
    # One key given twice, however it is spelt; the same value twice, quoted or not, is taken.
    with pytest.raises(UserError, match=r"source\.0\.rate given twice \(1/s, then 2/s\)"):
        check_overrides(["source.0.rate=1/s", "source[0].rate=2/s"])
    assert check_overrides(["duration=10ms", 'duration="10ms"']) == ["duration=10ms", 'duration="10ms"']
    assert one_line("a\n  |\n  b  \n") == "a | b"


def test_progress_is_off_in_ci(monkeypatch):
    monkeypatch.setenv("CI", "true")
    assert progress_enabled() is False


def test_piped_sweep_output_has_no_progress_bar(small, tmp_path):
    p = run_cli("sweep", small, "--grid", "seed=1,2", "--out", tmp_path / "s.parquet")
    assert_ok(p)
    assert p.stderr == ""  # the bar would draw on stderr


def test_a_terminal_gets_a_progress_bar(small, tmp_path):
    primary, secondary = pty.openpty()
    # A terminal that can redraw, whatever the runner's: rich draws no live bar
    # on TERM=dumb or unknown (a review saw this test fail under TERM=dumb,
    # which CI runners without a terminal often set), nor with its TTY_*
    # overrides saying otherwise.
    drop = {"CI", "TERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS", "LINES"}
    env = {k: v for k, v in os.environ.items() if k not in drop} | {"TERM": "xterm-256color"}
    p = subprocess.run(
        [sys.executable, "-m", "irqlab", "sweep", small, "--grid", "seed=1,2,3", "--out", tmp_path / "s.parquet"],
        stdout=subprocess.DEVNULL,
        stderr=secondary,
        env=env,
        timeout=120,
    )
    os.close(secondary)
    seen = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:  # EIO: the pty has no writer left
            break
        if not chunk:
            break
        seen += chunk
    os.close(primary)
    assert p.returncode == 0
    assert b"sweep (3 runs)" in seen


def test_output_problem_names_what_is_in_the_way(tmp_path) -> None:
    """Checked before a command works: a FIFO or device is written through (no
    temp file beside it), a directory is no file, a file is no directory."""
    import os

    from irqlab._util import output_problem

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    assert output_problem("-") is None
    assert output_problem(fifo) is None and output_problem("/dev/null") is None
    assert output_problem(tmp_path / "new" / "deeper" / "r.json") is None
    assert output_problem(tmp_path) == "is a directory; expected a file"
    assert output_problem(blocker, "directory") == "exists and is not a directory; expected a directory"
    assert output_problem(blocker / "r.json") == f"{blocker} is not a directory"
    assert output_problem(tmp_path, "any") is None
    if os.path.isdir("/proc"):  # permission bits say root may write there; trying says no
        assert str(output_problem("/proc/irqlab-nope/o.json")).startswith("cannot write in /proc")


def test_a_signal_in_a_deferred_block_takes_effect_at_its_end() -> None:
    # A sweep's last part, its merge and its parts' removal must not stop half-way
    # (an interrupt there left a temp file, or a file beside half its parts).
    import os
    import signal

    import pytest

    from irqlab._util import signals_deferred

    steps = []
    with pytest.raises(KeyboardInterrupt), signals_deferred():
        os.kill(os.getpid(), signal.SIGINT)
        steps.append("after the signal")
    assert steps == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

    class Stop(Exception):
        pass

    def stop(signum, frame):
        raise Stop

    old = signal.signal(signal.SIGTERM, stop)
    try:
        with pytest.raises(Stop), signals_deferred():
            os.kill(os.getpid(), signal.SIGTERM)
            steps.append("after SIGTERM")
        assert steps[-1] == "after SIGTERM" and signal.getsignal(signal.SIGTERM) is stop
        with signals_deferred():
            steps.append("quiet")  # nothing held, nothing raised
    finally:
        signal.signal(signal.SIGTERM, old)
