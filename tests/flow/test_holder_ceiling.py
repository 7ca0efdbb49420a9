"""The holder's ceiling (swarm/flow/holder_ceiling.py): where several holders share limited links, a
holder the swarm refused keeps that demand home until room news, so a crash does not pour it back
into the swarm, and a join or a holder that wants less lets it push again."""

from __future__ import annotations

import dataclasses
import random

import pytest

from swarm.flow import cost
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.churn import add_random_peer, remove_random_peer
from swarm.flow.generate import random_instance
from swarm.flow.holder_agent import HolderAgent
from swarm.flow.instance import PeerSpec
from swarm.flow.messages import Envelope, Offer, RoomNews
from swarm.flow.reference import max_flow_value
from swarm.routing.codec import from_wire, to_wire

EXACT = 1e-6


def converged(seed: int = 2, holders: int = 3, link_capacity: bool = True) -> MessageBus:
    """6 stages x 4 peers; on seed 2 the swarm refuses part of every holder's demand."""
    inst = dataclasses.replace(random_instance(24, 6, holders, seed), link_capacity=link_capacity)
    bus = MessageBus(inst, seed=seed)
    assert bus.run_until_quiescent().quiescent
    return bus


def holders(bus: MessageBus) -> list[HolderAgent]:
    return [a for a in bus.agents.values() if isinstance(a, HolderAgent)]


def recording(bus: MessageBus) -> list:
    """Every envelope the bus carries from now on."""
    seen: list = []
    original = bus.transmit

    def transmit(env: Envelope) -> None:
        seen.append(env)
        original(env)

    bus.transmit = transmit  # type: ignore[method-assign]
    return seen


def settled_exactly(bus: MessageBus) -> None:
    assert bus.run_until_quiescent().quiescent
    assert violations(bus) == []
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(bus.instance), abs=EXACT)


def test_a_refused_holder_caps_what_it_sends_at_what_the_swarm_carries() -> None:
    bus = converged()
    settled_exactly(bus)
    for h in holders(bus):
        assert h.ceiling is not None and h.demand > h.ceiling + EXACT
        assert h.served() == pytest.approx(h.ceiling, abs=EXACT)
        assert h.supply(h.id) == pytest.approx(h.ceiling, abs=EXACT)


@pytest.mark.parametrize("victim", range(24))
def test_after_a_crash_no_holder_sends_past_its_ceiling_and_the_flow_is_the_new_maximum(victim: int) -> None:
    """Every peer of the swarm in turn: a crash never raises the maximum, so what a holder sent at
    most (offers in flight included) stays under its ceiling, displaced flow goes back in, and the
    protocol still ends at the exact maximum."""
    bus = converged()
    ceilings = {h.id: h.ceiling for h in holders(bus)}
    peer = sorted(p.id for p in bus.instance.peers)[victim]
    if len(bus.instance.peers_of(bus.instance.node(peer).stage)) < 2:
        pytest.skip("the last peer of its stage")
    most = dict.fromkeys(ceilings, 0.0)

    def watch() -> None:
        for h in holders(bus):
            most[h.id] = max(most[h.id], h.served() + h.offered(h.id))

    bus.remove_peer(peer)
    assert bus.run_until_quiescent(watch=watch, every=bus.retry_s / 8).quiescent
    settled_exactly(bus)
    for h, top in ceilings.items():
        assert top is not None and most[h] <= top + EXACT


def test_a_join_lifts_the_ceilings_and_the_new_capacity_is_used() -> None:
    """A big peer joins the stage that limits the flow: its room news reaches the holders (none of
    them is its neighbour), they push again, and the flow grows to the new exact maximum."""
    bus = converged()
    before = cost.flow_value(bus.routes())
    seen = recording(bus)
    stage = min(range(bus.instance.stages), key=lambda s: sum(p.capacity for p in bus.instance.peers_of(s)))
    mate = bus.instance.peers_of(stage)[0]
    bus.add_peer(PeerSpec("big", stage, 50.0, mate.compute_s, mate.region))
    settled_exactly(bus)
    told = {env.dst for env in seen if isinstance(env.body, RoomNews)}
    assert sorted(told) == sorted(h.id for h in holders(bus))
    assert max_flow_value(bus.instance) > before + 0.1  # (the join did add room)
    assert cost.flow_value(bus.routes()) > before + 0.1


