"""The routing nodes' reliable channel: acknowledgements ride on replies, and only count from the
node a message went to; envelopes with acknowledgements cross the wire codec intact."""

from __future__ import annotations

from collections import Counter

import pytest

from swarm.flow.bus import MessageBus
from swarm.flow.generate import random_instance
from swarm.flow.messages import Ack, Announce, Envelope, State
from swarm.routing.codec import from_wire, to_wire
from swarm.wire import WireError


def test_acknowledgements_ride_on_the_next_message() -> None:
    bus = MessageBus(random_instance(12, 3, 1, seed=4), seed=4)
    kinds: Counter[str] = Counter()
    transmit = bus.transmit

    def count(env: Envelope) -> None:
        if isinstance(env.body, Ack):
            kinds["alone"] += 1 + len(env.acks)
        else:
            kinds["reliable"] += env.seq > 0
            kinds["riding"] += len(env.acks)
        transmit(env)

    bus.transmit = count  # type: ignore[method-assign]
    assert bus.run_until_quiescent().quiescent
    assert all(not agent._unacked for agent in bus.agents.values())  # every one was acknowledged
    assert kinds["riding"] + kinds["alone"] == kinds["reliable"]
    assert kinds["riding"] > 0  # replies carry some: fewer messages than one ack each


def test_an_acknowledgement_counts_only_from_the_addressee() -> None:
    bus = MessageBus(random_instance(6, 2, 1, seed=1), seed=1)
    while not any(agent._unacked for agent in bus.agents.values()):
        bus._step()
    agent = next(a for a in bus.agents.values() if a._unacked)
    seq, (sent, _) = next(iter(agent._unacked.items()))
    stranger = next(n for n in bus.agents if n not in (sent.dst, agent.id))
    agent.receive(Envelope(stranger, agent.id, 0, 0, Ack(seq)), bus.now)
    assert seq in agent._unacked
    agent.receive(Envelope(sent.dst, agent.id, 0, 0, Ack(-5), (seq,)), bus.now)
    assert seq not in agent._unacked


def test_envelopes_with_acknowledgements_cross_the_codec() -> None:
    env = Envelope("a", "b", 3, 2, Announce(State("a", 1, 0.5, {"h": 2}, {"h": 1.0}, {})), (4, 9))
    assert from_wire(to_wire(env)) == env
    raw = to_wire(env)
    for bad in ("4,9", [4, "x"], list(range(5000))):
        with pytest.raises(WireError):
            from_wire({**raw, "acks": bad})


def test_a_neighbour_wrongly_thought_gone_gets_work_again() -> None:
    """A failed call makes a peer write a live neighbour off; both sides drop the same flows, and
    once the neighbour is rediscovered the flow is consistent and maximal again (a stale in-flow
    used to block the neighbour's capacity for good)."""
    from swarm.flow import cost
    from swarm.flow.check import violations
    from swarm.flow.messages import NeighbourGone, NeighbourJoined
    from swarm.flow.reference import max_flow_value

    inst = random_instance(6, 2, 1, seed=3)
    bus = MessageBus(inst, seed=3)
    bus.run_until_quiescent()
    h = inst.holder_ids()[0]
    u, v = next(
        (u, v)
        for u in (p.id for p in inst.peers_of(0))
        for v, rate in bus.agents[u].out[h].items()
        if rate > 1e-6
    )
    bus.agents[u].notify(NeighbourGone(v), bus.now)  # v is alive: only u thinks it gone
    bus.run_until_quiescent()
    assert bus.agents[v].inflow[h].get(u, 0.0) == 0.0  # v dropped what u wrote off
    bus.agents[u].notify(NeighbourJoined(v, 1), bus.now)
    bus.agents[v]._told.pop(u, None)  # v is told u rediscovered it (the DHT does it live)
    bus.agents[v].announce()
    assert bus.run_until_quiescent().quiescent
    assert violations(bus) == []
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)
