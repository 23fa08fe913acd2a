"""Helpers shared by the tests (imported as `helpers`; tests/ is on sys.path)."""

from __future__ import annotations

import os
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
