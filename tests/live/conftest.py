"""Real swarms on loopback: separate processes, each with its own DHT node and p2pd."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

# one torch thread everywhere, as the volunteers use: LayerNorm's backward reduction depends on the count
TINY = ["--batch-size", "8", "--microbatch-size", "2", "--seq-len", "32", "--threads", "1"]


def run_swarm(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, timeout=timeout
    )
    return result


def p2pd_count() -> int:
    """p2pd daemons started from this environment's hivemind (another checkout's runs don't count)."""
    out = subprocess.run(["pgrep", "-a", "-x", "p2pd"], capture_output=True, text=True)
    return sum(sys.prefix in line for line in out.stdout.splitlines())


def wait_no_p2pd(before: int, timeout: float = 20.0) -> int:
    deadline = time.monotonic() + timeout
    while p2pd_count() > before and time.monotonic() < deadline:
        time.sleep(0.5)
    return p2pd_count()


def load_weights(directory) -> dict[str, torch.Tensor]:
    return load_file(str(directory / "model.safetensors"))


@pytest.fixture
def swarm_cli():
    before = p2pd_count()
    yield run_swarm
    assert wait_no_p2pd(before) <= before, "a test left p2pd daemons running"
