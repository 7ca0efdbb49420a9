"""Run the real `swarm` command in a subprocess, as a user would."""

from __future__ import annotations

import subprocess
import sys

import pytest


def run_swarm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def swarm_cli():
    return run_swarm
