"""Conversions: a full stage-0 peer turns a far holder's flow into a bidding nearer holder's, down the
far holder's path (swarm/flow/conversions.py)."""

from __future__ import annotations

import math

import pytest

from swarm.flow import bids, conversions, cost
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.instance import Link
from swarm.flow.messages import Convert, ConvertBack, Envelope, Offer
from swarm.routing.codec import from_wire, to_wire
from tests.flow.conftest import explicit
from tests.flow.test_exchange import recorded


def far_first(on: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[MessageBus, list]:
    """h -> a -> c -> h with one microbatch/s at a and c: far holder h took it all, then near
    holder g wants it too. Stage 1 is the bottleneck, so a never reaches g's sink: no bid of g's can
    be taken by labels, only a conversion carries g's flow."""
    monkeypatch.setattr(bids, "CROSS_HOLDER_BIDS", True)
    monkeypatch.setattr(conversions, "CONVERSIONS", on)
    far = Link(0.2, 1e8)
    inst = explicit(
        2,
        [("a", 0, 1.0, 0.1), ("c", 1, 1.0, 0.1)],
        [("h", 1.0), ("g", 0.0)],
        overrides={("h", "a"): far, ("c", "h"): far},
    )
    bus = MessageBus(inst, seed=1)
    assert bus.run_until_quiescent().quiescent
    assert bus.routes()["h"]["a"] == {"c": pytest.approx(1.0)}
    with recorded(bus) as sent:
        bus.set_demand("g", 1.0)
        assert bus.run_until_quiescent().quiescent
    assert violations(bus) == []
    return bus, sent


@pytest.mark.parametrize("on", [True, False])
def test_the_near_holder_s_bid_turns_the_far_holder_s_path_into_its_own(
    monkeypatch: pytest.MonkeyPatch, on: bool
) -> None:
    bus, sent = far_first(on, monkeypatch)
    routes, inst = bus.routes(), bus.instance
    served = {h: cost.flow_value({h: routes.get(h, {})}) for h in ("g", "h")}
    assert cost.flow_value(routes) == pytest.approx(1.0)  # the maximum flow either way
    if not on:
        assert served == {"g": pytest.approx(0.0, abs=1e-6), "h": pytest.approx(1.0)}
        assert not any(isinstance(e.body, Convert) for e in sent)
        return
    converts = [e for e in sent if isinstance(e.body, Convert)]
    assert [(e.src, e.dst, e.body.old, e.body.new) for e in converts] == [("a", "c", "h", "g")]
    assert served == {"g": pytest.approx(1.0), "h": pytest.approx(0.0, abs=1e-6)}
    assert routes["g"] == {
        "g": {"a": pytest.approx(1.0)},
        "a": {"c": pytest.approx(1.0)},
        "c": {"g": pytest.approx(1.0)},
    }
    assert cost.max_path_cost(inst, routes) < 0.5  # (g's path; h's cost 0.8)


def test_convert_messages_cross_the_codec_and_bad_ones_change_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for body in (Convert("h", "g", 0.5), ConvertBack("h", "g", 0.25)):
        envelope = Envelope("a", "c", 3, 2, body)
        assert from_wire(to_wire(envelope)) == envelope
    bid = Offer("g", 1.0, 4, 3, bid=0.1, preempt=1)
    assert from_wire(to_wire(bid)) == bid
    bus, _ = far_first(False, monkeypatch)  # h's flow a -> c, conversions never ran
    a, c = bus.agents["a"], bus.agents["c"]
    before = (dict(c.inflow["h"]), dict(c.inflow["g"]), dict(a.out["h"]), dict(a.out["g"]))
    c.on_convert("g", Convert("h", "g", 1.0))  # not a sender of c's
    c.on_convert("a", Convert("h", "nobody", 1.0))  # an unknown holder
    c.on_convert("a", Convert("h", "h", 1.0))  # no change
    for rate in (math.nan, math.inf, -1.0, 0.0):
        c.on_convert("a", Convert("h", "g", rate))
    a.on_convert_back("h", ConvertBack("h", "g", 1.0))  # not a next hop of a's
    a.on_convert_back("c", ConvertBack("h", "g", 5.0))  # nothing of g's on c to give back
    assert (dict(c.inflow["h"]), dict(c.inflow["g"]), dict(a.out["h"]), dict(a.out["g"])) == before
    # more than the sender sends: what is there turns, the rest is said back
    with recorded(bus) as sent:
        c.on_convert("a", Convert("h", "g", 3.0))
    assert c.inflow["g"]["a"] == pytest.approx(1.0) and c.inflow["h"]["a"] == pytest.approx(0.0)
    backs = [e for e in sent if isinstance(e.body, ConvertBack)]
    assert [(e.dst, e.body.rate) for e in backs] == [("a", pytest.approx(2.0))]


def test_with_one_holder_or_limited_links_conversions_change_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from swarm.flow.generate import random_instance

    def run(inst, on: bool) -> tuple[int, dict]:
        monkeypatch.setattr(conversions, "CONVERSIONS", on)
        bus = MessageBus(inst, seed=4)
        stats = bus.run_until_quiescent()
        return stats.messages, bus.routes()

    one = random_instance(24, 4, 1, seed=4)
    limited = dataclasses.replace(random_instance(24, 4, 3, seed=4), link_capacity=True)
    for inst in (one, limited):
        assert run(inst, True) == run(inst, False)
