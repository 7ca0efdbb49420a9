"""Exchange asks that must be refused are not sent (swarm/flow/swap_asks.py, `SwapAsks._hopeless`).

Where links are limited, an asked mate d takes no hand-over: it can only trade one of its in-flows
of the holder, and it refuses when its label is over the asker's + 1. What the asker knows of d (its
announced state and path news) says when neither can happen; asking anyway cost the 8 x 16 swarm
with 4 holders most of its messages per event (docs/routing.md, "Hopeless asks")."""

from __future__ import annotations

import dataclasses

import pytest

from swarm.flow import cost, swap_asks
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.generate import random_instance
from swarm.flow.messages import Offer, Paths, State
from swarm.flow.peer import PeerAgent
from swarm.flow.reference import max_flow_value
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


def _view(a: PeerAgent, labels: dict[str, int], worst: dict[str, float]) -> State:
    return State("d", 10**6, 0.0, labels, {"h1": 1.0, "h2": 1.0}, worst)


def test_a_mate_without_the_holders_flow_or_with_a_higher_label_is_hopeless() -> None:
    bus = _converged(link_capacity=True)
    a = bus.agents["a"]
    assert isinstance(a, PeerAgent)
    mine = a.label("h1")
    a.paths.pop("d", None)
    a.views["d"] = _view(a, {"h1": mine, "h2": mine}, {"h2": 0.5})
    assert a._hopeless("h1", "d")  # d carries none of h1's flow: nothing to trade
    assert not a._hopeless("h2", "d")
    a.paths["d"] = Paths({}, {"h1": 0.7})  # d's path news tells a route onwards for h1: it carries some
    assert not a._hopeless("h1", "d")
    a.views["d"] = _view(a, {"h1": mine + 2, "h2": mine + 1}, {"h1": 0.7, "h2": 0.5})
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


@pytest.mark.parametrize("seed", [0, 1])
def test_fewer_asks_and_the_same_exact_flow_with_limited_links(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    inst = dataclasses.replace(random_instance(30, 5, 3, seed, 4 * 2**20), link_capacity=True)
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


def test_unlimited_links_ask_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without link limits an idle or spare mate may take a hand-over: the rule does not apply, and
    the run is the same message for message."""
    inst = random_instance(30, 5, 2, 3, 4 * 2**20)
    runs = []
    for skip in (False, True):
        monkeypatch.setattr(swap_asks, "SKIP_HOPELESS", skip)
        bus = MessageBus(inst, seed=3)
        stats = bus.run_until_quiescent()
        runs.append((stats.messages, stats.rounds, bus.routes()))
    assert runs[0] == runs[1]
