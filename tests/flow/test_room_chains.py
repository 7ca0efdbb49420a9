"""Make-room chains (swarm/flow/room_chains.py): a full peer d, asked on holder h's walk for flow it
has no room for, asks a sender c of another holder g to move g's flow to d's mate m; once d has handed
it over it tells h's sender a, which asks again, and d takes a's flow over."""

from __future__ import annotations

import pytest

from swarm.flow import cost, room_chains
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.generate import random_instance
from swarm.flow.instance import Link
from swarm.flow.messages import Envelope, ExchangeDone, HandOver, Offer, RoomAsk, RotateHint
from swarm.flow.peer import PeerAgent
from swarm.routing.codec import from_wire, to_wire
from tests.flow.conftest import explicit, settle_flows_set_by_hand
from tests.flow.test_exchange import recorded, walked

DEAR, MID, NEAR = Link(0.3, 1e9), Link(0.1, 1e9), Link(0.001, 1e9)


def crosswise(dear_sink: bool = False) -> tuple[MessageBus, dict[str, PeerAgent]]:
    """h -> a -> b -> h and g -> c -> d -> g, set by hand; m idle. a -> b is dear and a -> d near,
    but d is full of g's flow; g's flow could run c -> m -> g a little dearer (c -> m mid). a -> m is
    dear: no hand-over of h's flow pays, and no exchange (d carries none of h's flow).
    `dear_sink`: d -> h is dearer still, so a's flow through d would cost more than through b."""
    peers = [("a", 0, 1.0, 0.01), ("c", 0, 1.0, 0.01)] + [(x, 1, 1.0, 0.01) for x in "bdm"]
    links = {("a", "b"): DEAR, ("a", "d"): NEAR, ("a", "m"): DEAR, ("c", "b"): DEAR}
    links |= {("c", "d"): NEAR, ("c", "m"): MID}
    if dear_sink:
        links |= {("d", "h"): Link(0.6, 1e9)}
    bus = MessageBus(explicit(2, peers, [("h", 1.0), ("g", 1.0)], latency_s=0.001, overrides=links), seed=0)
    bus.run_until_quiescent()
    p = {n: bus.agents[n] for n in "abcdm"}
    for holder, first, last in (("h", "a", "b"), ("g", "c", "d")):
        agent = bus.agents[holder]
        agent.out[holder], agent.sink_in = {first: 1.0}, {last: 1.0}
        for other in "abcdm":
            p[other].out[holder], p[other].inflow[holder] = {}, {}
    for holder, first, last in (("h", "a", "b"), ("g", "c", "d")):
        p[first].out[holder], p[first].inflow[holder] = {last: 1.0}, {holder: 1.0}
        p[last].out[holder], p[last].inflow[holder] = {holder: 1.0}, {first: 1.0}
    settle_flows_set_by_hand(bus, bus.agents["h"], p)
    bus.agents["g"].budget = bus.agents["g"]._walks_left = 0
    bus.run_until_quiescent()
    for agent in p.values():  # (the first convergence spent some)
        agent.rooms_left, agent.room_asks_left = room_chains.ROOMS, room_chains.ROOM_ASKS
        agent.room_takes_left = room_chains.ROOM_TAKES
    assert p["a"].routes()["h"] == {"b": pytest.approx(1.0)} and p["c"].routes()["g"] == {
        "d": pytest.approx(1.0)
    }
    return bus, p


@pytest.mark.parametrize("on", [True, False])
def test_a_chain_moves_the_other_holders_flow_to_make_room(monkeypatch: pytest.MonkeyPatch, on: bool) -> None:
    monkeypatch.setattr(room_chains, "ROOM_CHAINS", on)
    bus, p = crosswise()
    inst = bus.instance
    worst_before, mean_before = (
        cost.max_path_cost(inst, bus.routes()),
        cost.mean_path_cost(inst, bus.routes()),
    )
    sent = walked(bus)
    assert violations(bus) == []
    assert cost.flow_value(bus.routes()) == pytest.approx(2.0)
    asks = [e for e in sent if isinstance(e.body, Offer) and e.body.critical]
    assert (asks[0].src, asks[0].dst, asks[0].body.swap_from) == ("a", "d", "b")  # refused: no room
    if not on:
        assert not any(isinstance(e.body, RoomAsk) for e in sent)
        assert p["a"].routes()["h"] == {"b": pytest.approx(1.0)}
        assert cost.max_path_cost(inst, bus.routes()) == pytest.approx(worst_before)
        return
    room = next(e for e in sent if isinstance(e.body, RoomAsk))
    assert (room.src, room.dst, room.body.holder) == ("d", "c", "g")
    assert room.body.rise > 0.1  # what a's path saves: a -> d instead of a -> b
    moves = [e for e in sent if isinstance(e.body, Offer) and e.body.room_bound is not None]
    assert moves and (moves[0].src, moves[0].dst, moves[0].body.swap_from) == ("c", "m", "d")
    assert any(isinstance(e.body, HandOver) and e.body.room_bound is not None for e in sent)
    assert any(isinstance(e.body, RotateHint) and (e.src, e.dst) == ("d", "a") for e in sent)
    assert p["a"].routes()["h"] == {"d": pytest.approx(1.0)}
    assert p["c"].routes()["g"] == {"m": pytest.approx(1.0)}
    assert cost.max_path_cost(inst, bus.routes()) < worst_before - 0.15  # (0.343 -> 0.143: g's path now)
    assert cost.mean_path_cost(inst, bus.routes()) < mean_before  # (g's path rose by less than h's fell)


