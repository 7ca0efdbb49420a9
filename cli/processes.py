"""Stopping the child processes of local swarms (CLI runs, benchmarks and tests share this)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterable


def die_with_parent() -> None:
    """`preexec_fn` of a child process: it gets SIGTERM when the process that started it dies,
    however it dies (Linux; a no-op elsewhere). Children run in their own sessions, so without it a
    killed initiator, benchmark or test run leaves its volunteers (and their p2pd daemons) running.
    The signal follows the starting thread, so start children from a thread that outlives them."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


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
