"""Move claims on a real DHT: two peers that confirm the same move at the same moment (the race
random delays leave open) claim it through the registry, and exactly one of them moves."""

from __future__ import annotations

import asyncio

from swarm.moving import claim_move
from swarm.node import SwarmNode
from swarm.presence import Presence, make_record
from swarm.routing.rebalance import best_move
from swarm.routing.table import NextHops
from tests.live.conftest import p2pd_count, wait_no_p2pd

RUN, STAGES = "claims", 2


async def serving(node: SwarmNode, stage: int, capacity: float) -> Presence:
    record = make_record(node, role="stage", stage=stage, blocks=(stage, stage + 1), throughput=capacity,
                         free_memory=1 << 30, region="")  # fmt: skip
    presence = Presence(node, record, NextHops(), STAGES)
    await presence.publish()
    return presence


def test_of_two_simultaneous_claims_exactly_one_moves() -> None:
    """Stage 0 lends 5 + 5, stage 1 lends 1: either stage-0 peer alone may move. Both claim at once;
    the smaller id moves, the other serves on, and the registry shows which is which."""
    before = p2pd_count()

    async def main() -> tuple[dict, dict]:
        nodes: list[SwarmNode] = []
        try:
            first = SwarmNode(RUN, [])
            await first.start()
            nodes.append(first)
            for _ in range(2):
                node = SwarmNode(RUN, first.maddrs())
                await node.start()
                nodes.append(node)
            a, b, c = nodes
            presences = [await serving(a, 0, 5.0), await serving(b, 0, 5.0), await serving(c, 1, 1.0)]
            view = {0: {a.peer_id: 5.0, b.peer_id: 5.0}, 1: {c.peer_id: 1.0}}
            moves = [best_move(view, n.peer_id) for n in (a, b)]
            assert all(m is not None and m.stage == 1 for m in moves)  # the race: both confirmed
            claims = await asyncio.gather(
                *(claim_move(n, p, STAGES, m) for n, p, m in zip((a, b), presences, moves))
            )
            records = await c.blocking(c.registry.get_all_peers, STAGES)
            states = {r.peer_id: r.state for r in records[0]}
            return dict(zip((a.peer_id, b.peer_id), claims)), states
        finally:
            for node in reversed(nodes):
                await node.shutdown()

    claims, states = asyncio.run(main())
    movers = [peer for peer, claim in claims.items() if claim is not None]
    assert movers == [min(claims)], claims
    assert claims[movers[0]].stage == 1
    stayer = max(claims)
    assert states == {movers[0]: "moving", stayer: "serving"}  # the mover commits next ("leaving")
    assert wait_no_p2pd(before) <= before
