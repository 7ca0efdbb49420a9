"""What a stage's replica averaging costs, from the stage's bytes and the replicas' measured links.

Two exchange patterns, chosen by the scenario's `averaging` key:

`direct` (default) is what the live peers do (swarm/averaging/replicas.py, and the GWTF prototype):
every replica that carried microbatches sends its whole accumulated gradient (B bytes, bf16) to
every other replica of the stage as soon as its own last backward of the iteration is done, all
sends at once over their own links (independent, as for activations: no NIC cap); a replica steps
when the last contribution has arrived. So replicas that finish early overlap their sends with the
rest of the iteration, and the slowest pair of links paces the stage.

`ring` is the textbook bandwidth-optimal all-reduce, for planning what it would save:
A ring all-reduce (reduce-scatter then all-gather) of B bytes among n replicas takes 2(n-1) steps; in
each step every replica sends one chunk of B/n bytes to its successor while receiving one from its
predecessor, all links at once. A step lasts as long as the slowest hop of the ring (chunk over its
bandwidth plus its latency), so the whole costs 2(n-1) * max_hop(B/n / bw + lat): each replica moves
2(n-1)/n * B bytes, the bandwidth-optimal volume, paced by the ring's slowest link.

The ring's order is free, and a geo-aware implementation picks it from the measured links (as NCCL
and gloo build rings from the topology): replicas of one region sit next to each other (one fast
intra-region hop each), and the regions are visited in the cyclic order whose slowest inter-region
hop is the fastest possible (a bottleneck travelling-salesman tour, solved exactly over <= 12
regions). An alphabetical ring would instead pay for whichever slow transoceanic link it happens to
cross.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from swarm.flow.instance import Link

LinkOf = Callable[[str, str], Link]


def _has_cycle(k: int, adj: list[int]) -> bool:
    """Whether the graph on k >= 3 vertices (bitset adjacency) has a Hamiltonian cycle (subset DP)."""
    full = (1 << k) - 1
    ends = [0] * (1 << k)  # ends[mask]: vertices v such that a path 0 -> v visits exactly mask
    ends[1] = 1
    for mask in range(1, 1 << k):
        if not mask & 1 or not ends[mask]:
            continue
        e = ends[mask]
        while e:
            v = (e & -e).bit_length() - 1
            e &= e - 1
            nxt = adj[v] & ~mask
            while nxt:
                w = (nxt & -nxt).bit_length() - 1
                nxt &= nxt - 1
                ends[mask | (1 << w)] |= 1 << w
    e = ends[full]
    while e:
        v = (e & -e).bit_length() - 1
        e &= e - 1
        if adj[v] & 1:
            return True
    return False


def _order_for(regions: tuple[str, ...], bw: dict[tuple[str, str], float], floor: float) -> list[str]:
    """A Hamiltonian cycle of `regions` using only links of bandwidth >= floor (greedy DFS, which
    the subset DP has proved to exist)."""
    k = len(regions)
    path = [regions[0]]

    def extend() -> bool:
        if len(path) == k:
            return bw[(path[-1], path[0])] >= floor
        for r in regions:
            if r not in path and bw[(path[-1], r)] >= floor:
                path.append(r)
                if extend():
                    return True
                path.pop()
        return False

    extend()
    return path


def best_region_ring(regions: Sequence[str], link: LinkOf) -> list[str]:
    """The cyclic order of distinct `regions` whose slowest inter-region hop is the fastest."""
    regs = tuple(sorted(set(regions)))
    if len(regs) <= 2:
        return list(regs)
    bw = {(a, b): link(a, b).bandwidth_bytes_s for a in regs for b in regs if a != b}
    sym = {(a, b): min(bw[(a, b)], bw[(b, a)]) for a, b in bw}
    key = (regs, tuple(sym.values()))
    found = _RING_CACHE.get(key)
    if found is not None:
        return list(found)
    k = len(regs)
    levels = sorted(set(sym.values()), reverse=True)
    lo, hi = 0, len(levels) - 1  # the complete graph (levels[-1]) always has a cycle
    while lo < hi:
        mid = (lo + hi) // 2
        adj = [0] * k
        for i, a in enumerate(regs):
            for j, b in enumerate(regs):
                if i != j and sym[(a, b)] >= levels[mid]:
                    adj[i] |= 1 << j
        if _has_cycle(k, adj):
            hi = mid
        else:
            lo = mid + 1
    order = _order_for(regs, sym, levels[lo])
    _RING_CACHE[key] = tuple(order)
    return order


_RING_CACHE: dict[tuple, tuple[str, ...]] = {}  # keyed by the regions and their links


AVERAGING = ("direct", "ring")


class Replica(Protocol):
    id: str
    region: str
    carried: set  # microbatches whose gradient it accumulated this iteration
    last_bwd: float  # when it finished its last backward of the iteration


def step_times(
    kind: str, replicas: Sequence[Replica], param_bytes: float, link: LinkOf, now: float
) -> dict[str, float]:
    """When each replica of a stage has the averaged gradient and takes its step.

    `direct`: replica r sends as soon as its own last backward is done, so q steps at
    max(q's own last backward, max over other carriers r of r.last_bwd + lat(r,q) + B/bw(r,q)).
    A replica that carried nothing sends nothing (it still receives). `ring`: the ring starts when
    the last carrier is done and ends for everyone at once. `now` (the iteration's end) is the
    floor where no gradient has to arrive."""
    carriers = [r for r in replicas if r.carried]
    if kind == "ring":
        start = max((r.last_bwd for r in carriers), default=now)
        end = start + ring_allreduce_s(replicas, param_bytes, link)
        return {r.id: end for r in replicas}
    # the two latest carriers per region suffice: q excludes only itself
    top: dict[str, list[tuple[float, str]]] = {}
    for r in carriers:
        best = top.setdefault(r.region, [])
        best.append((r.last_bwd, r.id))
        best.sort(reverse=True)
        del best[2:]
    out = {}
    for q in replicas:
        ready = q.last_bwd if q.carried else now
        for region, best in top.items():
            done = next((t for t, rid in best if rid != q.id), None)
            if done is not None:
                hop = link(region, q.region)
                ready = max(ready, done + hop.latency_s + param_bytes / hop.bandwidth_bytes_s)
        out[q.id] = ready
    return out


def ring_allreduce_s(replicas: Sequence[Replica], param_bytes: float, link: LinkOf) -> float:
    """Seconds of a ring all-reduce of `param_bytes` among `replicas` (see the module docstring)."""
    n = len(replicas)
    if n < 2:
        return 0.0
    order = {r: i for i, r in enumerate(best_region_ring([r.region for r in replicas], link))}
    ring = sorted(replicas, key=lambda r: (order[r.region], r.id))
    chunk = param_bytes / n
    step = 0.0
    for i in range(n):
        hop = link(ring[i].region, ring[(i + 1) % n].region)
        step = max(step, chunk / hop.bandwidth_bytes_s + hop.latency_s)
    return 2.0 * (n - 1) * step
