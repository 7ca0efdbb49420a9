"""Which upstream peer should feed which peer of the next stage, solved exactly for one layer.

Pure decision code for layer plans (swarm/flow/layer_plans.py). With every peer's throughput fixed,
the flows between two consecutive stages form a transportation problem: each upstream peer a sends
what it sends now, each downstream peer b takes what it takes now. The most expensive used path
through an edge a -> b costs `arrival[a] + cost[a, b] + onward[b]` (a's most expensive route from
the holder, the edge, b's most expensive route on to the holder's sink), and every holder-to-holder
path crosses this layer once, so the layer's most expensive edge by that measure is the swarm's
max path cost. `plan_layer` finds the assignment whose most expensive edge is cheapest
(a bottleneck transportation problem: the least threshold whose edges still carry every flow), then
the cheapest assignment in total cost under that threshold.

Exchanges (swarm/flow/exchange.py) reach the same kind of assignment by trading two edges at a time,
each trade judged on its own; measured offline they stop where no single trade pays, while the
exact plan moves several flows at once (docs/routing.md: "Layer plans"). `swaps_for` turns a plan
into such trades (a -> b, c -> d become a -> d, c -> b), so the plan is carried out by the same
exchanges, with their guarantees under loss and churn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from scipy.optimize import linprog

EPS = 1e-9
Edge = tuple[str, str]


def _assign(supply: Mapping[str, float], demand: Mapping[str, float], edges: list[Edge], price: list[float]):
    """Least-price flows over `edges` that send every supply and fill every demand, or None."""
    if not edges:
        return None
    rows = {a: i for i, a in enumerate(supply)}
    cols = {b: len(rows) + j for j, b in enumerate(demand)}
    matrix = np.zeros((len(rows) + len(cols), len(edges)))
    for k, (a, b) in enumerate(edges):
        matrix[rows[a], k] = 1.0
        matrix[cols[b], k] = 1.0
    bounds = np.array([*supply.values(), *demand.values()])
    res = linprog(np.array(price), A_eq=matrix, b_eq=bounds, bounds=(0, None), method="highs")
    return res.x if res.status == 0 else None


def layer_bottleneck(flows: Mapping[Edge, float], arrival: Mapping[str, float], cost, onward) -> float:
    """The most expensive used path through this layer (0 without flow)."""
    used = [arrival[a] + cost[a, b] + onward[b] for (a, b), r in flows.items() if r > EPS]
    return max(used, default=0.0)


def plan_layer(
    flows: Mapping[Edge, float],
    arrival: Mapping[str, float],
    cost: Mapping[Edge, float],
    onward: Mapping[str, float],
    gain: float,
    cost_gain: float = 0.0,
) -> tuple[float, dict[Edge, float]] | None:
    """The exact layer plan, as (its most expensive path, its flows), or None when it neither makes
    the layer's most expensive path cheaper by more than `gain` (seconds) nor, with that path no
    dearer, the layer's total cost cheaper by more than the fraction `cost_gain` (0: never).

    `flows` are the current flows a -> b; `cost` must hold every pair (a, b) the plan may use (pairs
    it lacks are not used), `arrival` every sender's and `onward` every receiver's figure."""
    supply: dict[str, float] = {}
    demand: dict[str, float] = {}
    for (a, b), r in flows.items():
        if r > EPS:
            supply[a] = supply.get(a, 0.0) + r
            demand[b] = demand.get(b, 0.0) + r
    if len(supply) < 2 or len(demand) < 2:
        return None  # one sender or one receiver: the assignment is forced
    now = layer_bottleneck(flows, arrival, cost, onward)
    pairs = [
        (arrival[a] + c + onward[b], (a, b), c) for (a, b), c in cost.items() if a in supply and b in demand
    ]
    levels = sorted({w for w, _, _ in pairs if w <= now + EPS})
    if not levels:
        return None
    # the least level whose edges carry every flow: feasibility only grows with the level
    lo, hi, found = 0, len(levels) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        edges = [e for w, e, _ in pairs if w <= levels[mid] + EPS]
        x = _assign(supply, demand, edges, [0.0] * len(edges))
        if x is None:
            lo = mid + 1
        else:
            found, hi = mid, mid - 1
    if found is None:
        return None
    top = levels[found]
    allowed = [(e, c) for w, e, c in pairs if w <= top + EPS]
    x = _assign(supply, demand, [e for e, _ in allowed], [c for _, c in allowed])
    if x is None:  # (the level was feasible: only numerical trouble gets here)
        return None
    plan = {e: float(v) for (e, _), v in zip(allowed, x) if v > EPS}
    if top < now - gain:
        return top, plan
    before = sum(r * cost[e] for e, r in flows.items() if r > EPS)
    after = sum(r * cost[e] for e, r in plan.items())
    if cost_gain > 0 and after < before * (1.0 - cost_gain):
        return top, plan
    return None


Swap = tuple[str, str, str, str, float]  # (a, b, c, d, rate): a's flow on b moves to d, c's on d to b


def _take(pool: dict[Edge, list[list[float]]], e: Edge, rate: float) -> int:
    """Take `rate` of edge e's flow, earliest first; the latest wave that made part of it."""
    wave = 0
    for chunk in pool.get(e, []):
        if rate <= EPS:
            break
        got = min(chunk[0], rate)
        if got > EPS:
            chunk[0] -= got
            rate -= got
            wave = max(wave, int(chunk[1]))
    return wave


