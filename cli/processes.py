"""Stopping the child processes of local swarms (CLI runs, benchmarks and tests share this)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable


def stop_processes(procs: Iterable[subprocess.Popen], grace_s: float = 30.0) -> None:
    """Ctrl-C every live process, give them `grace_s` in all to leave cleanly, then SIGKILL whatever
    is left of each process group (each child runs in its own session, with its p2pd and DHT)."""
    procs = list(procs)
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + grace_s
    for proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()
