"""How many microbatches per second a data holder asks the routing for.

Asking for "all the swarm can carry" (`ALL`) makes the flow fill every peer's published capacity,
and dispatch follows the flow's rates as shares: when links, not GPUs, set the pace (peers in other
regions), most microbatches then go down dear paths whose compute capacity the links cannot feed.
The adaptive rule asks for HEADROOM times the rate the holder measured over its last iteration:
enough for the flow to find more when the swarm speeds up, few enough that the cheapest paths
carry the work. A new demand is only published when it moves by more than HYSTERESIS, so the flow
is not re-planned every iteration. Pure: the live holder and the simulator call the same function.
"""

from __future__ import annotations

ALL = 1000.0  # microbatches/s: more than any swarm carries
HEADROOM = 2.0
HYSTERESIS = 0.25
POLICIES = ("all", "adaptive")


def next_demand(policy: str, current: float, microbatches: int, seconds: float) -> float | None:
    """The demand to publish after an iteration of `microbatches` in `seconds`, or None to keep it."""
    if policy not in POLICIES:
        raise ValueError(f"holder demand policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if policy == "all" or microbatches <= 0 or seconds <= 0:
        return None
    wanted = min(ALL, HEADROOM * microbatches / seconds)
    return wanted if abs(wanted - current) > HYSTERESIS * current else None
