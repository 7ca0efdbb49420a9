"""Exchange asks that must be refused are not sent (swarm/flow/swap_asks.py, `SwapAsks._hopeless`).

An asked mate d trades one of its in-flows of the holder for the asker's flow, or takes that flow
over as a hand-over; it refuses when its label is over the asker's + 1 unless it is idle. It takes
no hand-over where links are limited, when its hand-overs are spent (its state says so) or without
spare capacity. What the asker knows of d (its announced state and path news) says when none of it
can happen; asking anyway cost the 8 x 16 swarm with 4 holders most of its messages per event, and a
single holder's 300 x 16 swarm a third of its messages (docs/routing.md, "Hopeless asks"). A mate
with none of the holder's flow and its hand-overs spent is skipped by every peer ("Spent mates are
not asked")."""

from __future__ import annotations

import dataclasses

import pytest

from swarm.flow import cost, swap_asks
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.generate import random_instance
from swarm.flow.instance import Instance
from swarm.flow.messages import Offer, Paths, State
from swarm.flow.peer import PeerAgent
from swarm.flow.reference import max_flow_value
from swarm.routing.codec import from_wire, to_wire
from tests.flow.conftest import explicit


def _converged(link_capacity: bool) -> MessageBus:
    inst = explicit(
        2,
        [("a", 0, 2.0, 0.1), ("b", 1, 1.0, 0.1), ("d", 1, 1.0, 0.1)],
        [("h1", 4.0), ("h2", 4.0)],
    )
    bus = MessageBus(dataclasses.replace(inst, link_capacity=link_capacity), seed=0)
    bus.run_until_quiescent()
    return bus


def _view(
    labels: dict[str, int], worst: dict[str, float], spare: float = 0.0, hand_overs: bool = True
) -> State:
    return State("d", 10**6, spare, labels, {"h1": 1.0, "h2": 1.0}, worst, hand_overs=hand_overs)


def test_a_mate_without_the_holders_flow_or_with_a_higher_label_is_hopeless() -> None:
    bus = _converged(link_capacity=True)
    a = bus.agents["a"]
    assert isinstance(a, PeerAgent)
    mine = a.label("h1")
    a.paths.pop("d", None)
    a.views["d"] = _view({"h1": mine, "h2": mine}, {"h2": 0.5})
    assert a._hopeless("h1", "d")  # d carries none of h1's flow: nothing to trade
    assert not a._hopeless("h2", "d")
    a.paths["d"] = Paths({}, {"h1": 0.7})  # d's path news tells a route onwards for h1: it carries some
    assert not a._hopeless("h1", "d")
    a.views["d"] = _view({"h1": mine + 2, "h2": mine + 1}, {"h1": 0.7, "h2": 0.5})
    assert a._hopeless("h1", "d")  # our flow would lower d's label
    assert not a._hopeless("h2", "d")
    del a.views["d"]
    assert not a._hopeless("h1", "d")  # nothing known: ask


def _swap_asks(bus: MessageBus) -> list[tuple[str, Offer]]:
    sent: list[tuple[str, Offer]] = []
    transmit = bus.transmit

    def counting(envelope):  # type: ignore[no-untyped-def]
        if isinstance(envelope.body, Offer) and envelope.body.swap_from is not None:
            sent.append((envelope.dst, envelope.body))
        transmit(envelope)

    bus.transmit = counting  # type: ignore[method-assign]
    return sent


def _assert_fewer_asks_same_flow(monkeypatch: pytest.MonkeyPatch, inst: Instance, seed: int) -> None:
    """Run `inst` without and with the rule: both reach the exact maximum flow, quiet and without a
    broken invariant, and the rule sends fewer exchange asks."""
    counts = {}
    for skip in (False, True):
        monkeypatch.setattr(swap_asks, "SKIP_HOPELESS", skip)
        bus = MessageBus(inst, seed=seed)
        asks = _swap_asks(bus)
        assert bus.run_until_quiescent().quiescent
        assert violations(bus) == []
        assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)
        counts[skip] = len(asks)
    assert counts[True] < counts[False]


