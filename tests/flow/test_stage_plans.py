"""Stage plans: the exact stage re-plan (`stage_assignment.plan_stage`), the safe moves that carry it
out (`stage_moves.moves_for`) and the protocol round that asks for it (swarm/flow/stage_plans.py)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from swarm.flow import cost
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.generate import random_instance
from swarm.flow.messages import Envelope, LayerAsk, LayerInfo, LayerSwap, Offer
from swarm.flow.reference import max_flow_value
from swarm.flow.stage_assignment import plan_stage, stage_bottleneck
from swarm.flow.stage_moves import moves_for
from swarm.routing.codec import from_wire, to_wire
from tests.flow.test_exchange import recorded

# Two senders feed b1 with everything; b2 and b3 are idle and cheap. Every path costs 1 + 3 = 4
# now; a1 -> b2 -> c1 and a2 -> b3 -> c2 cost 2. A layer plan cannot get there (it keeps b1's
# throughput): only a stage plan, which moves one microbatch/s each onto b2 and b3.
FLOWS_IN = {("a1", "b1"): 1.0, ("a2", "b1"): 1.0}
FLOWS_OUT = {("b1", "c1"): 1.0, ("b1", "c2"): 1.0}
ARRIVAL = {"a1": 0.0, "a2": 0.0}
COST_IN = {("a1", "b1"): 1.0, ("a2", "b1"): 1.0, ("a1", "b2"): 1.0, ("a2", "b3"): 1.0}
COST_IN |= {("a1", "b3"): 5.0, ("a2", "b2"): 5.0}
COST_OUT = {("b1", "c1"): 3.0, ("b1", "c2"): 3.0, ("b2", "c1"): 1.0, ("b3", "c2"): 1.0}
COST_OUT |= {("b2", "c2"): 5.0, ("b3", "c1"): 5.0}
ONWARD = {"c1": 0.0, "c2": 0.0}
ROOM = {"b1": 2.0, "b2": 1.0, "b3": 1.0}


def _dear(arrival, cost_in, cost_out, onward) -> dict:
    dear = {(a, b): arrival[a] + c for (a, b), c in cost_in.items()}
    dear.update({(b, c): k + onward[c] for (b, c), k in cost_out.items()})
    return dear


def test_a_stage_plan_moves_throughput_onto_idle_peers() -> None:
    found = plan_stage(FLOWS_IN, FLOWS_OUT, ARRIVAL, COST_IN, COST_OUT, ONWARD, ROOM, 0.02)
    assert found is not None
    top, new_in, new_out = found
    assert top == pytest.approx(2.0)
    assert new_in == pytest.approx({("a1", "b2"): 1.0, ("a2", "b3"): 1.0})
    assert new_out == pytest.approx({("b2", "c1"): 1.0, ("b3", "c2"): 1.0})
    # already the plan: nothing to gain
    assert plan_stage(new_in, new_out, ARRIVAL, COST_IN, COST_OUT, ONWARD, ROOM, 0.02) is None
    # without the room on b2 and b3 no plan pays
    assert (
        plan_stage(FLOWS_IN, FLOWS_OUT, ARRIVAL, COST_IN, COST_OUT, ONWARD, {**ROOM, "b2": 0.0}, 0.02) is None
    )


def test_the_moves_are_two_hand_overs_and_never_make_the_stage_dearer() -> None:
    _, new_in, new_out = plan_stage(FLOWS_IN, FLOWS_OUT, ARRIVAL, COST_IN, COST_OUT, ONWARD, ROOM, 0.02)
    dear = _dear(ARRIVAL, COST_IN, COST_OUT, ONWARD)
    waves, end_in, end_out = moves_for(FLOWS_IN, FLOWS_OUT, new_in, new_out, dear, 4.0)
    assert [[m[0] for m in wave] for wave in waves] == [["hand"], ["hand"]]  # (both touch b1)
    assert {m[1:5] for wave in waves for m in wave} == {("a1", "b1", "b2", "c1"), ("a2", "b1", "b3", "c2")}
    assert end_in == pytest.approx(new_in) and end_out == pytest.approx(new_out)
    # a limit below what the hand-overs' paths cost: no move is safe
    assert moves_for(FLOWS_IN, FLOWS_OUT, new_in, new_out, dear, 1.5)[0] == []


def _least_top(flows_in, flows_out, inc, outc, room) -> float:
    """Brute force: every in-threshold per stage peer, every threshold T, an LP for feasibility."""
    senders = sorted({a for a, _ in flows_in})
    mids = sorted(room)
    takers = sorted({c for _, c in flows_out})
    supply = [sum(r for (a, _), r in flows_in.items() if a == s) for s in senders]
    demand = [sum(r for (_, c), r in flows_out.items() if c == t) for t in takers]
    tops = sorted({inc[a, b] + outc[b, c] for (a, b) in inc for (bb, c) in outc if bb == b})
    options = [sorted({v for (_, bb), v in inc.items() if bb == b}) + [-math.inf] for b in mids]
    best = math.inf
    for levels in itertools.product(*options):
        for top in tops:
            if top >= best:
                break
            ins = [(a, b) for (a, b), v in inc.items() if v <= levels[mids.index(b)] + 1e-12]
            outs = [(b, c) for (b, c), v in outc.items() if levels[mids.index(b)] + v <= top + 1e-12]
            edges = ins + outs
            if not ins or not outs:
                continue
            a_eq = [[0.0] * len(edges) for _ in range(len(senders) + len(takers) + len(mids))]
            a_ub = [[0.0] * len(edges) for _ in mids]
            for j, e in enumerate(edges):
                if j < len(ins):
                    a_eq[senders.index(e[0])][j] = 1.0
                    a_eq[len(senders) + len(takers) + mids.index(e[1])][j] = 1.0
                    a_ub[mids.index(e[1])][j] = 1.0
                else:
                    a_eq[len(senders) + takers.index(e[1])][j] = 1.0
                    a_eq[len(senders) + len(takers) + mids.index(e[0])][j] = -1.0
            b_eq = supply + demand + [0.0] * len(mids)
            res = linprog(
                [0.0] * len(edges),
                A_ub=a_ub,
                b_ub=[room[b] for b in mids],
                A_eq=a_eq,
                b_eq=b_eq,
                method="highs",
            )
            if res.status == 0:
                best = top
                break
    return best


@st.composite
def stages(draw):
    """A random stage: 2 senders, 3 stage peers, 2 receivers, every pair linked, flows through
    one or two of the peers."""
    costs = st.floats(min_value=0.1, max_value=3.0, allow_nan=False)
    senders, mids, takers = ["a1", "a2"], ["b1", "b2", "b3"], ["c1", "c2"]
    cost_in = {(a, b): draw(costs) for a in senders for b in mids}
    cost_out = {(b, c): draw(costs) for b in mids for c in takers}
    arrival = {a: draw(costs) for a in senders}
    onward = {c: draw(costs) for c in takers}
    used = draw(st.sampled_from([["b1"], ["b1", "b2"], ["b2", "b3"]]))
    flows_in = {(a, used[i % len(used)]): 1.0 for i, a in enumerate(senders)}
    flows_out = {(used[i % len(used)], c): 1.0 for i, c in enumerate(takers)}
    room = {b: draw(st.sampled_from([1.0, 2.0])) for b in mids}
    for b in used:
        room[b] = 2.0
    return flows_in, flows_out, arrival, cost_in, cost_out, onward, room


@settings(max_examples=25, deadline=None)
@given(stages())
def test_stage_plans_are_exact_and_their_moves_safe(stage) -> None:
    flows_in, flows_out, arrival, cost_in, cost_out, onward, room = stage
    dear = _dear(arrival, cost_in, cost_out, onward)
    now = stage_bottleneck(flows_in, flows_out, dear, dear)
    inc = {e: dear[e] for e in cost_in}
    outc = {e: dear[e] for e in cost_out}
    least = _least_top(flows_in, flows_out, inc, outc, room)
    found = plan_stage(flows_in, flows_out, arrival, cost_in, cost_out, onward, room, 0.0)
    if found is None:
        assert least >= now - 1e-9  # nothing better exists
        return
    top, new_in, new_out = found
    assert least - 1e-9 <= top <= least + 1e-9  # (gain 0: the binary search is exact)
    for a in ("a1", "a2"):
        assert sum(r for (x, _), r in new_in.items() if x == a) == pytest.approx(1.0)
    for c in ("c1", "c2"):
        assert sum(r for (_, y), r in new_out.items() if y == c) == pytest.approx(1.0)
    for b in room:
        into = sum(r for (_, y), r in new_in.items() if y == b)
        assert into == pytest.approx(sum(r for (x, _), r in new_out.items() if x == b), abs=1e-9)
        assert into <= room[b] + 1e-9
    waves, end_in, end_out = moves_for(flows_in, flows_out, new_in, new_out, dear, now)
    state_in, state_out = dict(flows_in), dict(flows_out)
    for wave in waves:
        for kind, a, b, c, d, rate in wave:  # each move finds its flow and keeps the stage within now
            if kind == "hand":
                changes = [(state_in, (a, b), -rate), (state_in, (a, c), rate)]
                changes += [(state_out, (b, d), -rate), (state_out, (c, d), rate)]
            else:
                layer = state_in if kind == "in" else state_out
                changes = [
                    (layer, e, v)
                    for e, v in (((a, d), rate), ((a, b), -rate), ((c, d), -rate), ((c, b), rate))
                ]
            for layer, e, v in changes:
                layer[e] = layer.get(e, 0.0) + v
                assert layer[e] >= -1e-9
            assert stage_bottleneck(state_in, state_out, dear, dear) <= now + 1e-9
    assert {e: r for e, r in state_in.items() if r > 1e-9} == pytest.approx(end_in)
    assert {e: r for e, r in state_out.items() if r > 1e-9} == pytest.approx(end_out)


@pytest.mark.parametrize("size,stages_,seed,loss", [(40, 5, 1, 0.0), (36, 6, 2, 0.05)])
def test_stage_plans_run_in_the_swarm_with_the_flow_exact(
    size: int, stages_: int, seed: int, loss: float
) -> None:
    inst = random_instance(size, stages_, 1, seed)
    bus = MessageBus(inst, seed=seed, loss=loss)
    with recorded(bus) as sent:
        stats = bus.run_until_quiescent()
    assert stats.quiescent
    hand_overs = [e for e in sent if isinstance(e.body, LayerSwap) and e.body.onward is not None]
    steps = [e for e in sent if isinstance(e.body, Offer) and e.body.corridor_olds and not e.body.corridor]
    assert any(isinstance(e.body, LayerAsk) and e.body.stage for e in sent)
    assert any(isinstance(e.body, LayerInfo) and e.body.room >= 0.0 for e in sent)
    if loss == 0.0:
        assert hand_overs and steps  # the planner's hand-overs were asked for
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)
    assert violations(bus) == []


def test_stage_messages_cross_the_codec_and_bad_answers_change_nothing() -> None:
    for body in (
        LayerAsk("h", 3, stage=True),
        LayerInfo("h", 3, 0.5, (), room=2.5),
        LayerSwap("h", "s1p0", "s1p1", "", 0.5, onward="s2p3"),
    ):
        env = Envelope("a", "b", 4, 1, body)
        assert from_wire(to_wire(env)) == env
    inst = random_instance(40, 5, 1, 1)
    bus = MessageBus(inst, seed=1)
    bus.run_until_quiescent()
    peer = bus.agents["s2p0"]
    before = {h: dict(out) for h, out in peer.out.items()}
    for bad in (
        LayerInfo("h0", 1, 0.5, (), room=math.nan),  # no plan of that number; NaN room
        LayerSwap("h0", "s3p0", "s3p0", "", 1.0, onward="s4p0"),  # b == d
        LayerSwap("h0", "s3p0", "nobody", "", 1.0, onward="s4p0"),  # unknown peer
        LayerSwap("h0", "s3p0", "s3p1", "", math.inf, onward="s3p0"),  # z is b
        LayerAsk("nobody", 1, stage=True),  # unknown holder
    ):
        peer.on_layer("s2p1", bad)
    assert {h: dict(out) for h, out in peer.out.items()} == before