def test_no_room_is_asked_for_where_the_hand_over_would_not_pay() -> None:
    """The hand-over keeps b's next hop (here the sink): d judges a's path through it by its own edge
    there, not by b's, and asks nobody to move when that path would be dearer than a's through b."""
    bus, p = crosswise(dear_sink=True)
    sent = walked(bus)
    asks = [e for e in sent if isinstance(e.body, Offer) and e.body.critical]
    assert asks and (asks[0].src, asks[0].dst) == ("a", "d")
    assert not any(isinstance(e.body, RoomAsk) for e in sent)
    assert p["c"].routes()["g"] == {"d": pytest.approx(1.0)} and violations(bus) == []


def test_the_room_made_is_held_for_a_while_then_let_go() -> None:
    """Once g's flow left d for a's ask, d holds the room for a's ask again: other senders see it in
    d's state (held capacity is not news) but cannot take it; if a never asks, the hold runs out."""
    bus, p = crosswise()
    d = p["d"]
    p["a"].on_rotation = lambda src, body: None  # type: ignore[method-assign]  # (the hint is lost)
    p["a"].on_go_timer = lambda: None  # type: ignore[method-assign]  # (and a asks no more)
    seen: list[tuple[float, float, float]] = []
    gave = d.gave

    def watched(*args: object) -> None:
        gave(*args)  # type: ignore[arg-type]
        seen.append((d.spare(), d.reserved, d.state().spare))

    d.gave = watched  # type: ignore[method-assign]
    walked(bus)
    assert seen and seen[0][0] == pytest.approx(0.0) and seen[0][1] == pytest.approx(1.0)
    assert seen[0][2] == pytest.approx(1.0)
    assert d._holds == {} and d.reserved == pytest.approx(0.0)  # (ran out: a did not ask)
    assert p["a"].routes()["h"] == {"b": pytest.approx(1.0)} and violations(bus) == []


def test_a_busy_sender_asks_again_a_little_later() -> None:
    """A make-room hint that finds a's own asks open is kept and taken when they are answered; a
    rotation's hint is not (it goes at once or not at all, as before)."""
    bus, p = crosswise()
    a = p["a"]
    asked: list[tuple[str, str]] = []
    a.ask_trade = lambda h, d, b, *args, **kw: asked.append((d, b))  # type: ignore[method-assign]
    a.offers[999] = ("h", 1.0, 0.0, "m")  # type: ignore[assignment]  # (an ask of ours is open)
    a.on_rotation("d", RotateHint("h", "b"))
    a.on_rotation("d", RotateHint("h", "b", room=True))
    assert asked == [] and ("h", "d") in a._hints
    del a.offers[999]
    a.timer("room_hint")
    assert asked == [("d", "b")] and a._hints == {}


def test_the_other_holder_s_flow_moves_only_under_the_bound_and_the_price() -> None:
    """d, as the hand-over's b, keeps g's new path under the bound and its edges' rise under what h's
    path is to save: too low a bound or too small a saving and nothing moves."""
    for bound_cut, rise, moves in ((10.0, 1.0, False), (0.0, 0.01, False), (-10.0, 1.0, True)):
        bus, p = crosswise()
        inst = bus.instance
        via_b = inst.edge_cost("h", "a") + inst.edge_cost("a", "b") + inst.edge_cost("b", "h")
        with recorded(bus) as sent:
            p["c"].on_room_ask("d", RoomAsk("g", 1.0, via_b - bound_cut, rise))
            bus.run_until_quiescent()
        assert violations(bus) == []
        handed = [e for e in sent if isinstance(e.body, ExchangeDone) and (e.src, e.dst) == ("d", "m")]
        assert any(e.body.moved > 0.5 for e in handed) == moves
        if not moves:
            assert p["c"].routes()["g"] == {"d": pytest.approx(1.0)}
        # (a move d did not ask for holds no room on d: with no other holder's ask there, g's own
        # hand-over takes g's flow back to the cheaper d)


def test_room_messages_cross_the_codec_and_forged_ones_cost_at_most_the_budget() -> None:
    body = RoomAsk("g", 1.0, 0.5, 0.2)
    envelope = Envelope("d", "c", -1, 1, body)
    assert from_wire(to_wire(envelope)) == envelope
    ask = Offer("g", 1.0, 7, 2, "d", room_bound=0.5, room_rise=0.2)
    assert from_wire(to_wire(ask)) == ask
    bus, p = crosswise()
    c = p["c"]
    trades: list[str] = []
    c.send_trade_ask = lambda h, m, d, *args, **kw: trades.append(m) or 0  # type: ignore[method-assign]
    c.on_room_ask("b", RoomAsk("g", 1.0, 10.0, 1.0))  # no flow of ours on b
    c.on_room_ask("a", RoomAsk("g", 1.0, 10.0, 1.0))  # not a next hop of ours
    c.on_room_ask("d", RoomAsk("nobody", 1.0, 10.0, 1.0))  # an unknown holder
    c.on_room_ask("d", RoomAsk("g", 1.0, 0.0, 1.0))  # no mate under the bound
    assert trades == []
    left = c.room_asks_left
    for _ in range(left + 10):
        c.on_room_ask("d", RoomAsk("g", 1.0, 10.0, 1.0))
    assert trades == ["m"] * left and c.room_asks_left == 0
    assert violations(bus) == []


def test_with_one_holder_chains_send_nothing_and_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Chains move other holders' flow: with one holder every run is message for message the same."""
    inst = random_instance(30, 5, 1, 11)
    runs = []
    for on in (True, False):
        monkeypatch.setattr(room_chains, "ROOM_CHAINS", on)
        bus = MessageBus(inst, seed=11)
        with recorded(bus) as sent:
            stats = bus.run_until_quiescent()
        assert not any(isinstance(e.body, RoomAsk) for e in sent)
        runs.append((stats.messages, stats.rounds, cost.max_path_cost(inst, bus.routes())))
    assert runs[0] == runs[1]
