"""A peer's next hops: which peers serve the next stage, how much to send each, who is dead.

Rates come from the flow protocol (`swarm/flow`) when it has converged for this holder; until then
hops are weighted by the capacity each peer published. Peers that failed an RPC are excluded at once
(the fault rules in swarm/recovery decide what to do with the microbatch).
"""

from __future__ import annotations

import time
from collections import Counter

from swarm.routing.dispatch import pick_next, rates_by_capacity

DEAD_FOR_S = 30.0


class NextHops:
    def __init__(self) -> None:
        self.capacity: dict[int, dict[str, float]] = {}  # stage -> peer -> published capacity
        self.flow_rates: dict[tuple[str, int], dict[str, float]] = {}  # (holder, stage) -> hop -> rate
        self.sent: dict[tuple[str, int], Counter] = {}
        self.dead: dict[str, float] = {}

    def set_stage_peers(self, stage: int, capacities: dict[str, float]) -> None:
        self.capacity[stage] = dict(capacities)

    def set_flow(self, holder: str, stage: int, rates: dict[str, float]) -> None:
        self.flow_rates[(holder, stage)] = {h: r for h, r in rates.items() if r > 0}

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
        if flow:
            return flow
        return rates_by_capacity({p: c for p, c in self.capacity.get(stage, {}).items() if p in live})

    def choose(self, holder: str, stage: int, exclude: frozenset[str] = frozenset()) -> str | None:
        key = (holder, stage)
        sent = self.sent.setdefault(key, Counter())
        hop = pick_next(self.rates(holder, stage), sent, exclude)
        if hop is not None:
            sent[hop] += 1
        return hop
