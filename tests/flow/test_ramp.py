"""The holder's ramp (swarm/flow/ramp.py): the demand goes into the swarm in steps, each once the
last came home (or nothing more does), and the flow still ends at the exact maximum."""

from __future__ import annotations

import dataclasses

import pytest

from swarm.flow import cost
from swarm.flow.ask_budget import WIDE_DEARER_NEWS, dearer_news_to_all
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.generate import random_instance
from swarm.flow.messages import Announce, Offer
from swarm.flow.news import summary_of
from swarm.flow.ramp import NARROW_RAMP_HOPS, RAMP_STEPS, WIDE_RAMP_HOPS
from swarm.flow.reference import max_flow_value
from swarm.flow.trade_rules import LINK_LIMITED_PRICE, WORST_PATH_PRICE, trade_price
from tests.flow.test_exchange import recorded


def _holder_offers(sent: list, holder: str) -> list[float]:
    offers = [e.body for e in sent if e.src == holder and isinstance(e.body, Offer)]
    return [o.rate for o in offers if o.swap_from is None]


def test_the_demand_goes_in_step_by_step_and_ends_at_the_exact_maximum() -> None:
    inst = random_instance(5 * 8, 5, 1, seed=3)
    assert len(inst.peers_of(0)) >= NARROW_RAMP_HOPS  # (a holder with fewer sends all at once)
    demand = 0.5 * min(sum(p.capacity for p in inst.peers_of(s)) for s in range(inst.stages))
    inst = dataclasses.replace(inst, holders=(dataclasses.replace(inst.holders[0], demand=demand),))
    bus = MessageBus(inst, seed=3)
    holder = bus.agents[inst.holders[0].id]
    seen = []
    with recorded(bus) as sent:
        while not bus.quiescent() or not seen:
            bus.run_until(bus.now + bus.retry_s)
            seen.append(holder.served())
            if bus.now > 600:
                break
    first = _holder_offers(sent, holder.id)
    assert sum(first[:1]) <= demand / RAMP_STEPS + 1e-9  # the first push sends only the first step
    steps = sorted({round(s, 6) for s in seen})
    assert any(0 < s <= demand / RAMP_STEPS + 1e-6 for s in steps)  # served a step, not all
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)
    assert holder.served() == pytest.approx(demand, abs=1e-6)
    assert violations(bus) == []


@pytest.mark.parametrize("seed,loss", [(5, 0.0), (8, 0.05)])
def test_a_demand_above_what_the_swarm_carries_still_reaches_the_maximum(seed: int, loss: float) -> None:
    """Steps go in when nothing more comes home, so a demand the swarm cannot carry ends ramped
    in full and the flow at the exact maximum."""
    inst = random_instance(6 * 5, 6, 1, seed)
    inst = dataclasses.replace(inst, holders=(dataclasses.replace(inst.holders[0], demand=500.0),))
    bus = MessageBus(inst, seed=seed, loss=loss)
    stats = bus.run_until_quiescent()
    assert stats.quiescent
    holder = bus.agents[inst.holders[0].id]
    assert holder.supply(holder.id) == pytest.approx(500.0)
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)
    assert violations(bus) == []


def test_flow_lost_to_churn_goes_in_again_in_steps() -> None:
    """A stage-0 peer carrying our flow leaves: what we lost goes in again a step at a time (as in
    the first convergence), and the flow ends at the new exact maximum."""
    inst = random_instance(5 * 8, 5, 1, seed=3)
    demand = 0.5 * min(sum(p.capacity for p in inst.peers_of(s)) for s in range(inst.stages))
    inst = dataclasses.replace(inst, holders=(dataclasses.replace(inst.holders[0], demand=demand),))
    bus = MessageBus(inst, seed=3)
    bus.run_until_quiescent()
    holder = bus.agents[inst.holders[0].id]
    gone = max(holder.out[holder.id], key=lambda v: (holder.out[holder.id][v], v))
    lost = holder.out[holder.id][gone]
    assert lost > demand / RAMP_STEPS  # (more than one step to send again)
    bus.remove_peer(gone)
    assert holder.served() == pytest.approx(demand - lost, abs=1e-6)
    assert holder.supply(holder.id) == pytest.approx(demand - lost + demand / RAMP_STEPS, abs=1e-6)
    stats = bus.run_until_quiescent()
    assert stats.quiescent
    assert holder.supply(holder.id) == pytest.approx(demand, abs=1e-6)  # every step went in again
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(bus.instance), abs=1e-6)
    assert violations(bus) == []


