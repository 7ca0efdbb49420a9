"""Deterministic fault points for tests: a process kills itself (SIGKILL) at a named point.

`SWARM_TEST_FAULT="forward@1"` kills the peer when its first forward of iteration 1 or later
reaches it (after it accepted the activations, before it computes: nothing of that iteration is
accumulated yet); `backward@1` likewise for its first backward. Nothing happens when the variable
is unset, which is always the case outside tests. `SWARM_TEST_SLOW="8"` makes every forward and
backward take 8 times its compute time (a straggler that is slow but alive).
"""

from __future__ import annotations

import os
import signal
import time

_fired: set[str] = set()


def fault_point(name: str, iteration: int) -> None:
    spec = os.environ.get("SWARM_TEST_FAULT", "")
    if not spec or spec in _fired:
        return
    point, _, at = spec.partition("@")
    if point == name and at.isdigit() and int(at) <= iteration:
        _fired.add(spec)
        if os.getpgid(0) == os.getpid():  # our own process group: take p2pd and the DHT down too
            os.killpg(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGKILL)


def straggle(compute_s: float) -> None:
    """Under `SWARM_TEST_SLOW=F`, sleep so that a hop that computed for `compute_s` takes F times that."""
    spec = os.environ.get("SWARM_TEST_SLOW", "")
    try:
        factor = float(spec) if spec else 1.0
    except ValueError:
        factor = 1.0
    if factor > 1.0:
        time.sleep((factor - 1.0) * compute_s)