def test_a_holder_that_wants_less_tells_the_others() -> None:
    bus = converged()
    first, *others = holders(bus)
    assert all(h.ceiling is not None for h in others)
    bus.set_demand(first.id, first.served() / 4)
    bus.run_until(bus.now + bus.retry_s / 2)  # (room news delivered; a new cap takes 4 periods)
    assert all(h.ceiling is None for h in others)
    settled_exactly(bus)


def test_room_news_from_any_node_is_taken_and_a_forged_one_costs_nothing_but_a_push() -> None:
    """From a node nobody knows: the holder lifts its ceiling, tries, is refused again and caps
    again at the same flow."""
    bus = converged()
    h = holders(bus)[0]
    flow = cost.flow_value(bus.routes())
    h.receive(Envelope("mallory", h.id, 1, 1, RoomNews()), bus.now)
    assert h.ceiling is None
    settled_exactly(bus)
    assert cost.flow_value(bus.routes()) == pytest.approx(flow, abs=EXACT)
    assert h.ceiling is not None


@pytest.mark.parametrize(("holders_", "limits"), [(1, True), (3, False)])
def test_no_ceilings_with_one_holder_or_unlimited_links(holders_: int, limits: bool) -> None:
    """There relabel epochs drain what gets stuck (swarm/flow/holder_agent.py), and a join sends no
    room news at all."""
    bus = converged(holders=holders_, link_capacity=limits)
    seen = recording(bus)
    mate = bus.instance.peers_of(2)[0]
    bus.add_peer(PeerSpec("new", 2, 3.0, mate.compute_s, mate.region))
    settled_exactly(bus)
    sent = {type(env.body) for env in seen}
    assert RoomNews not in sent and Offer in sent
    assert all(h.ceiling is None for h in holders(bus))


def test_an_environment_without_room_news_keeps_ceilings_off() -> None:
    """The live swarm (swarm/routing/live.py): its joiners do not tell the holders yet."""
    from swarm.routing.live import LiveFlow

    assert LiveFlow.room_news is False
    inst = dataclasses.replace(random_instance(24, 6, 3, 2), link_capacity=True)
    bus = MessageBus(inst, seed=2)
    bus.room_news = False  # type: ignore[attr-defined]
    settled_exactly(bus)
    assert all(h.ceiling is None for h in holders(bus))


def test_room_news_crosses_the_codec() -> None:
    env = Envelope("joiner", "h0", 4, 9, RoomNews())
    assert from_wire(to_wire(env)) == env


@pytest.mark.parametrize("k", [42, 54])
def test_lossy_swarms_keep_the_exact_maximum_through_random_events(k: int) -> None:
    """Two of 150 random lossy swarms where a holder that capped after 4 quiet retry periods (not
    24) did so while lost news was still being sent again, and missed the exact maximum (the first
    convergence of swarm 42, a join on swarm 54)."""
    rng = random.Random(1000 + k)
    stages, per_stage, n_holders = rng.randint(3, 8), rng.randint(2, 6), rng.randint(2, 4)
    inst = random_instance(stages * per_stage, stages, n_holders, 1000 + k)
    inst = dataclasses.replace(inst, link_capacity=True)
    bus = MessageBus(inst, seed=k, loss=0.05)
    settled_exactly(bus)
    for e in range(12):
        kind = rng.choice(["crash", "join", "cap", "demand"])
        if kind == "crash":
            remove_random_peer(bus, rng)
        elif kind == "join":
            add_random_peer(bus, rng, f"j{k}_{e}")
        elif kind == "cap":
            p = rng.choice(bus.instance.peers)
            bus.set_capacity(p.id, max(0.1, p.capacity * rng.choice([0.5, 2.0])))
        else:
            h = rng.choice(bus.instance.holders)
            bus.set_demand(h.id, max(0.1, h.demand * rng.choice([0.5, 2.0])))
        settled_exactly(bus)
