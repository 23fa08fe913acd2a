"""Helpers shared by the tests (imported as `helpers`; tests/ is on sys.path)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

# `make test-long` sets IRQLAB_LONG=1: property tests search longer there.
LONG = os.environ.get("IRQLAB_LONG") == "1"


def examples(n: int) -> int:
    """A property test's example count: `n` in `make test`, 40x in `make test-long`."""
    return n * 40 if LONG else n


def run_cli(*args: object, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    # CI=true like the CI runner: no progress bars, nothing interactive.
    env = {**os.environ, "CI": "true", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "irqlab", *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_ok(p: subprocess.CompletedProcess[str]) -> None:
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"


def assert_user_error(p: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The bad-input contract: exit 2, exactly one `error:` line, no traceback."""
    assert p.returncode == 2, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got:\n{p.stderr}"
    line = lines[0]
    assert line.startswith("error: "), line
    assert "Traceback" not in p.stderr + p.stdout
    for n in needles:
        assert n in line, f"{n!r} not in {line!r}"
    return line


def _sigint_default() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def start_cli(*args: object, stdout: int = subprocess.PIPE) -> subprocess.Popen[str]:
    """`irqlab ARGS` started in the background, as `run_cli` runs it (CI=true),
    for a test that signals or kills it while it runs. A test run started in
    the background (`make test &`, some CI runners) inherits SIGINT ignored, and
    Python then keeps it ignored: the child gets Ctrl-C back."""
    return subprocess.Popen(
        [sys.executable, "-m", "irqlab", *map(str, args)],
        env={**os.environ, "CI": "true"},
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_sigint_default,
    )


def assert_terminates(p: subprocess.Popen[str]) -> None:
    """SIGTERM ends a running `irqlab` as documented: one `error: terminated`
    line and exit 143 within a minute (killed if it does not, so no test hangs)."""
    p.send_signal(signal.SIGTERM)
    try:
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert err.strip().splitlines() == ["error: terminated"], err
