"""Rotations (swarm/flow/rotations.py): three peers of a stage pass their senders round when no
trade of two pays. d, refused a's worst-path ask, asks its sender c to look for a rotation; c asks
d's mate e for an exchange judged with the trade after it; once it is made, d tells a to ask again."""

from __future__ import annotations

import random

import pytest

from swarm.flow import cost, rotations, walks
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.generate import random_instance
from swarm.flow.instance import Link
from swarm.flow.messages import Envelope, Exchange, Offer, RotateAsk, RotateHint
from swarm.flow.peer import PeerAgent
from swarm.flow.reference import max_flow_value, min_cost_max_flow
from swarm.routing.codec import from_wire, to_wire
from tests.flow.conftest import explicit, settle_flows_set_by_hand
from tests.flow.test_exchange import walked

DEAR, MID, NEAR = Link(0.3, 1e9), Link(0.15, 1e9), Link(0.001, 1e9)


def three_pairs() -> tuple[MessageBus, dict[str, PeerAgent]]:
    """h -> a -> b -> h, h -> c -> d -> h and h -> g -> e -> h, set by hand, every peer full. a -> b
    is dear. a is near d, c a little less near e, g near b; c -> b, a -> e and g -> d are dear. So
    a -> d, c -> b makes c's path as dear as a's was, a -> e, g -> b makes a's, and c -> e, g -> d
    makes g's; only the three together (a -> d, c -> e, g -> b) make the worst path cheaper.
    Improvement moves are off: only the walk asks."""
    peers = [(x, 0, 1.0, 0.1) for x in "acg"] + [(x, 1, 1.0, 0.1) for x in "bde"]
    links = {
        ("a", "b"): DEAR,
        ("a", "d"): NEAR,
        ("a", "e"): DEAR,
        ("c", "b"): DEAR,
        ("c", "d"): NEAR,
        ("c", "e"): MID,
        ("g", "b"): NEAR,
        ("g", "d"): DEAR,
        ("g", "e"): NEAR,
    }
    bus = MessageBus(explicit(2, peers, [("h", 3.0)], latency_s=0.001, overrides=links), seed=0)
    bus.run_until_quiescent()
    p = {n: bus.agents[n] for n in "abcdeg"}
    holder = bus.agents["h"]
    holder.out["h"], holder.sink_in = {"a": 1.0, "c": 1.0, "g": 1.0}, {"b": 1.0, "d": 1.0, "e": 1.0}
    for u, v in (("a", "b"), ("c", "d"), ("g", "e")):
        p[u].out["h"], p[u].inflow["h"] = {v: 1.0}, {"h": 1.0}
        p[v].out["h"], p[v].inflow["h"] = {"h": 1.0}, {u: 1.0}
    settle_flows_set_by_hand(bus, holder, p)
    assert p["a"].routes()["h"] == {"b": pytest.approx(1.0)}
    return bus, p


