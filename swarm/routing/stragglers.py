"""Stragglers: a next hop far slower than its stage mates gets little new work, without being dropped.

A sender times every hop it hands a microbatch to (the call's round trip plus the per-microbatch
service time the receiver reports) and keeps a moving average per hop. A hop whose average is more
than `STRAGGLER_RATIO` times the median of its stage mates', and `MIN_EXCESS_S` above it (hops of a
few milliseconds jitter by multiples on a loaded machine), is treated like a failure for new work:
its routing weight shrinks with the square of how much slower it is, down to a floor that keeps a
trickle of probes going, so a peer that recovers (or was only briefly slow) earns its share back.
Pure code: the live peers and the tests call the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from statistics import median

STRAGGLER_RATIO = 2.5
MIN_EXCESS_S = 0.05  # and this much slower: millisecond hops jitter by multiples under load
MIN_WEIGHT = 0.02
EWMA = 0.3  # weight of the newest observation


def observe(previous: float | None, seconds: float) -> float:
    """The moving average of a hop's time after one more observation."""
    return seconds if previous is None else (1 - EWMA) * previous + EWMA * seconds


def straggler_factors(times: Mapping[str, float]) -> dict[str, float]:
    """Weight factor per hop (1.0 for normal hops) from the observed hop times of one stage."""
    known = [t for t in times.values() if t > 0]
    if len(known) < 2:
        return {hop: 1.0 for hop in times}
    typical = median(known)
    factors = {}
    for hop, t in times.items():
        ratio = t / typical if typical > 0 else 1.0
        slow = ratio > STRAGGLER_RATIO and t - typical > MIN_EXCESS_S
        factors[hop] = max(MIN_WEIGHT, (1.0 / ratio) ** 2) if slow else 1.0
    return factors


def down_weight(rates: Mapping[str, float], times: Mapping[str, float]) -> dict[str, float]:
    """`rates` with stragglers among them scaled down (hops never observed keep their rate)."""
    factors = straggler_factors({hop: times[hop] for hop in rates if hop in times})
    return {hop: rate * factors.get(hop, 1.0) for hop, rate in rates.items()}
