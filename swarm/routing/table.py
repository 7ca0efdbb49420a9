"""A peer's next hops: which peers serve the next stage, how much to send each, who is dead.

Rates come from the flow protocol (`swarm/flow`) when it has converged for this holder; until then
hops are weighted by the capacity each peer published. Peers that failed an RPC are excluded at once
(the fault rules in swarm/recovery decide what to do with the microbatch); stragglers keep only a
small share of new work (stragglers.py).
"""

from __future__ import annotations

import time
from collections import Counter

from swarm.routing.dispatch import pick_next, rates_by_capacity
from swarm.routing.stragglers import down_weight, observe

DEAD_FOR_S = 30.0


class NextHops:
    def __init__(self) -> None:
        self.capacity: dict[int, dict[str, float]] = {}  # stage -> peer -> published capacity
        self.flow_rates: dict[tuple[str, int], dict[str, float]] = {}  # (holder, stage) -> hop -> rate
        self.sent: dict[tuple[str, int], Counter] = {}
        self.dead: dict[str, float] = {}
        self.hop_time: dict[str, float] = {}  # peer -> moving average of a hop's time (stragglers.py)

    def set_stage_peers(self, stage: int, capacities: dict[str, float]) -> None:
        self.capacity[stage] = dict(capacities)

    def set_flow(self, holder: str, stage: int, rates: dict[str, float]) -> None:
        self.flow_rates[(holder, stage)] = {h: r for h, r in rates.items() if r > 0}

    def observe(self, peer: str, seconds: float, reply: dict | None = None) -> None:
        """A hop to `peer` took `seconds` to hand over; the reply may add the peer's service time."""
        service = (reply or {}).get("service_s")
        if isinstance(service, (int, float)) and 0 <= service < 3600:
            seconds += float(service)
        self.hop_time[peer] = observe(self.hop_time.get(peer), seconds)

    def mark_dead(self, peer: str, now: float | None = None) -> None:
        self.dead[peer] = time.monotonic() if now is None else now

    def alive(self, peer: str) -> bool:
        since = self.dead.get(peer)
        if since is None:
            return True
        if time.monotonic() - since > DEAD_FOR_S:
            del self.dead[peer]
            return True
        return False

    def candidates(self, stage: int) -> list[str]:
        return sorted(p for p in self.capacity.get(stage, {}) if self.alive(p))

    def rates(self, holder: str, stage: int) -> dict[str, float]:
        live = set(self.candidates(stage))
        flow = {h: r for h, r in self.flow_rates.get((holder, stage), {}).items() if h in live}
        if not flow:
            flow = rates_by_capacity({p: c for p, c in self.capacity.get(stage, {}).items() if p in live})
        return down_weight(flow, self.hop_time)

    def choose(self, holder: str, stage: int, exclude: frozenset[str] = frozenset()) -> str | None:
        key = (holder, stage)
        sent = self.sent.setdefault(key, Counter())
        hop = pick_next(self.rates(holder, stage), sent, exclude)
        if hop is not None:
            sent[hop] += 1
        return hop
