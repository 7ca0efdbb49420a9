"""Capacity a peer holds for a hand-over it waits on stays published as spare (swarm/flow/peer.py,
`PeerAgent.state`): the hold is ours to keep, and telling it as fullness made the stage above
relabel and tell every neighbour, back and forth, each time a trade was asked of the one peer of a
full stage with room."""

from __future__ import annotations

import pytest

from swarm.flow.check import violations
from swarm.flow.messages import Announce, Envelope, HandOver
from tests.flow.test_exchange import handing_over, run_until_next


def test_capacity_held_for_a_hand_over_is_published_as_spare_and_kept_from_others() -> None:
    bus, p = handing_over()
    d = p["d"]
    told: list[tuple[float, float]] = []  # (spare d published, what d held back) per announcement
    transmit = bus.transmit

    def spy(envelope: Envelope) -> None:
        if envelope.src == "d" and isinstance(envelope.body, Announce):
            told.append((envelope.body.state.spare, d.reserved))
        transmit(envelope)

    bus.transmit = spy  # type: ignore[method-assign]
    assert p["a"].try_swap()
    run_until_next(bus, lambda body, dst: isinstance(body, HandOver))
    assert d.reserved == pytest.approx(1.0)
    assert d.spare() == pytest.approx(0.0, abs=1e-9)  # (what d accepts: nothing more meanwhile)
    assert d.state().spare == pytest.approx(1.0)  # (what d tells: its room, held or not)
    bus.run_until_quiescent()
    assert all(spare == pytest.approx(1.0) for spare, held in told if held > 0)
    # once the hand-over is made d is full for real, and its upstream hears it
    assert d.reserved == 0.0 and d.state().spare == pytest.approx(0.0, abs=1e-9)
    assert p["a"].views["d"].spare == pytest.approx(0.0, abs=1e-9)
    assert violations(bus) == []
