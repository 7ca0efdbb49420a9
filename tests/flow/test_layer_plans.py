"""Layer plans (swarm/flow/layer_plans.py, swarm/flow/layer_assignment.py): the exact plan of one
layer lowers its most expensive path with every throughput kept, its swaps reach the plan wave by
wave, the protocol carries plans out with the flow exact, and bad layer messages change nothing."""

from __future__ import annotations

import math
import random

import pytest

from swarm.flow import cost
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.generate import random_instance
from swarm.flow.layer_assignment import after_swaps, layer_bottleneck, plan_layer, swaps_for
from swarm.flow.layer_plans import LAYER_PLANS
from swarm.flow.messages import Envelope, LayerAsk, LayerHop, LayerInfo, LayerSwap, Offer
from swarm.flow.reference import max_flow_value
from swarm.routing.codec import from_wire, to_wire
from swarm.wire import WireError
from tests.flow.test_exchange import recorded


def _totals(flows: dict[tuple[str, str], float]) -> tuple[dict[str, float], dict[str, float]]:
    out: dict[str, float] = {}
    into: dict[str, float] = {}
    for (a, b), r in flows.items():
        out[a] = out.get(a, 0.0) + r
        into[b] = into.get(b, 0.0) + r
    return out, into


def test_a_crossed_layer_is_planned_straight() -> None:
    """a1 -> b1 and a2 -> b2 cost 1 s each where the crossed edges cost 0.2 and 0.3 s: the plan
    swaps them, and every sender sends and every receiver takes what it did."""
    flows = {("a1", "b1"): 2.0, ("a2", "b2"): 2.0}
    edge = {("a1", "b1"): 1.0, ("a2", "b2"): 1.0, ("a1", "b2"): 0.2, ("a2", "b1"): 0.3}
    arrival, onward = {"a1": 0.0, "a2": 0.0}, {"b1": 0.0, "b2": 0.0}
    found = plan_layer(flows, arrival, edge, onward, gain=0.02)
    assert found is not None
    top, plan = found
    assert top == pytest.approx(0.3)
    assert plan == pytest.approx({("a1", "b2"): 2.0, ("a2", "b1"): 2.0})
    assert _totals(plan) == _totals(flows)
    waves = swaps_for(flows, plan)
    assert [len(w) for w in waves] == [1]
    assert after_swaps(flows, waves[0]) == pytest.approx(plan)


def test_a_layer_at_its_optimum_is_left_alone() -> None:
    flows = {("a1", "b2"): 2.0, ("a2", "b1"): 2.0}
    edge = {("a1", "b1"): 1.0, ("a2", "b2"): 1.0, ("a1", "b2"): 0.2, ("a2", "b1"): 0.3}
    zero = {"a1": 0.0, "a2": 0.0, "b1": 0.0, "b2": 0.0}
    assert plan_layer(flows, zero, edge, zero, gain=0.02) is None
    assert plan_layer({("a1", "b1"): 1.0}, zero, edge, zero, gain=0.0) is None  # one sender: forced


@pytest.mark.parametrize("seed", range(12))
def test_swaps_reach_the_plan_wave_by_wave(seed: int) -> None:
    """Random layers: each wave moves only flow there is by then, the waves end at the plan, and the
    layer's most expensive path is the plan's; with `may_use`, no state on the way is dearer than
    the start."""
    rng = random.Random(seed)
    senders = [f"a{i}" for i in range(rng.randint(2, 7))]
    receivers = [f"b{i}" for i in range(rng.randint(2, 7))]
    edge = {(a, b): rng.uniform(0.05, 1.0) for a in senders for b in receivers}
    arrival = {a: rng.uniform(0.0, 2.0) for a in senders}
    onward = {b: rng.uniform(0.0, 2.0) for b in receivers}
    flows = {(a, b): rng.uniform(0.1, 3.0) for a in senders for b in receivers if rng.random() < 0.5}
    if len({a for a, _ in flows}) < 2 or len({b for _, b in flows}) < 2:
        return
    found = plan_layer(flows, arrival, edge, onward, gain=0.0, cost_gain=1e-6)
    start = layer_bottleneck(flows, arrival, edge, onward)
    if found is None:
        return
    top, plan = found
    assert top <= start + 1e-9 and _totals(plan)[0] == pytest.approx(_totals(flows)[0])
    for may_use in (None, lambda c, b: arrival[c] + edge[c, b] + onward[b] <= start + 1e-9):
        state = dict(flows)
        for wave in swaps_for(flows, plan, may_use):
            for a, b, c, d, rate in wave:
                assert state.get((a, b), 0.0) >= rate - 1e-9 and state.get((c, d), 0.0) >= rate - 1e-9
            state = after_swaps(state, wave)
            if may_use is not None:
                assert layer_bottleneck(state, arrival, edge, onward) <= start + 1e-9
        if may_use is None:
            assert state == pytest.approx(plan, abs=1e-6)


