"""Hand-overs of a holder's own first hops (swarm/flow/holder_hand_overs.py): on its worst-path
walks a holder asks stage-0 mates of its dearest first hop b with spare capacity to take its flow
on b over; b hands it over with its next hop, and a mate that leaves half-way is settled by a
resync, as for any asker (swarm/flow/ask_resync.py)."""

from __future__ import annotations

import random

import pytest

from swarm.flow import cost, holder_hand_overs
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.generate import random_instance
from swarm.flow.holder_agent import HolderAgent
from swarm.flow.instance import Link
from swarm.flow.messages import ExchangeDone, HandOver, Offer
from swarm.flow.peer import PeerAgent
from swarm.flow.reference import max_flow_value, min_cost_max_flow
from tests.flow.conftest import explicit
from tests.flow.test_exchange import recorded, run_until_next

NEAR, FAR = Link(0.001, 1e9), Link(0.2, 1e9)


def holder_on_a_far_peer() -> tuple[MessageBus, HolderAgent, dict[str, PeerAgent]]:
    """h -> b -> z -> h with h -> b far; b's stage mate d has spare and is near h. z is full, so
    push-relabel has nothing to move; only a hand-over (h -> d -> z) makes the path cheaper."""
    peers = [("b", 0, 1.0, 0.1), ("d", 0, 2.0, 0.1), ("z", 1, 1.0, 0.1)]
    links = {("h", "b"): FAR, ("h", "d"): NEAR, ("b", "z"): NEAR, ("d", "z"): NEAR, ("h", "z"): NEAR}
    bus = MessageBus(explicit(2, peers, [("h", 1.0)], overrides=links), seed=0)
    bus.run_until_quiescent()
    h = bus.agents["h"]
    assert isinstance(h, HolderAgent)
    p = {n: bus.agents[n] for n in "bdz"}
    h.out["h"], h.sink_in = {"b": 1.0}, {"z": 1.0}
    p["b"].inflow["h"], p["b"].out["h"] = {"h": 1.0}, {"z": 1.0}
    p["d"].inflow["h"], p["d"].out["h"] = {}, {}
    p["z"].inflow["h"], p["z"].out["h"] = {"b": 1.0}, {"h": 1.0}
    for agent in (h, *p.values()):
        agent._worst_cache.clear()
        agent.now = bus.now
    for agent in p.values():
        agent.relabel()
    for agent in (h, *p.values()):
        for other in sorted(agent.prev | agent.next):
            agent.observe(bus.agents[other].state())
    assert violations(bus) == []
    return bus, h, p


def walk_asks(h: HolderAgent, b: str) -> None:
    h.walk_asks(b, h.link(b) + h.worst_of(h.id, b))


def test_a_holder_hands_its_dear_first_hop_over_and_the_flow_keeps_its_next_hop() -> None:
    bus, h, p = holder_on_a_far_peer()
    worst_before = cost.max_path_cost(bus.instance, bus.routes())
    with recorded(bus) as sent:
        walk_asks(h, "b")
        bus.run_until_quiescent()
    assert any(isinstance(e.body, HandOver) and e.body.sender == "h" for e in sent)
    assert h.routes()["h"] == {"d": pytest.approx(1.0)}
    assert {u: r for u, r in p["z"].inflow["h"].items() if r > 1e-9} == {"d": pytest.approx(1.0)}
    assert p["b"].carried() == pytest.approx(0.0, abs=1e-9)
    assert violations(bus) == []
    assert cost.max_path_cost(bus.instance, bus.routes()) < worst_before - 0.1


def test_a_holder_asks_nothing_when_its_hand_overs_are_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holder_hand_overs, "HOLDER_HAND_OVERS", False)
    bus, h, _ = holder_on_a_far_peer()
    with recorded(bus) as sent:
        walk_asks(h, "b")
    assert not any(isinstance(e.body, Offer) for e in sent)


def test_a_mate_that_leaves_half_way_leaves_the_holders_edge_in_step() -> None:
    """d leaves right after b handed the holder's flow over: the holder asks b (`Resync`), takes
    its word for h -> b, and pushes what it got back elsewhere."""
    bus, h, p = holder_on_a_far_peer()
    walk_asks(h, "b")
    run_until_next(bus, lambda body, dst: isinstance(body, ExchangeDone) and dst == "d")
    assert p["b"].inflow["h"].get("h", 0.0) == pytest.approx(0.0, abs=1e-9)  # b moved it
    assert h.out["h"]["b"] == pytest.approx(1.0)  # the holder has not heard
    with recorded(bus) as sent:
        bus.remove_peer("d")
        bus.run_until_quiescent()
    kinds = {type(e.body).__name__ for e in sent}
    assert {"Resync", "Resynced"} <= kinds
    assert violations(bus) == []
    assert h.out["h"].get("b", 0.0) == pytest.approx(p["b"].inflow["h"].get("h", 0.0), abs=1e-9)
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(bus.instance), abs=1e-6)


@pytest.mark.parametrize("on", [True, False])
def test_holder_hand_overs_bring_a_whole_range_miss_within_five_percent(
    monkeypatch: pytest.MonkeyPatch, on: bool
) -> None:
    """Seed 1, instance 1 of the whole-range sweep (8 x 6): the worst path starts with a dear
    first hop. A small hand-over of it lets stage 0 trade (1.074 -> 1.040 of the min-cost flow's
    max path); without it the holder's first hops never move."""
    monkeypatch.setattr(holder_hand_overs, "HOLDER_HAND_OVERS", on)
    rng = random.Random(1)
    sizes = [(rng.randint(4, 16), rng.randint(3, 30), rng.randint(1, 1)) for _ in range(2)]
    stages, per_stage, holders = sizes[1]
    inst = random_instance(stages * per_stage, stages, holders, 100_003 + 1, 4 * 2**20)
    bus = MessageBus(inst, seed=100_003 + 1)
    bus.run_until_quiescent()
    assert violations(bus) == []
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), rel=1e-6)
    ratio = cost.max_path_cost(inst, bus.routes()) / cost.max_path_cost(inst, min_cost_max_flow(inst))
    assert (ratio <= 1.05) == on
