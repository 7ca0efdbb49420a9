"""The live routing agent's edge costs and link bounds: the geo matrix between peers that named
their region (the same formulas as the routing engine's instances), a fast link otherwise."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from types import SimpleNamespace

import pytest

from swarm.flow.instance import HolderSpec, Instance, PeerSpec
from swarm.routing.live import LOOPBACK, LiveFlow

ACTIVATION_BYTES = 4e6


def with_flow(region: str, check: Callable[[LiveFlow], None]) -> None:
    """Run `check` on a live agent host inside an event loop (its timers need one)."""

    async def main() -> None:
        node = SimpleNamespace(peer_id="me")
        flow = LiveFlow(node, stage=1, stages=4, capacity=2.0, compute_s=0.5,
                        activation_bytes=ACTIVATION_BYTES, region=region)  # fmt: skip
        try:
            check(flow)
        finally:
            flow.close()

    asyncio.run(main())


def reference(stages: int = 4) -> Instance:
    peers = [PeerSpec("me", 1, 2.0, 0.5, "Iowa"), PeerSpec("p", 2, 4.0, 0.25, "Japan")]
    peers += [PeerSpec(f"x{s}", s, 1.0, 1.0, "Iowa") for s in range(stages) if s not in (1, 2)]
    holders = (HolderSpec("h", 1.0, 0.1, "Germany"),)
    return Instance(stages, ACTIVATION_BYTES, holders, tuple(peers), link_capacity=True)


def test_named_regions_give_the_engines_costs_and_link_bounds() -> None:
    with_flow("Iowa", named)


def named(flow: LiveFlow) -> None:
    flow.update([], {}, {"p": 0.25, "h": 0.1}, regions={"p": "Japan", "h": "Germany"})
    inst = reference()
    assert flow.link_capacity
    for a, b in [("me", "p"), ("p", "me"), ("h", "me")]:
        assert flow.cost(a, b) == pytest.approx(inst.edge_cost(a, b))
        assert flow.edge_capacity(a, b) == pytest.approx(inst.edge_capacity(a, b))
    assert flow.edge_capacity("me", "p") < 10.0  # Iowa-Japan over 4 MB activations: a real bound


def test_a_missing_or_unknown_region_is_a_fast_unbounded_link() -> None:
    with_flow("Iowa", missing)
    with_flow("", unnamed)


def missing(flow: LiveFlow) -> None:
    flow.update([], {}, {"p": 0.25, "q": 0.25}, regions={"p": "", "q": "Mars"})
    for other in ("p", "q"):
        assert flow.cost("me", other) == pytest.approx(
            (0.5 + 0.25) / 2 + LOOPBACK.latency_s + 2 * ACTIVATION_BYTES / (2 * LOOPBACK.bandwidth_bytes_s)
        )
        assert math.isinf(flow.edge_capacity("me", other))


def unnamed(flow: LiveFlow) -> None:
    assert not flow.link_capacity and flow.region == ""
    flow.update(["h"], {"p": 2}, {"p": 0.25}, regions={"p": "Japan"})
    assert flow.agent is not None and not flow.agent.link_limits
    assert math.isinf(flow.edge_capacity("me", "p"))  # we named none: no geo link to look up


def test_a_neighbour_whose_region_changes_gets_new_bounds() -> None:
    with_flow("Iowa", moved)


def moved(flow: LiveFlow) -> None:
    flow.update(["h"], {"p": 2}, {"p": 0.25}, regions={"p": "Japan"})
    agent = flow.agent
    assert agent is not None and agent.link_limits
    far = agent.edge_cap("me", "p")
    flow.update(["h"], {"p": 2}, {"p": 0.25}, regions={"p": "Iowa"})  # it re-joined elsewhere
    assert agent.edge_cap("me", "p") > 100 * far


def test_a_stage_mate_leaving_the_dht_view_reaches_the_agent() -> None:
    """Exchange notes (swarm/flow/trade_notes.py) need the mates' departures, and keep their notes
    for as long as a departed peer's record may linger."""
    from swarm.presence import RECORD_TTL_S

    assert LiveFlow.departure_s >= RECORD_TTL_S

    def check(flow: LiveFlow) -> None:
        flow.update(["h"], {"x0": 0, "p": 2}, {"x0": 1.0, "p": 0.25}, mates={"m1", "m2"})
        gone: list[str] = []
        flow.agent.on_mate_gone = gone.append  # type: ignore[union-attr, method-assign]
        flow.update(["h"], {"x0": 0, "p": 2}, {"x0": 1.0, "p": 0.25}, mates={"m2"})
        assert gone == ["m1"]

    with_flow("Iowa", check)