@pytest.mark.parametrize("on", [True, False])
def test_a_rotation_makes_the_trade_that_pays_only_with_it(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    monkeypatch.setattr(rotations, "ROTATIONS", on * rotations.ROTATIONS)
    bus, p = three_pairs()
    for agent in p.values():
        agent.rotations_left = rotations.ROTATIONS
    inst = bus.instance
    worst_before = cost.max_path_cost(inst, bus.routes())
    sent = walked(bus)
    assert violations(bus) == []
    assert cost.flow_value(bus.routes()) == pytest.approx(3.0)
    asks = [e for e in sent if isinstance(e.body, Offer) and e.body.critical]
    assert asks[0].src == "a" and asks[0].dst == "d" and asks[0].body.swap_from == "b"  # refused first
    if not on:
        assert not any(isinstance(e.body, RotateAsk) for e in sent)
        assert p["a"].routes()["h"] == {"b": pytest.approx(1.0)}
        assert cost.max_path_cost(inst, bus.routes()) == pytest.approx(worst_before)
        return
    go = [e for e in asks if e.body.rotate_go]
    assert go and (go[0].src, go[0].dst) == ("a", "d")  # once the plain ask was refused
    first_rotate_ask = next(n for n, e in enumerate(sent) if isinstance(e.body, RotateAsk))
    assert sent.index(go[0]) < first_rotate_ask  # d asks its senders only on a's go
    assert any(isinstance(e.body, RotateAsk) and (e.src, e.dst) == ("d", "c") for e in sent)
    plans = [e for e in sent if isinstance(e.body, Offer) and e.body.rotate_hop == "b"]
    assert plans and (plans[0].src, plans[0].dst, plans[0].body.rotate_sender) == ("c", "e", "a")
    assert any(isinstance(e.body, Exchange) and (e.src, e.dst) == ("e", "d") for e in sent)
    assert any(isinstance(e.body, RotateHint) and (e.src, e.dst) == ("d", "a") for e in sent)
    assert p["a"].routes()["h"] == {"d": pytest.approx(1.0)}
    assert p["c"].routes()["h"] == {"e": pytest.approx(1.0)}
    assert p["g"].routes()["h"] == {"b": pytest.approx(1.0)}
    assert cost.max_path_cost(inst, bus.routes()) < worst_before - 0.1


def test_rotation_messages_cross_the_codec_and_forged_ones_cost_at_most_the_walk_budget() -> None:
    for body in (RotateAsk("h", "a", 0.25, "b", 0.5, 1.0), RotateHint("h", "b")):
        envelope = Envelope("d", "a", -1, 1, body)
        assert from_wire(to_wire(envelope)) == envelope
    plan = dict(rotate_sender="a", rotate_arrival=0.25, rotate_hop="b", rotate_rate=1.0, rotate_go=True)
    ask = Offer("h", 1.0, 7, 2, "d", **plan)  # type: ignore[arg-type]
    assert from_wire(to_wire(ask)) == ask
    bus, p = three_pairs()
    a, c = p["a"], p["c"]
    asked: list[str] = []
    a.ask_trade = lambda h, d, b, hops, critical=False: asked.append(d) or True  # type: ignore[method-assign]
    a.on_rotation("c", RotateHint("h", "b"))  # not our next hop
    a.on_rotation("d", RotateHint("h", "nobody"))  # not a mate of it
    a.on_rotation("d", RotateHint("h9", "b"))  # an unknown holder
    a.on_rotation("d", RotateHint("h", "e"))  # no flow of ours on it
    assert asked == []
    left = a.walk_asks_left
    for _ in range(left + 10):
        a.on_rotation("d", RotateHint("h", "b"))
    assert asked == ["d"] * left and a.walk_asks_left == 0
    trades: list[str] = []
    c.send_trade_ask = lambda h, e, d, *args, **kw: trades.append(e) or 0  # type: ignore[method-assign]
    c.on_rotation("b", RotateAsk("h", "a", 0.0, "b", 0.0, 1.0))  # no flow of ours on b
    c.on_rotation("d", RotateAsk("h", "nobody", 0.0, "b", 0.0, 1.0))  # an unknown sender: no old path
    assert trades == []
    left = c.walk_asks_left
    for _ in range(left + 10):
        c.on_rotation("d", RotateAsk("h", "a", 0.0, "b", 10.0, 1.0))
    assert trades == ["e"] * left and c.walk_asks_left == 0
    assert violations(bus) == []


@pytest.mark.parametrize("on", [True, False])
def test_a_former_whole_range_miss_is_within_five_percent_with_or_without_rotations(
    monkeypatch: pytest.MonkeyPatch, on: bool
) -> None:
    """Seed 0, instance 8 of the whole-range sweep (8 x 6) under the second message timing (bus seed
    + 1000): exchanges, hand-overs and onward swaps left it at 1.092 of the min-cost flow's max
    path, and a rotation at stage 4 started the fix (offline with exact moves: 1.092 -> 1.000), so
    this test showed rotations at work with late walks off. Since capacity held for a hand-over is
    published as spare (docs/routing.md, "Held capacity is not news") it ends within 5% without
    rotations too (1.002), as do small whole-range instances of seeds 0 and 1 under that timing
    with rotations or without (one moved, by 0.002); what rotations do is tested above."""
    monkeypatch.setattr(rotations, "ROTATIONS", on * rotations.ROTATIONS)
    monkeypatch.setattr(walks, "LATE_WALKS", 0)
    rng = random.Random(0)
    stages, per_stage, holders = [
        (rng.randint(4, 16), rng.randint(3, 30), rng.randint(1, 1)) for _ in range(9)
    ][8]
    inst = random_instance(stages * per_stage, stages, holders, 8, 4 * 2**20)
    bus = MessageBus(inst, seed=8 + 1000)
    bus.run_until_quiescent()
    assert violations(bus) == []
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), rel=1e-6)
    ratio = cost.max_path_cost(inst, bus.routes()) / cost.max_path_cost(inst, min_cost_max_flow(inst))
    assert ratio <= 1.05


def test_the_go_goes_only_for_a_flow_still_on_its_hop_with_no_ask_open() -> None:
    """A rotation sent at once with d's refusal often went ahead after another mate had taken a's
    flow over already, and its first exchange then made the worst path dearer for nothing."""
    bus, p = three_pairs()
    a = p["a"]
    asked: list[tuple[str, str, bool, bool]] = []
    a.ask_trade = lambda h, d, b, hops, critical=False, go=False, late=False: (
        asked.append((d, b, go, late)) or True
    )  # type: ignore[method-assign]
    a._refused = [("h", "b", "d", False)]
    a.out["h"] = {"e": 1.0}  # another mate took our flow on b over meanwhile
    a.on_go_timer()
    assert asked == [] and a._refused == []
    a.out["h"] = {"b": 1.0}
    a._refused = [("h", "b", "d", False)]
    a.offers[999] = object()  # type: ignore[assignment]  # (an ask of ours still open)
    a.on_go_timer()
    assert asked == []
    del a.offers[999]
    a._refused = [("h", "b", "e", False), ("h", "b", "d", True)]
    a.on_go_timer()
    # the refused mate a gains most by (d is near a, e dear); asked on a late walk, so is the go
    assert asked == [("d", "b", True, True)]
