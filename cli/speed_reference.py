"""A fixed pure-Python workload, timed beside a benchmark so that its wall time also reads as a ratio.

The same protocol run took 45 s on one day and 131 s on another on "the same" 2-core machine: wall
times alone cannot say whether code got faster. The reference is shaped like the message bus (a
heap of events, dictionary lookups, small tuples and sorts) and runs no project code, so
`seconds / reference_seconds` moves with the code, not with the machine's day.
"""

from __future__ import annotations

import heapq
import random
import time

EVENTS = 150_000  # about 0.3 s on a fast core, 1 s on a slow one


def _workload() -> float:
    rng = random.Random(0)
    nodes = [f"s{i % 16}p{i}" for i in range(1000)]
    views = {n: {"label": rng.randint(0, 50), "spare": rng.random(), "cost": rng.random()} for n in nodes}
    heap = [(rng.random(), i, nodes[i % 1000]) for i in range(2000)]
    heapq.heapify(heap)
    tick, total = 2000, 0.0
    for _ in range(EVENTS):
        t, _, node = heapq.heappop(heap)
        view = views[node]
        near = [(views[m]["cost"], m) for m in nodes[(tick % 900) : (tick % 900) + 16]]
        near.sort()
        total += view["spare"] + near[0][0] + (view["label"] < 25)
        view["spare"] = (view["spare"] * 1.1) % 1.0
        tick += 1
        heapq.heappush(heap, (t + rng.random(), tick, near[-1][1]))
    return total


def reference_seconds(repeats: int = 3) -> float:
    """The best of `repeats` timings of the reference workload (the least disturbed one)."""
    best = float("inf")
    for _ in range(max(1, repeats)):
        start = time.perf_counter()
        _workload()
        best = min(best, time.perf_counter() - start)
    return best


__all__ = ["EVENTS", "reference_seconds"]
