"""`make setup`'s install step, read as `make -n` prints it (nothing is installed)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not on PATH")


def install_line(**env: str) -> str:
    """The uv command `make` would run to install the locks, under `env` (with
    every pip and uv index variable of the caller's environment removed)."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_", "MAKE"))}
    p = subprocess.run(
        ["make", "-n", "-B", "-C", str(ROOT), ".venv/.deps-installed"],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    lines = [line for line in p.stdout.splitlines() if "uv pip install" in line]
    assert len(lines) == 1, p.stdout
    return lines[0]


def test_uv_is_pointed_where_pip_is() -> None:
    # uv ignores pip's variables: a host whose only package source is a mirror or
    # a wheel directory set for pip would otherwise fail at the install.
    line = install_line(
        PIP_INDEX_URL="https://mirror.example/simple",
        PIP_EXTRA_INDEX_URL="https://extra.example/simple",
        PIP_FIND_LINKS=" /opt/wheels  /srv/wheels ",
        PIP_NO_INDEX="1",
    )
    assert line.startswith("env ")
    assert "UV_DEFAULT_INDEX='https://mirror.example/simple'" in line
    assert "UV_EXTRA_INDEX_URL='https://extra.example/simple'" in line
    assert "UV_FIND_LINKS='/opt/wheels,/srv/wheels'" in line  # uv's list is comma-separated
    assert "UV_NO_INDEX='1'" in line


def test_uv_keeps_its_own_settings_and_adds_none_unasked() -> None:
    assert "UV_" not in install_line()
    line = install_line(PIP_FIND_LINKS="/opt/wheels", UV_FIND_LINKS="/mine", PIP_NO_INDEX="0")
    assert "UV_FIND_LINKS" not in line, "uv's own variable is left to uv"
    assert "UV_NO_INDEX" not in line
