"""Dead ends: without link limits a next hop with no route to the sink is not a place for flow."""

from __future__ import annotations

import dataclasses

import pytest

from swarm.flow import cost
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.reference import max_flow_value
from tests.flow.conftest import explicit


@pytest.fixture
def funnel():
    """h -> a (cap 6) -> {b, c} (cap 3 each) -> d (cap 2) -> h: d limits the flow to 2, so b and c
    keep spare capacity that leads nowhere."""
    peers = [("a", 0, 6.0, 0.1), ("b", 1, 3.0, 0.1), ("c", 1, 3.0, 0.1), ("d", 2, 2.0, 0.1)]
    return explicit(3, peers, [("h", 10.0)])


def test_spare_capacity_behind_a_full_stage_is_neither_offered_flow_nor_a_label(funnel) -> None:
    bus = MessageBus(funnel, seed=0)
    assert bus.run_until_quiescent().quiescent
    assert violations(bus) == []
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(funnel)) == pytest.approx(2.0)
    a = bus.agents["a"]
    assert a.excess("h") == pytest.approx(0.0, abs=1e-9)  # what b and c cannot forward went home
    for v in ("b", "c"):
        view = a.views[v]
        assert view.spare > 0.5  # room at b and c ...
        assert a.dead_end(view, "h")  # ... but no route onwards
    a._fwd_cache.clear()
    assert a._forward_labels()["h"] == a.max_label  # dead ends do not lower our label
    assert a._push_options("h", a.label("h")) == []  # nothing is offered to them either


def test_with_link_limits_a_dead_end_still_counts(funnel) -> None:
    """A full link can make the detour through a dead end the only way, so there it is kept."""
    bus = MessageBus(dataclasses.replace(funnel, link_capacity=True), seed=0)
    assert bus.run_until_quiescent().quiescent
    a = bus.agents["a"]
    assert a.link_limits
    assert not any(a.dead_end(a.views[v], "h") for v in ("b", "c"))
    assert cost.flow_value(bus.routes()) == pytest.approx(2.0)
