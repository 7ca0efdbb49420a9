"""Corridors (swarm/flow/corridor.py): a dear route moves onto spare stage peers over several stages
at once, where every single hand-over on the way would make the path dearer and is refused."""

from __future__ import annotations

import pytest

from swarm.flow import cost
from swarm.flow.ask_budget import CORRIDOR_PROBES, corridor_budget
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.corridor import cheapest_lanes
from swarm.flow.instance import Link
from swarm.flow.messages import Corridor, CorridorPlan, Envelope, HandOver, Lane, Offer
from swarm.routing.codec import from_wire, to_wire
from tests.flow.conftest import explicit
from tests.flow.test_exchange import recorded, rewritten

NEAR, FAR, FARTHER = Link(0.001, 1e9), Link(0.2, 1e9), Link(0.5, 1e9)


def old_route() -> tuple[MessageBus, dict]:
    """h -> a -> b1 -> b2 -> z -> h, where a -> b1 and b2 -> z are far; the corridor a -> x1 -> x2
    -> z is near all the way, but x1 -> b2 and b1 -> x2 are farther still, so a hand-over at either
    stage alone (a -> x1 -> b2, b1 -> x2 -> z) makes the path dearer."""
    peers = [("a", 0, 1.0, 0.1), ("b1", 1, 1.0, 0.1), ("x1", 1, 1.0, 0.1)]
    peers += [("b2", 2, 1.0, 0.1), ("x2", 2, 1.0, 0.1), ("z", 3, 1.0, 0.1)]
    links = {("a", "b1"): FAR, ("b2", "z"): FAR, ("x1", "b2"): FARTHER, ("b1", "x2"): FARTHER}
    inst = explicit(4, peers, [("h", 1.0)], overrides=links)
    bus = MessageBus(inst, seed=0)
    bus.run_until_quiescent()
    p = {n: bus.agents[n] for n in ("a", "b1", "x1", "b2", "x2", "z", "h")}
    assert p["a"].out["h"].get("x1") == pytest.approx(1.0)  # the push phase found the corridor
    p["a"].out["h"], p["b1"].out["h"], p["b2"].out["h"] = {"b1": 1.0}, {"b2": 1.0}, {"z": 1.0}
    p["x1"].out["h"], p["x2"].out["h"] = {}, {}
    p["b1"].inflow["h"], p["b2"].inflow["h"], p["z"].inflow["h"] = {"a": 1.0}, {"b1": 1.0}, {"b2": 1.0}
    p["x1"].inflow["h"], p["x2"].inflow["h"] = {}, {}
    stage_peers = {n: a for n, a in p.items() if n != "h"}
    rewritten(bus, stage_peers, budget=0)
    for agent in stage_peers.values():
        agent.corridor_budget = 0
        agent.relabel()
        agent.announce()
    bus.run_until_quiescent()  # the peers hear each other's new spare capacity
    assert violations(bus) == []
    return bus, p


def test_a_probe_finds_the_corridor_and_the_flow_moves_onto_it() -> None:
    """a's probe runs down a -> b1 -> b2 -> z, the plan comes back, and two hand-overs with planned
    next hops move the flow: a -> x1 -> x2 -> z. Nobody's throughput but b's and x's changes, the
    flow stays the maximum and the worst path gets cheaper by the two far links."""
    bus, p = old_route()
    inst = bus.instance
    worst_before = cost.max_path_cost(inst, bus.routes())
    p["a"].corridor_budget = 1
    with recorded(bus) as sent:
        assert p["a"].try_corridor()
        bus.run_until_quiescent()
    corridor = [(e.src, e.dst) for e in sent if isinstance(e.body, (Corridor, CorridorPlan))]
    assert corridor[:4] == [("a", "b1"), ("b1", "b2"), ("b2", "b1"), ("b1", "a")]  # down, and back
    # (the plan carried out refunds a's probe: after the calm a probes its new route, plan-less)
    steps = [(e.src, e.dst, e.body.onward) for e in sent if isinstance(e.body, HandOver)]
    assert steps == [("x1", "b1", "b2"), ("x2", "b2", "z")]  # the planned next hops
    assert p["a"].routes()["h"] == {"x1": pytest.approx(1.0)}
    assert p["x1"].routes()["h"] == {"x2": pytest.approx(1.0)}
    assert p["x2"].routes()["h"] == {"z": pytest.approx(1.0)}
    assert p["b1"].carried() == pytest.approx(0.0, abs=1e-9)
    assert p["b2"].carried() == pytest.approx(0.0, abs=1e-9)
    assert {u: r for u, r in p["z"].inflow["h"].items() if r > 1e-9} == {"x2": pytest.approx(1.0)}
    assert violations(bus) == []
    assert cost.flow_value(bus.routes()) == pytest.approx(1.0)
    assert cost.max_path_cost(inst, bus.routes()) < worst_before - 0.3


