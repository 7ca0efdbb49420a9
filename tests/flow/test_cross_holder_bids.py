"""Holders bid for full stage-0 peers held by other holders' dearer flow (bids.py, holder_agent.py)."""

from __future__ import annotations

import pytest

from swarm.flow import bids, cost
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.instance import Link
from swarm.flow.messages import Offer, Return
from tests.flow.conftest import explicit
from tests.flow.test_exchange import recorded


def far_first(cross: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[MessageBus, list]:
    """One stage of two peers (1 microbatch/s each), a far holder h that took both, then a near
    holder g that wants them too: the maximum flow is 2 either way, the cheaper paths are g's."""
    monkeypatch.setattr(bids, "CROSS_HOLDER_BIDS", cross)
    far = Link(0.2, 1e8)
    inst = explicit(
        1,
        [("a", 0, 1.0, 0.1), ("b", 0, 1.0, 0.1)],
        [("h", 2.0), ("g", 0.0)],
        overrides={("h", "a"): far, ("h", "b"): far},
    )
    bus = MessageBus(inst, seed=3)
    assert bus.run_until_quiescent().quiescent
    assert cost.flow_value({"h": bus.routes()["h"]}) == pytest.approx(2.0)
    with recorded(bus) as sent:
        bus.set_demand("g", 2.0)
        assert bus.run_until_quiescent().quiescent
    assert violations(bus) == []
    return bus, sent


@pytest.mark.parametrize("cross", [True, False])
def test_a_near_holder_takes_full_peers_from_a_far_one(monkeypatch: pytest.MonkeyPatch, cross: bool) -> None:
    bus, sent = far_first(cross, monkeypatch)
    routes, inst = bus.routes(), bus.instance
    assert cost.flow_value(routes) == pytest.approx(2.0)  # the maximum flow either way
    served = {h: cost.flow_value({h: routes.get(h, {})}) for h in ("g", "h")}
    returned = [e for e in sent if isinstance(e.body, Return) and e.dst == "h"]
    if cross:
        bids_sent = [e for e in sent if isinstance(e.body, Offer) and e.body.preempt and e.src == "g"]
        assert sorted(e.dst for e in bids_sent) == ["a", "b"]  # each full peer once
        assert sum(e.body.rate for e in returned) == pytest.approx(2.0)  # h's flow handed back
        assert served == {"g": pytest.approx(2.0), "h": pytest.approx(0.0, abs=1e-6)}
        assert cost.max_path_cost(inst, routes) < 0.5
    else:
        assert not returned
        assert served == {"g": pytest.approx(0.0, abs=1e-6), "h": pytest.approx(2.0)}


def test_with_one_holder_or_limited_links_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bids move other holders' flow: with one holder, and with limited links (where flow of
    every holder bid already), every run is message for message the same with them on or off."""
    import dataclasses

    from swarm.flow.generate import random_instance

    def run(inst, cross: bool) -> tuple[int, dict]:
        monkeypatch.setattr(bids, "CROSS_HOLDER_BIDS", cross)
        bus = MessageBus(inst, seed=7)
        stats = bus.run_until_quiescent()
        return stats.messages, bus.routes()

    one = random_instance(24, 4, 1, seed=7)
    limited = dataclasses.replace(random_instance(24, 4, 3, seed=7), link_capacity=True)
    for inst in (one, limited):
        assert run(inst, True) == run(inst, False)


def test_bids_across_holders_keep_the_maximum_flow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three holders contest 6 x 4 peers: the flow is the exact maximum, conserved, within capacity."""
    from swarm.flow.generate import random_instance
    from swarm.flow.reference import max_flow_value

    monkeypatch.setattr(bids, "CROSS_HOLDER_BIDS", True)
    for seed in (2, 5):
        inst = random_instance(24, 6, 3, seed=seed)
        bus = MessageBus(inst, seed=seed)
        assert bus.run_until_quiescent().quiescent
        assert violations(bus) == []
        assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)
