"""Shared fixtures: where scenarios live, and running the `irqlab` CLI as a user
would (a subprocess, so exit codes and stderr are the real ones)."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import irqlab
from helpers import run_cli

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data"


@pytest.fixture(scope="session")
def scenarios_dir() -> Path:
    """The bundled scenarios (package data)."""
    return irqlab.SCENARIOS_DIR


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """Scenarios owned by the tests, so they do not change when examples are tuned."""
    return DATA


@pytest.fixture(scope="session")
def small() -> Path:
    return DATA / "small.toml"


@pytest.fixture(scope="session")
def virt() -> Path:
    return DATA / "virt.toml"


@pytest.fixture
def cli():
    """`cli("run", path, "--json", out)` -> CompletedProcess (never raises on exit code)."""
    return run_cli


def _once_for_all_workers(
    tmp_path_factory: pytest.TempPathFactory, name: str, make: Callable[[Path], subprocess.CompletedProcess[str]]
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`make(dir)` run once for the whole test run, even when pytest-xdist splits it
    over workers (`make test` runs one a CPU): the first worker to ask runs it under a
    lock in the directory the workers share, the others wait and read what it left.
    The process's result is kept beside its outputs, so a reader gets the same exit
    code and output as the worker that ran it."""
    base = tmp_path_factory.getbasetemp()
    # A local worker's basetemp is popen-gwN inside this run's own directory; any
    # other parent could be shared between runs and hand one run another's result.
    shared = base.parent if "PYTEST_XDIST_WORKER" in os.environ else base
    assert shared == base or base.name.startswith("popen-gw"), base
    root = shared / name
    with open(shared / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = root / "completed.json"
        if not done.exists():
            root.mkdir(exist_ok=True)
            p = make(root)
            part = root / "completed.json.part"  # renamed whole: a crash leaves no half of it
            part.write_text(
                json.dumps(
                    {
                        "args": [str(a) for a in p.args],
                        "returncode": p.returncode,
                        "stdout": p.stdout,
                        "stderr": p.stderr,
                    }
                )
            )
            part.replace(done)
        return subprocess.CompletedProcess(**json.loads(done.read_text())), root


@pytest.fixture(scope="session")
def bundled_report(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`irqlab reproduce` of every bundled figure, run once for the whole test run:
    it takes tens of seconds, and several tests read its report (none writes to it)."""
    # 46-86 s here; beside the other worker on a slow host it could pass run_cli's
    # 300 s, which is there to stop a hang, not to time it.
    p, root = _once_for_all_workers(
        tmp_path_factory, "bundled", lambda d: run_cli("reproduce", "--out", d / "report", timeout=1800)
    )
    return p, root / "report"


@pytest.fixture(scope="session")
def example_run(tmp_path_factory) -> Callable[..., tuple[subprocess.CompletedProcess[str], dict[str, Any]]]:
    """`example_run(path, *sets)` -> (the CLI's `irqlab run PATH --set ... --json`,
    its result document), run once per (path, sets) for the session: the heavy
    M5 examples are read by several tests (shape, settling, what a user asks),
    and each run is seconds. A run that fails is returned as is, not cached."""
    cache: dict[tuple[str, ...], tuple[subprocess.CompletedProcess[str], dict[str, Any]]] = {}
    root = tmp_path_factory.mktemp("example-runs")

    def run(path: Path, *sets: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
        key = (str(path), *sets)
        if key not in cache:
            out = root / f"{len(cache)}.json"
            args: list[str] = []
            for s in sets:
                args += ["--set", s]
            p = run_cli("run", path, *args, "--json", out)
            if p.returncode != 0:
                return p, {}
            cache[key] = p, json.loads(out.read_text())
        return cache[key]

    return run
