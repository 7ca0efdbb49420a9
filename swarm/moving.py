"""A volunteer's side of rebalancing: watch the registry for a move that pays, claim it, decide.

The decisions are pure (swarm/routing/rebalance.py); this module reads the registry, waits the
delays and publishes the claim.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time

from swarm.holder.holder import HOLDER_PART
from swarm.node import SwarmNode
from swarm.presence import VIEW_S, Presence
from swarm.routing.rebalance import Move, move_after_others, move_delay

log = logging.getLogger(__name__)


async def watch_for_move(node: SwarmNode, stages: int, stop: asyncio.Event, every_s: float) -> Move | None:
    """Check the registry every `every_s`; a move must hold again after a random delay (no
    stampede), and a peer stays at least three periods where it is (no flapping)."""
    since = time.monotonic()
    attempt = 0
    while not stop.is_set():
        try:
            await asyncio.wait_for(stop.wait(), every_s)
            return None
        except asyncio.TimeoutError:
            pass
        if time.monotonic() - since < 3 * every_s:
            continue
        move = await _move_now(node, stages)
        if move is None:
            continue
        attempt += 1
        try:
            await asyncio.wait_for(stop.wait(), move_delay(node.peer_id, attempt, every_s))
            return None
        except asyncio.TimeoutError:
            pass
        confirmed = await _move_now(node, stages)
        if confirmed is not None and confirmed.stage == move.stage:
            return confirmed
    return None


async def claim_move(node: SwarmNode, presence: Presence, stages: int, move: Move) -> Move | None:
    """Announce the move, let other peers' announcements land, and move only if it still holds
    with the movers ahead of us settled (swarm/routing/rebalance.py); otherwise serve on."""
    presence.update(state="moving")
    started = time.monotonic()
    try:
        await presence.publish()
    except Exception as exc:  # noqa: BLE001 - unannounced, the claim would not be seen: stay
        log.warning("could not announce a move: %s", exc)
        return None
    # Two claimants both move only if one's commit ("leaving") reaches the registry after the
    # other's decision; waiting twice what our own store took covers a slow registry too.
    await asyncio.sleep(max(VIEW_S, 2 * (time.monotonic() - started)))
    claimed = await _move_now(node, stages)
    if claimed is not None and claimed.stage == move.stage:
        return claimed
    presence.update(state="serving")
    try:
        await presence.publish()
    except Exception as exc:  # noqa: BLE001 - the next refresh publishes it again
        log.warning("could not announce staying: %s", exc)
    return None


async def _move_now(node: SwarmNode, stages: int) -> Move | None:
    """The move the registry's view asks of us now: serving peers and announced movers count
    (those that left or committed a move, "leaving", do not)."""
    try:
        peers = await node.blocking(node.registry.get_all_peers, stages)
    except Exception as exc:  # noqa: BLE001 - no view this time: do not move
        log.warning("rebalance check failed: %s", exc)
        return None
    live = {s: [r for r in peers.get(s, []) if r.serves] for s in range(HOLDER_PART, stages)}
    demand = sum(r.capacity for r in live.pop(HOLDER_PART)) or math.inf
    capacities = {s: {r.peer_id: r.capacity for r in recs} for s, recs in live.items()}
    moving = {r.peer_id for recs in live.values() for r in recs if r.state == "moving"} - {node.peer_id}
    return move_after_others(capacities, node.peer_id, moving, demand)
