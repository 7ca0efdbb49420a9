"""Shared helpers for the routing-engine tests."""

from __future__ import annotations

from typing import Any

import pytest

from swarm.flow import cost
from swarm.flow.check import violations
from swarm.flow.instance import HolderSpec, Instance, Link, PeerSpec


def explicit(
    stages: int,
    peers: list[tuple[str, int, float, float]],
    holders: list[tuple[str, float]],
    latency_s: float = 0.01,
    bandwidth: float = 1e8,
    overrides: dict | None = None,
) -> Instance:
    """An instance with explicit links: every pair gets (latency, bandwidth) unless overridden."""
    ps = tuple(PeerSpec(i, s, c, comp) for i, s, c, comp in peers)
    hs = tuple(HolderSpec(i, d, 0.0) for i, d in holders)
    ids = [p.id for p in ps] + [h.id for h in hs]
    links = {(a, b): Link(latency_s, bandwidth) for a in ids for b in ids if a < b}
    for (a, b), link in (overrides or {}).items():
        links.pop((b, a), None)
        links[(a, b)] = link
    return Instance(
        stages=stages, activation_bytes=1e6, holders=hs, peers=ps, geo=False, explicit_links=links
    )


def assert_keeps_flows_and_room(inst: Instance, routes: Any, tables: Any) -> None:
    """An offline bound's routes (`tables`) from the protocol's (`routes`): every holder keeps its
    flow, conserved at every peer, and no peer carries more than its capacity."""
    for h in routes:
        assert cost.flow_value({h: tables[h]}) == pytest.approx(cost.flow_value({h: routes[h]}), abs=1e-6)
        for p in inst.peers:
            into = sum(row.get(p.id, 0.0) for row in tables[h].values())
            assert into == pytest.approx(sum(tables[h].get(p.id, {}).values()), abs=1e-6)
    for p in inst.peers:
        carried = sum(row.get(p.id, 0.0) for t in tables.values() for row in t.values())
        assert carried <= p.capacity + 1e-6


@pytest.fixture
def diamond() -> Instance:
    """h -> {a (cap 2), b (cap 3)} -> c (cap 4) -> h, demand 10: the flow is 4, stage 1 limits it."""
    return explicit(2, [("a", 0, 2.0, 0.1), ("b", 0, 3.0, 0.3), ("c", 1, 4.0, 0.1)], [("h", 10.0)])


def settle_flows_set_by_hand(bus: Any, holder: Any, peers: dict[str, Any]) -> None:
    """After a test set `peers`' flows by hand: no moves but a walk's (budgets at 0, the holder's
    walks spent), every peer told its neighbours' states, and the bus run quiet without violations."""
    holder.budget = holder._walks_left = 0
    for agent in peers.values():
        agent._worst_cache.clear()
        agent._swap_tried.clear()
        agent.now = bus.now
        agent.swap_budget = agent.budget = agent.corridor_budget = 0
    for agent in peers.values():
        for other in sorted(agent.prev | agent.next):
            if other in peers:
                agent.observe(peers[other].state())
    for agent in peers.values():
        agent.disturbed()
        agent.settle()
    bus.run_until_quiescent()
    assert violations(bus) == []
