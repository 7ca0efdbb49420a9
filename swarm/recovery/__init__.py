"""Fault handling: pure decision rules (policy) shared by the live peers and the simulator."""

from swarm.recovery.policy import (
    adaptive_timeout,
    choose_replacement,
    find_break,
    stage_must_wait,
)

__all__ = ["adaptive_timeout", "choose_replacement", "find_break", "stage_must_wait"]