def swaps_for(
    old: Mapping[Edge, float], new: Mapping[Edge, float], may_use: Callable[[str, str], bool] | None = None
) -> list[list[Swap]]:
    """Exchanges that turn `old` into `new`, in waves: the swaps of a wave move only flow that
    `old` has or that an earlier wave brings (a cycle of 2k edges in the difference takes k - 1
    swaps, each making the edge the next one moves). What cannot be decomposed is left undone."""
    delta: dict[Edge, float] = {}
    for e in set(old) | set(new):
        d = new.get(e, 0.0) - old.get(e, 0.0)
        if abs(d) > EPS:
            delta[e] = d
    pool: dict[Edge, list[list[float]]] = {e: [[r, 0]] for e, r in old.items() if r > EPS}

    def have(e: Edge) -> float:
        return sum(c[0] for c in pool.get(e, []))

    waves: list[list[Swap]] = []
    for _ in range(4 * len(delta) + 4):
        adds = sorted(((d, e) for e, d in delta.items() if d > EPS), key=lambda t: (-t[0], t[1]))
        made = False
        for _, (a, d) in adds:
            cuts_a = [
                b for (x, b), v in delta.items() if x == a and v < -EPS and b != d and have((a, b)) > EPS
            ]
            cuts_d = [
                c for (c, y), v in delta.items() if y == d and v < -EPS and c != a and have((c, d)) > EPS
            ]
            if not cuts_a or not cuts_d:
                continue
            # prefer a fourth edge c -> b that the plan wants, then the most flow moved
            pairs = [(b, c) for b in cuts_a for c in cuts_d]
            if may_use is not None:  # a fourth edge the plan does not want must be allowed
                pairs = [(b, c) for b, c in pairs if delta.get((c, b), 0.0) > EPS or may_use(c, b)]
            if not pairs:
                continue
            b, c = max(
                pairs,
                key=lambda bc: (
                    delta.get((bc[1], bc[0]), 0.0) > EPS,
                    -delta[(a, bc[0])] - delta[(bc[1], d)],
                    bc,
                ),
            )
            rate = min(delta[(a, d)], -delta[(a, b)], -delta[(c, d)], have((a, b)), have((c, d)))
            if rate <= EPS:
                continue
            wave = max(_take(pool, (a, b), rate), _take(pool, (c, d), rate)) + 1
            while len(waves) < wave:
                waves.append([])
            waves[wave - 1].append((a, b, c, d, rate))
            for e in ((a, d), (c, b)):
                pool.setdefault(e, []).append([rate, wave])
            for e, v in (((a, d), -rate), ((a, b), rate), ((c, d), rate), ((c, b), -rate)):
                delta[e] = delta.get(e, 0.0) + v
                if abs(delta[e]) <= EPS:
                    del delta[e]
            made = True
            break
        if not made:
            break
    return waves


def after_swaps(old: Mapping[Edge, float], swaps: list[Swap]) -> dict[Edge, float]:
    """The flows once every swap is made."""
    out = dict(old)
    for a, b, c, d, rate in swaps:
        for e, v in (((a, d), rate), ((a, b), -rate), ((c, d), -rate), ((c, b), rate)):
            out[e] = out.get(e, 0.0) + v
    return {e: r for e, r in out.items() if r > EPS}


__all__ = ["plan_layer", "swaps_for", "after_swaps", "layer_bottleneck"]