@pytest.mark.parametrize("seed,loss", [(2, 0.0), (10, 0.05)])
def test_plans_are_carried_out_with_the_flow_exact(seed: int, loss: float) -> None:
    inst = random_instance(6 * 6, 6, 1, seed)
    bus = MessageBus(inst, seed=seed, loss=loss)
    with recorded(bus) as sent:
        stats = bus.run_until_quiescent()
    assert stats.quiescent
    swaps = [e for e in sent if isinstance(e.body, LayerSwap)]
    asks = [e for e in sent if isinstance(e.body, Offer) and e.body.layer_partner is not None]
    if loss == 0.0:
        assert swaps and asks and len(asks) <= len(swaps)  # (a swap whose flow moved meanwhile is dropped)
    asks = [e for e in sent if isinstance(e.body, LayerAsk)]
    for p in {e.src for e in asks}:  # (a stage plan's asks go to the planner's mates)
        senders = sum(not e.body.stage and e.src == p for e in asks)
        mates = sum(e.body.stage and e.src == p for e in asks)
        assert senders <= LAYER_PLANS * len(bus.agents[p].prev)
        assert mates <= LAYER_PLANS * len(bus.instance.peers_of(bus.agents[p].stage))
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)
    assert violations(bus) == []


def test_layer_messages_cross_the_codec_and_bad_ones_change_nothing() -> None:
    info = LayerInfo("h", 3, 0.5, (LayerHop("s1p0", 1.0, 0.2, 1.5),))
    for body in (LayerAsk("h", 3), info, LayerSwap("h", "s1p0", "s1p1", "s0p2", 0.5)):
        env = Envelope("a", "b", 4, 1, body)
        assert from_wire(to_wire(env)) == env
    raw = to_wire(Envelope("a", "b", 4, 1, info))
    for bad in ({"arrival": "x"}, {"plan": 1.5}, {"hops": [{"_t": "LayerHop", "hop": 1}]}):
        with pytest.raises(WireError):
            from_wire({**raw, "body": {**raw["body"], **bad}})

    inst = random_instance(6 * 6, 6, 1, 2)
    bus = MessageBus(inst, seed=2)
    bus.run_until_quiescent()
    before = bus.routes()
    h = inst.holders[0].id
    planner = bus.agents["s2p0"]
    sender = next(iter(sorted(planner.prev)))
    # a peer of the stage before the planner's: unknown holders, hops and partners, NaN, non-neighbours
    a = bus.agents[sender]
    hop = next(v for v, r in a.out[h].items() if r > 0)
    other = next(v for v in sorted(a.next) if v != hop)
    bad_swaps = [
        ("s2p0", LayerSwap("nobody", hop, other, "s1p1", 1.0)),
        ("s2p0", LayerSwap(h, "zz", other, "s1p1", 1.0)),
        ("s2p0", LayerSwap(h, hop, hop, "s1p1", 1.0)),
        ("s2p0", LayerSwap(h, hop, other, sender, 1.0)),
        ("s2p0", LayerSwap(h, hop, other, "s1p1", math.nan)),
        ("s2p0", LayerSwap(h, hop, other, "s1p1", -1.0)),
        ("s4p0", LayerSwap(h, hop, other, "s1p1", 1.0)),  # not a neighbour of a
        ("s2p0", LayerAsk("nobody", 1)),
    ]
    with recorded(bus) as sent:
        for src, body in bad_swaps:
            a.receive(Envelope(src, sender, -1, 1, body), bus.now)
        planner._plan = None
        planner._plans_left = 1
        planner.start_plan(h)
        assert planner._plan is not None
        for src in sorted(planner.prev):
            nan_info = LayerInfo(h, planner._plan_seq, math.nan, ())
            planner.receive(Envelope(src, "s2p0", -1, 1, nan_info), bus.now)
            bad_hop = LayerInfo(h, planner._plan_seq, 0.1, (LayerHop("s2p1", -1.0, 0.1, 0.1),))
            planner.receive(Envelope(src, "s2p0", -1, 1, bad_hop), bus.now)
        assert planner._plan.infos == {}
        planner._plan = None  # (the senders' true answers then find no plan open)
        bus.run_until_quiescent()
    assert not any(isinstance(e.body, Offer) and e.body.layer_partner for e in sent)
    assert bus.routes() == before
    assert violations(bus) == []
