"""Seeded random routing instances over the 12-region geo matrix (benchmarks and tests)."""

from __future__ import annotations

import random

from swarm.flow.instance import HolderSpec, Instance, InstanceError, PeerSpec, geo_matrix

ACTIVATION_BYTES = 4 * 2**20  # one microbatch's activations in a random instance


def random_instance(
    peers: int, stages: int, holders: int = 1, seed: int = 0, activation_bytes: float = ACTIVATION_BYTES
) -> Instance:
    """`peers` stage peers spread over `stages` stages (at least one each), `holders` data holders.

    Capacities 1-5 microbatches/s, compute 0.05-0.5 s per microbatch, regions uniform over the
    matrix; total demand is 0.5-1.5x the weakest stage, so both demand- and stage-limited swarms
    occur.
    """
    if stages < 1:
        raise InstanceError(f"--stages must be >= 1, got {stages}")
    if peers < stages:
        raise InstanceError(f"--peers must be at least --stages ({stages}), got {peers}")
    if holders < 1:
        raise InstanceError(f"--holders must be >= 1, got {holders}")
    rng = random.Random(seed)
    regions = geo_matrix().regions
    counts = [1] * stages
    for _ in range(peers - stages):
        counts[rng.randrange(stages)] += 1
    specs: list[PeerSpec] = []
    for s, count in enumerate(counts):
        for i in range(count):
            specs.append(
                PeerSpec(
                    f"s{s}p{i}",
                    s,
                    round(rng.uniform(1.0, 5.0), 3),
                    round(rng.uniform(0.05, 0.5), 4),
                    rng.choice(regions),
                )
            )
    weakest = min(sum(p.capacity for p in specs if p.stage == s) for s in range(stages))
    total = weakest * rng.uniform(0.5, 1.5)
    shares = [rng.uniform(0.5, 1.5) for _ in range(holders)]
    hs = tuple(
        HolderSpec(
            f"h{i}",
            round(total * w / sum(shares), 4),
            round(rng.uniform(0.005, 0.05), 4),
            rng.choice(regions),
        )
        for i, w in enumerate(shares)
    )
    return Instance(stages=stages, activation_bytes=activation_bytes, holders=hs, peers=tuple(specs))


def random_peer(instance: Instance, rng: random.Random, name: str) -> PeerSpec:
    """A newcomer for churn: random stage, capacity, compute and region."""
    return PeerSpec(
        name,
        rng.randrange(instance.stages),
        round(rng.uniform(1.0, 5.0), 3),
        round(rng.uniform(0.05, 0.5), 4),
        rng.choice(geo_matrix().regions),
    )
