"""Stage plans over every holder's flow at once (`shared_stage.plan_shared_stage`), the pairs of
hand-overs across holders that carry them out (`stage_moves.moves_for` with `space`), and the
offline bound they give from the protocol's routes (`shared_bound.shared_plan_bound`)."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import linprog

from swarm.flow import cost
from swarm.flow.bus import MessageBus
from swarm.flow.generate import random_instance
from swarm.flow.shared_bound import shared_plan_bound
from swarm.flow.shared_stage import HolderStage, keyed, plan_shared_stage
from swarm.flow.stage_assignment import MAX_BINARIES, plan_stage, stage_bottleneck
from swarm.flow.stage_moves import moves_for
from tests.flow.conftest import assert_keeps_flows_and_room

# Holder h's flow runs a -> B -> z and holder g's c -> D -> w; both paths cost 3 + 1 = 4. B and D
# are full (capacity 1 each). h's flow is cheap on D (1 + 1) and g's on B: only moving both at
# once helps, which no plan of one holder can do (each sees the other peer full).
COST_IN = {("a", "B"): 3.0, ("a", "D"): 1.0, ("c", "B"): 1.0, ("c", "D"): 3.0}
COST_OUT = {("B", "z"): 1.0, ("D", "z"): 1.0, ("B", "w"): 1.0, ("D", "w"): 1.0}
ROOM = {"B": 1.0, "D": 1.0}
CROSSED = {
    "h": HolderStage({("a", "B"): 1.0}, {("B", "z"): 1.0}, {"a": 0.0}, {"z": 0.0}),
    "g": HolderStage({("c", "D"): 1.0}, {("D", "w"): 1.0}, {"c": 0.0}, {"w": 0.0}),
}


def test_a_shared_plan_swaps_two_holders_that_no_plan_of_one_holder_can_move() -> None:
    found = plan_shared_stage(CROSSED, COST_IN, COST_OUT, ROOM, 0.02)
    assert found is not None
    top, per_in, per_out = found
    assert top == pytest.approx(2.0)
    assert per_in == {"h": pytest.approx({("a", "D"): 1.0}), "g": pytest.approx({("c", "B"): 1.0})}
    assert per_out == {"h": pytest.approx({("D", "z"): 1.0}), "g": pytest.approx({("B", "w"): 1.0})}
    for h, f in CROSSED.items():  # alone, each holder has no room to move into
        own = {b: sum(r for (_, x), r in f.flows_in.items() if x == b) for b in ROOM}
        cost_in = {e: v for e, v in COST_IN.items() if e[0] in f.arrival}
        cost_out = {e: v for e, v in COST_OUT.items() if e[1] in f.onward}
        alone = plan_stage(f.flows_in, f.flows_out, f.arrival, cost_in, cost_out, f.onward, own, 0.02)
        assert alone is None, h
    # already the plan: nothing to gain
    planned = {h: HolderStage(per_in[h], per_out[h], f.arrival, f.onward) for h, f in CROSSED.items()}
    assert plan_shared_stage(planned, COST_IN, COST_OUT, ROOM, 0.02) is None


def test_a_wide_shared_stage_plans_over_its_cheapest_pairs() -> None:
    # The crossed stage among 160 more peers that are dear on both sides: 2 x 162 sender x peer
    # pairs, over the MILP's limit. The plan keeps the pairs that carry flow and the cheapest ones.
    spare = [f"P{k}" for k in range(160)]
    cost_in = {**COST_IN, **{(a, b): 5.0 for a in ("a", "c") for b in spare}}
    cost_out = {**COST_OUT, **{(b, c): 5.0 for b in spare for c in ("z", "w")}}
    room = {**ROOM, **{b: 1.0 for b in spare}}
    assert len(keyed(CROSSED, cost_in, cost_out, room)[3]) > MAX_BINARIES
    found = plan_shared_stage(CROSSED, cost_in, cost_out, room, 0.02)
    assert found is not None
    top, per_in, _ = found
    assert top == pytest.approx(2.0)
    assert per_in == {"h": pytest.approx({("a", "D"): 1.0}), "g": pytest.approx({("c", "B"): 1.0})}


def test_the_plan_is_carried_out_by_a_pair_of_hand_overs_in_one_wave() -> None:
    flows_in, flows_out, arrival, inc, outc, onward, _, _ = keyed(CROSSED, COST_IN, COST_OUT, ROOM)
    dear = {(a, b): arrival[a] + v for (a, b), v in inc.items()}
    dear.update({(b, c): v + onward[c] for (b, c), v in outc.items()})
    new_in = {(("a", "h"), ("D", "h")): 1.0, (("c", "g"), ("B", "g")): 1.0}
    new_out = {(("D", "h"), ("z", "h")): 1.0, (("B", "g"), ("w", "g")): 1.0}
    waves, end_in, end_out = moves_for(flows_in, flows_out, new_in, new_out, dear, 4.0, space=ROOM)
    assert len(waves) == 1 and set(waves[0]) == {
        ("pair", ("a", "h"), ("B", "h"), ("D", "h"), ("z", "h"), 1.0),
        ("pair", ("c", "g"), ("D", "g"), ("B", "g"), ("w", "g"), 1.0),
    }
    assert end_in == pytest.approx(new_in) and end_out == pytest.approx(new_out)
    # with room to spare on D, h's half goes alone as a hand-over, then g's
    waves, _, _ = moves_for(flows_in, flows_out, new_in, new_out, dear, 4.0, space={"B": 1.0, "D": 2.0})
    assert [[m[0] for m in wave] for wave in waves] == [["hand"], ["hand"]]
    # without room to share (one holder's moves, as before) no hand-over needs spare: no pairs
    alone = moves_for(flows_in, flows_out, new_in, new_out, dear, 4.0)[0]
    assert all(m[0] != "pair" for wave in alone for m in wave)


def _least_shared_top(figures, cost_in, cost_out, room) -> float:
    """Brute force: every in-threshold per (peer, holder), every threshold T, an LP for feasibility
    with each peer's room shared by its holders' flows."""
    flows_in, flows_out, arrival, inc, outc, onward, _, _ = keyed(figures, cost_in, cost_out, room)
    dear = {(a, b): arrival[a] + v for (a, b), v in inc.items()}
    dear.update({(b, c): v + onward[c] for (b, c), v in outc.items()})
    senders = sorted({a for a, _ in flows_in})
    takers = sorted({c for _, c in flows_out})
    mids = sorted({b for _, b in inc})
    supply = [sum(r for (a, _), r in flows_in.items() if a == s) for s in senders]
    demand = [sum(r for (_, c), r in flows_out.items() if c == t) for t in takers]
    peers = sorted(room)
    tops = sorted({dear[a, b] + dear[b, c] for (a, b) in inc for (bb, c) in outc if bb == b})
    options = [sorted({dear[e] for e in inc if e[1] == b}) + [-math.inf] for b in mids]
    best = math.inf
    for levels in itertools.product(*options):
        for top in tops:
            if top >= best:
                break
            ins = [e for e in inc if dear[e] <= levels[mids.index(e[1])] + 1e-12]
            outs = [e for e in outc if levels[mids.index(e[0])] + dear[e] <= top + 1e-12]
            edges = ins + outs
            if not ins or not outs:
                continue
            a_eq = [[0.0] * len(edges) for _ in range(len(senders) + len(takers) + len(mids))]
            a_ub = [[0.0] * len(edges) for _ in peers]
            for j, e in enumerate(edges):
                if j < len(ins):
                    a_eq[senders.index(e[0])][j] = 1.0
                    a_eq[len(senders) + len(takers) + mids.index(e[1])][j] = 1.0
                    a_ub[peers.index(e[1][0])][j] = 1.0
                else:
                    a_eq[len(senders) + takers.index(e[1])][j] = 1.0
                    a_eq[len(senders) + len(takers) + mids.index(e[0])][j] = -1.0
            res = linprog(
                [0.0] * len(edges),
                A_ub=a_ub,
                b_ub=[room[p] for p in peers],
                A_eq=a_eq,
                b_eq=supply + demand + [0.0] * len(mids),
                method="highs",
            )
            if res.status == 0:
                best = top
                break
    return best


COSTS = st.floats(min_value=0.1, max_value=3.0, allow_nan=False)


@st.composite
def shared_stages(draw):
    """Two holders through two stage peers: h from a to z, g from c to w, one microbatch/s each,
    the peers' rooms 1 or 2 (together enough for both)."""
    cost_in = {(a, b): draw(COSTS) for a in ("a", "c") for b in ("B", "D")}
    cost_out = {(b, c): draw(COSTS) for b in ("B", "D") for c in ("z", "w")}
    on_h, on_g = draw(st.sampled_from(["B", "D"])), draw(st.sampled_from(["B", "D"]))
    figures = {
        "h": HolderStage({("a", on_h): 1.0}, {(on_h, "z"): 1.0}, {"a": draw(COSTS)}, {"z": draw(COSTS)}),
        "g": HolderStage({("c", on_g): 1.0}, {(on_g, "w"): 1.0}, {"c": draw(COSTS)}, {"w": draw(COSTS)}),
    }
    room = {"B": draw(st.sampled_from([1.0, 2.0])), "D": draw(st.sampled_from([1.0, 2.0]))}
    if on_h == on_g:
        room[on_h] = 2.0
    return figures, cost_in, cost_out, room


