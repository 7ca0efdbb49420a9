"""Hand-overs at the last stage: b's next hop is the holder's sink, which takes its own microbatches
from any last-stage peer, so b lets a's flow go at once and d pushes it to the sink itself."""

from __future__ import annotations

import pytest

from swarm.flow import cost
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.instance import Link
from tests.flow.conftest import explicit
from tests.flow.test_exchange import kinds_after_one_ask, rewritten

NEAR, FAR = Link(0.001, 1e9), Link(0.2, 1e9)


def far_last_hop() -> tuple[MessageBus, dict]:
    """h -> a -> b -> h with a -> b far; b's stage mate d (the last stage) is idle and near a."""
    peers = [("a", 0, 2.0, 0.1), ("b", 1, 1.0, 0.1), ("d", 1, 1.0, 0.1)]
    links = {("a", "b"): FAR, ("a", "d"): NEAR, ("a", "h"): NEAR, ("b", "h"): NEAR, ("d", "h"): NEAR}
    inst = explicit(2, peers, [("h", 1.0)], overrides=links)
    bus = MessageBus(inst, seed=0)
    bus.run_until_quiescent()
    p = {n: bus.agents[n] for n in "abdh"}
    p["h"].out["h"], p["a"].out["h"] = {"a": 1.0}, {"b": 1.0}
    p["b"].out["h"], p["d"].out["h"] = {"h": 1.0}, {}
    p["a"].inflow["h"], p["b"].inflow["h"], p["d"].inflow["h"] = {"h": 1.0}, {"a": 1.0}, {}
    p["h"].sink_in = {"b": 1.0}
    stage_peers = {n: p[n] for n in "abd"}
    p["h"]._worst_cache.clear()
    rewritten(bus, stage_peers, budget=0)
    bus.run_until_quiescent()
    rewritten(bus, stage_peers, budget=1)
    assert violations(bus) == []
    return bus, p


@pytest.mark.parametrize("on", [True, False])
def test_an_idle_last_stage_mate_takes_a_dear_flow_over(on: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `LAST_STAGE_HAND_OVERS` a's ask to d becomes a hand-over with the sink as z: no
    `HandOff` (the sink need not move anything), b cancels its flow to the sink, d offers it; the
    flow stays the maximum and the worst path gets cheaper. Off, a -> b stays."""
    monkeypatch.setattr("swarm.flow.handover.LAST_STAGE_HAND_OVERS", on)
    bus, p = far_last_hop()
    inst = bus.instance
    worst_before = cost.max_path_cost(inst, bus.routes())
    kinds = kinds_after_one_ask(bus, p["a"])
    assert violations(bus) == []
    assert cost.flow_value(bus.routes()) == pytest.approx(1.0)
    if on:
        assert "HandOver" in kinds and "HandOff" not in kinds
        assert p["a"].routes()["h"] == {"d": pytest.approx(1.0)}
        assert p["d"].routes()["h"] == {"h": pytest.approx(1.0)}
        assert p["b"].carried() == pytest.approx(0.0, abs=1e-9)
        assert p["h"].sink_in.get("b", 0.0) == pytest.approx(0.0, abs=1e-9)
        assert cost.max_path_cost(inst, bus.routes()) < worst_before - 0.1
    else:
        assert "HandOver" not in kinds
        assert p["a"].routes()["h"] == {"b": pytest.approx(1.0)}
