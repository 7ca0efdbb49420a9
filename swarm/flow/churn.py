"""Churn scenarios for the bus: remove peers, add newcomers."""

from __future__ import annotations

import random
from collections.abc import Collection, Mapping

from swarm.flow.bus import MessageBus
from swarm.flow.generate import random_peer


def remove_random_peer(bus: MessageBus, rng: random.Random) -> str | None:
    """Remove one random peer that is not the last of its stage; None if every stage has one."""
    inst = bus.instance
    sizes = {s: len(inst.peers_of(s)) for s in range(inst.stages)}
    choices = sorted(p.id for p in inst.peers if sizes[p.stage] > 1)
    if not choices:
        return None
    pid = rng.choice(choices)
    bus.remove_peer(pid)
    return pid


def add_random_peer(
    bus: MessageBus, rng: random.Random, name: str, mates: Mapping[int, Collection[str]] | None = None
) -> str:
    """Add a random newcomer (`random_peer`); with links given per pair it stands where a random
    stage mate stands (one of `mates[stage]` if given, else of the stage's current peers)."""
    spec = random_peer(bus.instance, rng, name)
    links = None
    if not bus.instance.geo:
        pool = mates[spec.stage] if mates is not None else {p.id for p in bus.instance.peers_of(spec.stage)}
        mate = rng.choice(sorted(pool))
        links = bus.instance.links_like(mate, spec.id)
    bus.add_peer(spec, links)
    return spec.id


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
    # newcomers stand where a surviving peer stands (not where an earlier newcomer does)
    added = [add_random_peer(bus, rng, f"new{seed}_{i}", alive) for i in range(len(removed))]
    return removed, added
