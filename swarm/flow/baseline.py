"""SWARM's stochastic wiring: the baseline router every benchmark reports beside ours.

No global plan: a sender keeps, for each candidate peer, an EMA of the throughput it observed and
the number of its own microbatches in flight there, and sends the next microbatch to the peer with
the least expected busy time (ties broken at random), as SWARM parallelism does.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

DEFAULT_SECONDS = 1.0  # prior time per microbatch before anything was observed


class SwarmRouter:
    """Least expected busy time over a sender's own observations."""

    def __init__(self, seed: int = 0, alpha: float = 0.2) -> None:
        self.rng = random.Random(seed)
        self.alpha = alpha
        self.ema: dict[str, float] = {}  # observed seconds per microbatch
        self.in_flight: dict[str, int] = {}

    def expected_busy(self, peer: str) -> float:
        return (self.in_flight.get(peer, 0) + 1) * self.ema.get(peer, DEFAULT_SECONDS)

    def choose(self, candidates: Sequence[str], now: float = 0.0) -> str:
        if not candidates:
            raise ValueError("no candidate peer to route to")
        best = min(self.expected_busy(p) for p in candidates)
        ties = [p for p in candidates if self.expected_busy(p) <= best * (1 + 1e-12)]
        return self.rng.choice(sorted(ties))

    def on_send(self, peer: str, now: float = 0.0) -> None:
        self.in_flight[peer] = self.in_flight.get(peer, 0) + 1

    def on_done(self, peer: str, seconds: float, now: float = 0.0) -> None:
        self.in_flight[peer] = max(0, self.in_flight.get(peer, 0) - 1)
        old = self.ema.get(peer)
        self.ema[peer] = seconds if old is None else (1 - self.alpha) * old + self.alpha * seconds

    def forget(self, peer: str) -> None:
        self.ema.pop(peer, None)
        self.in_flight.pop(peer, None)