@pytest.mark.parametrize("seed", [0, 1])
def test_fewer_asks_and_the_same_exact_flow_with_limited_links(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    inst = dataclasses.replace(random_instance(30, 5, 3, seed, 4 * 2**20), link_capacity=True)
    _assert_fewer_asks_same_flow(monkeypatch, inst, seed)


def test_without_link_limits_a_mate_that_may_take_a_hand_over_is_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bus = _converged(link_capacity=False)
    a = bus.agents["a"]
    assert isinstance(a, PeerAgent)
    mine = a.label("h1")
    a.paths.pop("d", None)
    idle = {"h1": mine, "h2": mine}
    a.views["d"] = _view(idle, {}, spare=1.0, hand_overs=False)
    assert a._hopeless("h1", "d")  # even a narrow peer (2 next hops): no flow of h1, hand-overs spent
    a.views["d"] = _view({"h1": mine + 2, "h2": mine + 2}, {"h1": 0.7}, spare=1.0, hand_overs=False)
    assert not a._hopeless("h1", "d")  # it carries h1's flow: a narrow peer asks as before
    a.views["d"] = _view(idle, {}, spare=0.0)
    assert not a._hopeless("h1", "d")  # (no room for a hand-over: only wide peers skip that)
    monkeypatch.setattr(swap_asks, "WIDE_HOPELESS_HOPS", 1)
    a.views["d"] = _view(idle, {}, spare=1.0)
    assert not a._hopeless("h1", "d")  # no flow of h1 to trade, but a hand-over may be made
    a.views["d"] = _view(idle, {}, spare=1.0, hand_overs=False)
    assert a._hopeless("h1", "d")  # its hand-overs are spent
    a.views["d"] = _view(idle, {}, spare=0.0)
    assert a._hopeless("h1", "d")  # no room for one
    high = {"h1": mine + 2, "h2": mine + 2}
    a.views["d"] = _view(high, {}, spare=1.0)
    assert not a._hopeless("h1", "d")  # an idle mate above us may still take a hand-over
    a.views["d"] = _view(high, {"h1": 0.7}, spare=1.0)
    assert a._hopeless("h1", "d")  # a busy one would have its label lowered: it refuses


def test_a_state_tells_whether_its_node_takes_hand_overs() -> None:
    bus = _converged(link_capacity=False)
    d = bus.agents["d"]
    assert isinstance(d, PeerAgent)
    d.hand_overs = 0
    assert not d.state().hand_overs
    d.hand_overs = -1  # not counted yet: the whole budget is there
    assert d.state().hand_overs
    limited = _converged(link_capacity=True).agents["d"]
    assert isinstance(limited, PeerAgent) and not limited.state().hand_overs
    st = State("d", 3, 1.0, {"h": 2}, hand_overs=False)
    assert from_wire(to_wire(st)) == st


def test_fewer_asks_and_the_same_exact_flow_at_wide_peers(monkeypatch: pytest.MonkeyPatch) -> None:
    """One holder, unlimited links, peers with about 12 next hops counted as wide."""
    monkeypatch.setattr(swap_asks, "WIDE_HOPELESS_HOPS", 4)
    _assert_fewer_asks_same_flow(monkeypatch, random_instance(60, 5, 1, 3, 4 * 2**20), 3)


def test_narrow_peers_skip_only_mates_with_nothing_to_trade_and_no_hand_over_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Peers with up to WIDE_HOPELESS_HOPS next hops and unlimited links (the whole-range sweeps)
    skip asks to a mate that carries none of the holder's flow and whose state says its hand-overs
    are spent (it must refuse, whatever the labels): fewer asks, the same exact flow. Without that
    one rule they run as without any, message for message."""
    inst = random_instance(60, 5, 1, 3, 4 * 2**20)
    _assert_fewer_asks_same_flow(monkeypatch, inst, 3)
    monkeypatch.setattr(swap_asks, "SKIP_SPENT", False)
    runs = []
    for skip in (False, True):
        monkeypatch.setattr(swap_asks, "SKIP_HOPELESS", skip)
        bus = MessageBus(inst, seed=3)
        stats = bus.run_until_quiescent()
        runs.append((stats.messages, stats.rounds, bus.routes()))
    assert runs[0] == runs[1]
