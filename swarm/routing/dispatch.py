"""Pick next hops so that the microbatches sent follow the routing table's rates (pure).

Smooth weighted round robin on counts: the next microbatch goes to the hop furthest below its
share. Over any window the split matches the rates within one microbatch, with no randomness, so
two runs with the same tables route the same way.
"""

from __future__ import annotations

from collections.abc import Mapping


def pick_next(
    rates: Mapping[str, float], sent: Mapping[str, int], exclude: frozenset[str] = frozenset()
) -> str | None:
    """The hop with the least (sent + 1) / rate among positive rates; None when there is none."""
    best, best_key = None, None
    for hop in sorted(rates):
        rate = rates[hop]
        if rate <= 0 or hop in exclude:
            continue
        key = (sent.get(hop, 0) + 1) / rate
        if best_key is None or key < best_key:
            best, best_key = hop, key
    return best


def rates_by_capacity(capacities: Mapping[str, float]) -> dict[str, float]:
    """A table proportional to published capacity: what a hop uses before the flow has converged."""
    return {hop: max(cap, 1e-6) for hop, cap in capacities.items()}
