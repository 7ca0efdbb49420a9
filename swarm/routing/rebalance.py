"""Rebalancing: when should a serving peer move to another stage? (pure)

The swarm's throughput is bounded by its thinnest cut. With links that are not the limit, that is
the stage whose replicas together lend the least capacity (or the holders' demand). A peer moves
from its stage to another when the bound would rise by more than `MARGIN` (hysteresis: small gains
never pay for a state download) and its own stage keeps at least one other replica. The caller
waits a random delay drawn per peer (`move_delay`) and asks again before it moves, so that when
many peers see the same shortage only the first few move and the rest see it gone (the stampede
Petals' rebalancing suffers from); a peer that just moved stays put for `MIN_DWELL_S`.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from dataclasses import dataclass

MARGIN = 0.25
MIN_DWELL_S = 60.0


@dataclass(frozen=True)
class Move:
    stage: int
    bound_before: float
    bound_after: float


def flow_bound(stage_capacity: Mapping[int, float], demand: float = math.inf) -> float:
    """Microbatches per second the swarm can carry: its thinnest stage, or what holders ask for."""
    return min([demand, *stage_capacity.values()]) if stage_capacity else 0.0


def best_move(
    stage_peers: Mapping[int, Mapping[str, float]], me: str, demand: float = math.inf, margin: float = MARGIN
) -> Move | None:
    """The stage `me` should move to (with the bounds before and after), or None to stay."""
    mine = [s for s, peers in stage_peers.items() if me in peers]
    if len(mine) != 1:
        return None
    here = mine[0]
    if len(stage_peers[here]) < 2:
        return None  # the last replica of a stage never leaves it
    capacity = {s: sum(peers.values()) for s, peers in stage_peers.items()}
    before = flow_bound(capacity, demand)
    own = stage_peers[here][me]
    best: Move | None = None
    for target in sorted(capacity):
        if target == here:
            continue
        after_caps = {**capacity, here: capacity[here] - own, target: capacity[target] + own}
        after = flow_bound(after_caps, demand)
        if after > before * (1 + margin) and (best is None or after > best.bound_after):
            best = Move(target, before, after)
    return best


def move_delay(peer_id: str, attempt: int, max_delay_s: float) -> float:
    """A per-peer pseudo-random wait in [0, max_delay_s) before confirming a move."""
    digest = hashlib.sha256(f"{peer_id}:{attempt}".encode()).digest()
    return max_delay_s * int.from_bytes(digest[:8], "big") / 2**64
