"""Resyncs (swarm/flow/resync.py): when the mate d that an exchange initiator a asked leaves after
a's next hop b moved a's flow, and before d told a, a asks b and takes its word for the edge a -> b."""

from __future__ import annotations

import pytest

from swarm.flow import cost
from swarm.flow.check import violations
from swarm.flow.messages import (
    AskMoved,
    Envelope,
    ExchangeDone,
    HandOff,
    Moved,
    Reply,
    Resync,
    Resynced,
    TradeCheck,
    Traded,
)
from swarm.flow.reference import max_flow_value
from swarm.routing.codec import from_wire, to_wire
from swarm.wire import WireError
from tests.flow.test_exchange import crossed, handing_over, recorded, run_until_next


@pytest.mark.parametrize("setup", [crossed, handing_over], ids=["exchange", "hand-over"])
def test_a_mate_that_leaves_half_way_leaves_no_edge_out_of_step(setup) -> None:
    """d leaves right after b moved a's flow off a -> b: without a resync a kept counting that flow
    on a -> b while b did not (the holder sent more than came back)."""
    bus, p = setup()
    assert p["a"].try_swap()
    run_until_next(bus, lambda body, dst: isinstance(body, ExchangeDone) and dst == "d")
    assert p["b"].inflow["h"]["a"] == pytest.approx(0.0, abs=1e-9)  # b moved it
    assert p["a"].out["h"]["b"] == pytest.approx(1.0)  # a has not heard
    with recorded(bus) as sent:
        bus.remove_peer("d")
        bus.run_until_quiescent()
    kinds = [type(e.body).__name__ for e in sent]
    assert "Resync" in kinds and "Resynced" in kinds
    assert violations(bus) == []
    assert p["a"].out["h"].get("b", 0.0) == pytest.approx(p["b"].inflow["h"].get("a", 0.0), abs=1e-9)
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(bus.instance), abs=1e-6)


def test_a_mate_that_leaves_after_answering_costs_no_resync() -> None:
    """An ask d answered in full is forgotten: d leaving later sends no Resync."""
    bus, p = crossed()
    assert p["a"].try_swap()
    bus.run_until_quiescent()
    assert not p["a"]._asks
    with recorded(bus) as sent:
        bus.remove_peer("d")
        bus.run_until_quiescent()
    assert not any(isinstance(e.body, (Resync, Resynced)) for e in sent)
    assert violations(bus) == []


def test_resync_messages_cross_the_codec() -> None:
    bus, p = crossed()
    moved = (AskMoved(3, "h", 0.5), AskMoved(7, "h", 1.0))
    waiting = Reply(3, "h", 0.0, p["d"].state(), waiting=True)
    traded = Traded(5, "h", 1.0, "b", p["c"].state())
    note = Moved("h", 1.0, "d", p["b"].state(), exchange=5)
    check, hand_off = TradeCheck(5, "h", "b"), HandOff("h", 1.0, 4, "d", exchange=5)
    resyncs = (Resync("d", (3, 7)), Resynced("d", moved, p["b"].state()), waiting)
    bodies = (*resyncs, traded, note, check, hand_off)
    for body in bodies:
        assert from_wire(to_wire(Envelope("a", "b", 4, 2, body))).body == body
    raw = to_wire(Envelope("d", "a", 4, 2, waiting))
    for bad in ("yes", 1, None):
        with pytest.raises(WireError):
            from_wire({**raw, "body": {**raw["body"], "waiting": bad}})
    raw = to_wire(Envelope("c", "d", 4, 2, traded))
    for field, bad in (("exchange_id", 1.5), ("rate", "1"), ("mate", None)):
        with pytest.raises(WireError):
            from_wire({**raw, "body": {**raw["body"], field: bad}})
    raw = to_wire(Envelope("a", "b", 4, 2, Resync("d", (3, 7))))
    for field, bad in (("asks", [1.5]), ("asks", "3"), ("gone", 5)):
        with pytest.raises(WireError):
            from_wire({**raw, "body": {**raw["body"], field: bad}})
