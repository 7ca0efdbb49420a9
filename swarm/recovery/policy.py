"""Pure fault-handling decisions: no clocks, no I/O, no state.

The live peer and the simulator call the same functions, so what the simulator measures is what
the swarm would do. Each takes what a peer knows locally and returns a decision.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping, Sequence

MIN_TIMEOUT_S = 2.0
TIMEOUT_FACTOR = 3.0
TIMEOUT_SIGMAS = 4.0
DEFAULT_TIMEOUT_S = 20.0  # before any hop was measured: the GWTF prototype's fixed timeout


def adaptive_timeout(
    hop_seconds: Sequence[float],
    floor_s: float = MIN_TIMEOUT_S,
    default_s: float = DEFAULT_TIMEOUT_S,
) -> float:
    """How long to wait for a hop's answer before declaring the peer dead.

    A fixed 20 s timeout wastes seconds on a fast link and fires falsely on a slow one, so the
    timeout follows the measured hop times: max(3 x mean, mean + 4 sigma), never below `floor_s`.
    With no measurement yet, `default_s`.
    """
    samples = [s for s in hop_seconds if s >= 0 and math.isfinite(s)]
    if not samples:
        return default_s
    mean = sum(samples) / len(samples)
    var = sum((s - mean) ** 2 for s in samples) / len(samples)
    return max(floor_s, TIMEOUT_FACTOR * mean, mean + TIMEOUT_SIGMAS * math.sqrt(var))


def choose_replacement(
    candidates: Sequence[str],
    dead: Collection[str],
    shares: Mapping[str, float] | None = None,
    cost: Callable[[str], float] | None = None,
    load: Mapping[str, int] | None = None,
) -> str | None:
    """Pick the peer a sender re-sends a microbatch to after its next hop failed.

    Prefer what the routing table already plans: among live peers with a share, the one with the
    most share per queued microbatch. Without one (the table is stale or empty), the cheapest live
    candidate by `cost` (GWTF edge cost) plus queued work, ties by id so the choice is reproducible.
    None when no candidate is alive (the stage must wait, see `stage_must_wait`).
    """
    live = [c for c in candidates if c not in dead]
    if not live:
        return None
    load = load or {}
    planned = [c for c in live if shares and shares.get(c, 0.0) > 0.0]
    if planned:
        return max(planned, key=lambda c: (shares[c] / (1 + load.get(c, 0)), c))  # type: ignore[index]
    if cost is None:
        return min(live, key=lambda c: (load.get(c, 0), c))
    return min(live, key=lambda c: (cost(c) * (1 + load.get(c, 0)), c))


def find_break(path: Sequence[str], alive: Callable[[str], bool]) -> int | None:
    """Index of the first dead hop along a microbatch's recorded path, None if all live.

    Re-execution starts there: the hop before it (or the data holder for index 0) still holds the
    activations it sent, so it re-sends them to a replacement; everything upstream is kept.
    """
    for index, peer in enumerate(path):
        if not alive(peer):
            return index
    return None


def stage_must_wait(live_peers: Collection[str]) -> bool:
    """A stage with no live peer cannot be routed around: its microbatches wait for a join."""
    return len(live_peers) == 0


STAGE_RECOVERY = ("auto", "checkpoint", "neighbours")


def restore_source(
    method: str, current: int, checkpoint_iteration: int | None, max_age: int, neighbours_alive: bool
) -> str:
    """Where a peer restoring a stage that lost every replica takes its state from: 'seed' (the run
    has not trained yet), 'checkpoint' or 'neighbours' (CheckFree: the adjacent stages' average).

    `auto` uses the checkpoint while it is at most `max_age` iterations old and the neighbours
    after that; either method falls back to the other when its source is missing.
    """
    if method not in STAGE_RECOVERY:
        raise ValueError(f"unknown stage recovery {method!r} (use {', '.join(STAGE_RECOVERY)})")
    has_checkpoint = checkpoint_iteration is not None
    can_rebuild = neighbours_alive and current > 0
    if method == "auto":
        fresh = has_checkpoint and current - checkpoint_iteration <= max_age
        method = "checkpoint" if fresh or not can_rebuild else "neighbours"
    if method == "checkpoint" and has_checkpoint:
        return "checkpoint"
    if can_rebuild:
        return "neighbours"
    return "checkpoint" if has_checkpoint else "seed"
