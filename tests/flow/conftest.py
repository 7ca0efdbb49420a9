"""Shared helpers for the routing-engine tests."""

from __future__ import annotations

import pytest

from swarm.flow.instance import HolderSpec, Instance, Link, PeerSpec


def explicit(
    stages: int,
    peers: list[tuple[str, int, float, float]],
    holders: list[tuple[str, float]],
    latency_s: float = 0.01,
    bandwidth: float = 1e8,
    overrides: dict | None = None,
) -> Instance:
    """An instance with explicit links: every pair gets (latency, bandwidth) unless overridden."""
    ps = tuple(PeerSpec(i, s, c, comp) for i, s, c, comp in peers)
    hs = tuple(HolderSpec(i, d, 0.0) for i, d in holders)
    ids = [p.id for p in ps] + [h.id for h in hs]
    links = {(a, b): Link(latency_s, bandwidth) for a in ids for b in ids if a < b}
    for (a, b), link in (overrides or {}).items():
        links.pop((b, a), None)
        links[(a, b)] = link
    return Instance(
        stages=stages, activation_bytes=1e6, holders=hs, peers=ps, geo=False, explicit_links=links
    )


@pytest.fixture
def diamond() -> Instance:
    """h -> {a (cap 2), b (cap 3)} -> c (cap 4) -> h, demand 10: the flow is 4, stage 1 limits it."""
    return explicit(2, [("a", 0, 2.0, 0.1), ("b", 0, 3.0, 0.3), ("c", 1, 4.0, 0.1)], [("h", 10.0)])
