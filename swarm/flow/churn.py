"""Churn scenarios for the bus: remove a fraction of peers, add as many newcomers."""

from __future__ import annotations

import random

from swarm.flow.bus import MessageBus
from swarm.flow.generate import random_peer


def churn(bus: MessageBus, fraction: float, seed: int = 0) -> tuple[list[str], list[str]]:
    """Remove round(fraction * peers) random peers (never a stage's last one) and add as many.

    Returns (removed ids, added ids). Events happen at the bus's current virtual time.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"churn fraction must be in [0, 1], got {fraction}")
    rng = random.Random(seed)
    inst = bus.instance
    count = round(fraction * len(inst.peers))
    alive = {s: [p.id for p in inst.peers_of(s)] for s in range(inst.stages)}
    removed: list[str] = []
    for pid in rng.sample(sorted(p.id for p in inst.peers), len(inst.peers)):
        if len(removed) >= count:
            break
        spec = bus.instance.node(pid)
        if len(alive[spec.stage]) > 1:  # type: ignore[union-attr]
            alive[spec.stage].remove(pid)  # type: ignore[union-attr]
            bus.remove_peer(pid)
            removed.append(pid)
    added = []
    for i in range(len(removed)):
        spec = random_peer(bus.instance, rng, f"new{seed}_{i}")
        links = None
        if not bus.instance.geo:  # links given per pair: the newcomer stands where a stage mate stands
            mate = rng.choice(sorted(alive[spec.stage]))
            links = bus.instance.links_like(mate, spec.id)
        bus.add_peer(spec, links)
        added.append(spec.id)
    return removed, added