def test_without_corridors_the_single_hand_overs_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same dear route with corridors off: exchange asks (and the hand-overs they become) are
    tried and refused, since each alone makes the path dearer; a -> b1 -> b2 -> z stays."""
    monkeypatch.setattr("swarm.flow.corridor.CORRIDORS", False)
    bus, p = old_route()
    for agent in (p["a"], p["b1"]):
        agent.swap_budget = 4
    with recorded(bus) as sent:
        p["a"].try_polish()
        p["b1"].try_polish()
        bus.run_until_quiescent()
    assert not any(isinstance(e.body, (Corridor, CorridorPlan)) for e in sent)
    assert any(isinstance(e.body, Offer) and e.body.swap_from == "b1" for e in sent)  # asked, refused
    assert p["a"].routes()["h"] == {"b1": pytest.approx(1.0)}
    assert p["b2"].routes()["h"] == {"z": pytest.approx(1.0)}
    assert violations(bus) == []


def test_lanes_are_ranked_by_the_whole_path_they_can_make() -> None:
    """An idle lane (no route of its own on) with dear edges must not beat a lane through a busy
    peer whose edges are cheap and whose own route on is cheaper than the old route on: after this
    stage both still pay the old route's rest (0.9 s here), so the idle one makes 0.5 + 0.9 s and
    the busy one at most max(0.2 + 0.9, 1.3) s. Per end peer only the cheapest lane stays, and at
    most `keep` lanes go on, cheapest first."""
    idle = Lane(("y1", "y2"), 0.5, 0.0, 4.0)
    busy = Lane(("x1", "x2"), 0.2, 1.3, 1.0)
    dearer_to_x2 = Lane(("y1", "x2"), 0.45, 1.3, 4.0)
    far = Lane(("x1", "w2"), 0.9, 0.0, 4.0)
    assert cheapest_lanes([idle, busy, dearer_to_x2, far], rest=0.9, keep=2) == (busy, idle)
    assert cheapest_lanes([far, idle], rest=0.9, keep=6) == (idle, far)
    # with no old route on (the sink is next), the busy lane's own route is what counts
    assert cheapest_lanes([idle, busy], rest=0.0, keep=1) == (idle,)


def test_a_stale_plan_moves_nothing() -> None:
    """The flow left a -> b1 before the plan came back: a starts no step, nothing moves."""
    bus, p = old_route()
    plan = CorridorPlan("h", "a", 1.0, ("x1", "x2"), ("b1", "b2", "z"), 0.39)
    p["a"].out["h"] = {"b1": 0.0, "x1": 1.0}  # (as if an exchange had moved it meanwhile)
    with recorded(bus) as sent:
        p["a"].on_corridor("b1", plan)
    assert sent == []


def test_corridor_messages_cross_the_wire() -> None:
    """Probes, plans and corridor steps survive the codec (msgpack, type-checked fields)."""
    lane = Lane(("x1", "x2"), 0.25, 0.4, 2.5)
    bodies = [
        Corridor("h", "a", 1.0, ("b1", "b2"), 0.6, (lane,), ("x1",), 0.2, 0.8),
        CorridorPlan("h", "a", 0.8, ("x1",), ("b1", "b2"), 0.2, ("b1",)),
        Offer("h", 1.0, 7, 3, "b1", corridor=("x2",), corridor_olds=("b2", "z")),
        HandOver("h", 1.0, 3, "a", 0.2, 4, 0.1, 0.3, onward="b2"),
    ]
    for body in bodies:
        assert from_wire(to_wire(Envelope("a", "b1", 2, 1, body))).body == body


def test_malformed_probes_and_plans_move_nothing() -> None:
    """Probes with empty lanes, lanes of the wrong length or through unknown peers, plans that name
    no hop we use, or passed back to a peer they do not name: nothing is sent on, no flow moves,
    the peer stays up. (A well-formed plan is a request like any exchange ask: peers crash, they do
    not lie, as GWTF assumes.)"""
    bus, p = old_route()
    before = bus.routes()
    bad = [
        Corridor("h", "a", 1.0, ("b1",), 0.3, (Lane((), 0.0),)),
        Corridor("h", "a", 1.0, ("b1",), 0.3, (Lane(("x1", "x2", "z"), 0.0),)),
        Corridor("h", "a", 1.0, ("b1",), 0.3, (Lane(("ghost",), 0.0),)),
        Corridor("nobody", "a", 1.0, ("b1",), 0.3, (Lane(("x1",), 0.0),)),
        Corridor("h", "a", 1.0, ("b2",), 0.3, (Lane(("x1",), 0.0),)),  # not addressed to b1
    ]
    with recorded(bus) as sent:
        for body in bad:
            p["b1"].on_corridor("a", body)
        p["a"].on_corridor("b1", CorridorPlan("h", "a", 1.0, ("x1",), ("ghost", "b2"), 0.3))
        p["a"].on_corridor("b1", CorridorPlan("h", "a", 1.0, ("x1", "x2"), ("b1",), 0.3))
        p["b2"].on_corridor("z", CorridorPlan("h", "a", 1.0, ("x1",), ("b1", "b2"), 0.3, ("b1", "x2")))
        bus.run_until_quiescent()
    assert [e for e in sent if isinstance(e.body, (Corridor, CorridorPlan, Offer))] == []
    assert bus.routes() == before
    assert violations(bus) == []


def test_wide_peers_start_no_probes() -> None:
    """Peers with up to 31 next hops may start probes; wider ones (1,000 x 16: 62) start none."""
    assert corridor_budget(1) == corridor_budget(31) == CORRIDOR_PROBES > 0
    assert corridor_budget(32) == corridor_budget(62) == 0
