"""Rebalancing: when should a serving peer move to another stage? (pure)

The swarm's throughput is bounded by its thinnest cut. With links that are not the limit, that is
the stage whose replicas together lend the least capacity (or the holders' demand). A peer moves
from its stage to another when the bound would rise by more than `MARGIN` (hysteresis: small gains
never pay for a state download) and its own stage keeps at least one other replica. The caller
waits a random delay drawn per peer (`move_delay`) and asks again before it moves, so that when
many peers see the same shortage only the first few move and the rest see it gone (the stampede
Petals' rebalancing suffers from); a peer that just moved stays put for `MIN_DWELL_S`.

The delays alone leave a race: two peers whose delays end within one registry round trip both
confirm before either's departure shows. So a move is claimed first: the peer announces it (state
"moving"), waits for other announcements to land and decides again with `move_after_others`, in
which announced movers with a smaller id go first and larger ids yield. Every claimant orders the
same announcements the same way, so of two peers that saw one shortage and each other's claim,
exactly one moves.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Mapping
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


def move_after_others(
    stage_peers: Mapping[int, Mapping[str, float]], me: str, moving: Collection[str],
    demand: float = math.inf, margin: float = MARGIN,
) -> Move | None:  # fmt: skip
    """`me`'s move once the other announced movers have settled theirs: those with a smaller id
    go first, in id order, each making its own best move on the view the ones before it left;
    those with a larger id yield to `me` (they run this same rule and find their move gone)."""
    view = {stage: dict(peers) for stage, peers in stage_peers.items()}
    for other in sorted(peer for peer in moving if peer < me):
        move = best_move(view, other, demand, margin)
        if move is not None:
            here = next(stage for stage, peers in view.items() if other in peers)
            view[move.stage][other] = view[here].pop(other)
    return best_move(view, me, demand, margin)


def move_delay(peer_id: str, attempt: int, max_delay_s: float) -> float:
    """A per-peer pseudo-random wait in [0, max_delay_s) before confirming a move."""
    digest = hashlib.sha256(f"{peer_id}:{attempt}".encode()).digest()
    return max_delay_s * int.from_bytes(digest[:8], "big") / 2**64
