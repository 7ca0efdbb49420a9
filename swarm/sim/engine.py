"""A minimal discrete-event queue in simulated seconds (no wall clock anywhere)."""

from __future__ import annotations

import heapq
from typing import Any


class EventQueue:
    """Events are (time, kind, payload...) tuples; equal times pop in insertion order, so a run
    is a pure function of its inputs."""

    def __init__(self) -> None:
        self._heap: list[tuple] = []
        self._seq = 0
        self.now = 0.0
        self.popped = 0

    def push(self, at: float, kind: int, *payload: Any) -> None:
        if at < self.now:
            at = self.now  # never schedule into the past (rounding)
        self._seq += 1
        heapq.heappush(self._heap, (at, self._seq, kind, payload))

    def pop(self) -> tuple[float, int, tuple]:
        at, _, kind, payload = heapq.heappop(self._heap)
        self.now = at
        self.popped += 1
        return at, kind, payload

    def __len__(self) -> int:
        return len(self._heap)

    def peek_time(self) -> float:
        return self._heap[0][0]
