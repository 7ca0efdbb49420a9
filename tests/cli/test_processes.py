"""Children of local swarms, benchmarks and tests die with the process that started them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PARENT = """
import subprocess, sys, time
from cli.processes import die_with_parent
kw = {"preexec_fn": die_with_parent} if sys.argv[1] == "guarded" else {}
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True, **kw)
print(child.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    """Running and not a zombie (an orphan is reaped by whoever adopts it, maybe late)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def _orphan_after_parent_killed(mode: str, wait_s: float) -> tuple[int, bool]:
    """Start a parent that starts a child, SIGKILL the parent: the child's pid, and whether it is
    still alive `wait_s` later (or as soon as it is gone)."""
    cmd = [sys.executable, "-c", PARENT, mode]
    parent = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + wait_s
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    return child, _alive(child)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_child_dies_with_the_process_that_started_it() -> None:
    _, alive = _orphan_after_parent_killed("guarded", 10.0)
    assert not alive
    child, alive = _orphan_after_parent_killed("plain", 1.0)  # the control: without it the child lives on
    try:
        assert alive
    finally:
        os.kill(child, signal.SIGKILL)