@settings(max_examples=25, deadline=None)
@given(shared_stages())
def test_shared_plans_are_exact_and_keep_every_holder_and_room(stage) -> None:
    figures, cost_in, cost_out, room = stage
    flows_in, flows_out, arrival, inc, outc, onward, _, _ = keyed(figures, cost_in, cost_out, room)
    dear = {(a, b): arrival[a] + v for (a, b), v in inc.items()}
    dear.update({(b, c): v + onward[c] for (b, c), v in outc.items()})
    now = stage_bottleneck(flows_in, flows_out, dear, dear)
    least = _least_shared_top(figures, cost_in, cost_out, room)
    found = plan_shared_stage(figures, cost_in, cost_out, room, 0.0)
    if found is None:
        assert least >= now - 1e-9  # nothing better exists
        return
    top, per_in, per_out = found
    assert least - 1e-9 <= top <= least + 1e-9
    for h, f in figures.items():  # each holder sends and receives what it did
        (a,) = f.arrival
        (c,) = f.onward
        assert sum(r for (x, _), r in per_in[h].items() if x == a) == pytest.approx(1.0)
        assert sum(r for (_, y), r in per_out[h].items() if y == c) == pytest.approx(1.0)
    for b in room:  # conserved per holder, and the peer's room shared
        for h in figures:
            into = sum(r for (_, y), r in per_in[h].items() if y == b)
            assert into == pytest.approx(sum(r for (x, _), r in per_out[h].items() if x == b), abs=1e-9)
        assert sum(r for h in figures for (_, y), r in per_in[h].items() if y == b) <= room[b] + 1e-9


def test_the_bound_from_the_protocol_routes_keeps_flows_and_capacities() -> None:
    inst = random_instance(24, 4, 3, 5)
    bus = MessageBus(inst, seed=5)
    assert bus.run_until_quiescent().quiescent
    routes = bus.routes()
    for moves in (False, True):
        tables, taken = shared_plan_bound(inst, routes, moves)
        assert taken >= 0
        assert cost.max_path_cost(inst, tables) <= cost.max_path_cost(inst, routes) + 1e-9
        assert_keeps_flows_and_room(inst, routes, tables)
