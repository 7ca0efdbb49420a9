"""What a stage's replica averaging costs, from the stage's bytes and the replicas' measured links.

Two exchange patterns, chosen by the scenario's `averaging` key:

`direct` (default) is what the live peers do (swarm/averaging/replicas.py, and the GWTF prototype):
every replica sends its whole accumulated gradient (B bytes, bf16) to every other replica of the
stage, all sends at once over their own links. It ends when the slowest pair has delivered:
max over ordered pairs of (lat + B / bw). Links are independent, as for activations (no NIC cap).

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


class _HasRegion:
    region: str
    id: str


def direct_exchange_s(replicas: Sequence[_HasRegion], param_bytes: float, link: LinkOf) -> float:
    """Seconds of the live swarm's all-to-all gradient exchange (see the module docstring)."""
    regions = sorted({r.region for r in replicas})
    if len(replicas) < 2:
        return 0.0
    worst = 0.0
    pairs = [(a, b) for a in regions for b in regions if a != b]
    if len(regions) < len(replicas):  # two replicas share a region: the intra-region link counts too
        pairs += [(a, a) for a in regions if sum(r.region == a for r in replicas) > 1]
    for a, b in pairs:
        hop = link(a, b)
        worst = max(worst, hop.latency_s + param_bytes / hop.bandwidth_bytes_s)
    return worst


AVERAGING = ("direct", "ring")


def averaging_s(kind: str, replicas: Sequence[_HasRegion], param_bytes: float, link: LinkOf) -> float:
    """Seconds one stage's replicas spend averaging one iteration's gradients."""
    if kind == "ring":
        return ring_allreduce_s(replicas, param_bytes, link)
    return direct_exchange_s(replicas, param_bytes, link)


def ring_allreduce_s(replicas: Sequence[_HasRegion], param_bytes: float, link: LinkOf) -> float:
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