def test_no_ramp_for_a_holder_with_many_stage_0_peers() -> None:
    """A holder with more than WIDE_RAMP_HOPS stage-0 peers sends all its demand at once."""
    inst = random_instance(120, 2, 1, seed=1)
    bus = MessageBus(inst, seed=1)
    holder = bus.agents[inst.holders[0].id]
    assert len(holder.next) > WIDE_RAMP_HOPS
    while not holder.ready:
        bus._step()
    assert holder.supply(holder.id) == pytest.approx(inst.holders[0].demand)  # all of it at once
    bus.run_until_quiescent()
    assert holder.supply(holder.id) == pytest.approx(inst.holders[0].demand)
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)


def test_no_ramp_for_a_holder_with_few_stage_0_peers() -> None:
    """A holder with fewer than NARROW_RAMP_HOPS stage-0 peers sends all its demand at once (its
    steps would all take the same few first hops, and a step cannot take back what one before it
    routed), and the flow is the exact maximum."""
    inst = random_instance(3 * 16, 16, 1, seed=6)
    bus = MessageBus(inst, seed=6)
    holder = bus.agents[inst.holders[0].id]
    assert len(inst.peers_of(0)) < NARROW_RAMP_HOPS
    while not holder.ready:
        bus._step()
    assert holder.supply(holder.id) == pytest.approx(inst.holders[0].demand)  # all of it at once
    bus.run_until_quiescent()
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)


def test_no_ramp_with_limited_links_or_without_improvement() -> None:
    inst = random_instance(4 * 4, 4, 1, seed=2)
    limited = dataclasses.replace(inst, link_capacity=True)
    for bus in (MessageBus(limited, seed=2), MessageBus(inst, improve=False)):
        holder = bus.agents[inst.holders[0].id]
        assert holder.supply(holder.id) == pytest.approx(inst.holders[0].demand)


def test_dearer_routes_are_news_for_every_upstream_neighbour() -> None:
    """A peer that sends us nothing still pushes its next flow by our route cost: it hears when the
    route gets dearer, not only our senders (docs/routing.md: "The holder's ramp"); not with limited links
    nor at peers with many upstream neighbours."""
    assert dearer_news_to_all(False, 20) and not dearer_news_to_all(True, 20)
    assert not dearer_news_to_all(False, WIDE_DEARER_NEWS + 1)
    inst = random_instance(4 * 6, 4, 1, seed=2)
    bus = MessageBus(inst, seed=2)
    bus.run_until_quiescent()
    peer = next(a for a in bus.agents.values() if getattr(a, "stage", -1) == 1 and a.prev - a.senders())
    assert peer.dearer_to_all()
    u = sorted(peer.prev - peer.senders())[0]  # sends it nothing
    now = summary_of(peer.state())
    # u last heard a route 1 s cheaper than ours is now: it must hear the dearer one
    peer._told[u] = (now[0], now[1], {h: c - 1.0 for h, c in now[2].items()})
    with recorded(bus) as sent:
        peer.announce()
        bus.run_until_quiescent()
    assert any(e.src == peer.id and e.dst == u and isinstance(e.body, Announce) for e in sent)


def test_the_trade_price_stays_where_the_simulator_was_measured_with_limited_links() -> None:
    """With the ramp the first flow is near the min-cost flow's mean path, so trades may cost their
    edges more per second saved on the worst path; not with limited links (docs/routing.md)."""
    assert trade_price(False) == WORST_PATH_PRICE == 0.75
    assert trade_price(True) == LINK_LIMITED_PRICE == 0.5
