"""Shared fixtures: where scenarios live, and running the `irqlab` CLI as a user
would (a subprocess, so exit codes and stderr are the real ones)."""

from __future__ import annotations

import subprocess
from pathlib import Path

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


@pytest.fixture(scope="session")
def bundled_report(tmp_path_factory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """`irqlab reproduce` of every bundled figure, run once for the session: it
    takes tens of seconds, and several tests read its report."""
    out = tmp_path_factory.mktemp("bundled") / "report"
    return run_cli("reproduce", "--out", out), out
