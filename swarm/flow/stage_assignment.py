"""Which peers of one stage should carry how much, and from whom to whom, solved exactly.

Pure decision code for stage plans (swarm/flow/layer_plans.py). A layer plan keeps every peer's
throughput; some misses need a stage's peers re-chosen as a whole. Offline, from the protocol's
converged routes of seed 2 instance 14 of the whole-range sweep (12 x 19, 1.103x the min-cost flow's
max path after layer plans), re-solving one stage at a time with its throughputs free took it to
0.994 (docs/routing.md: "Stage plans").

With the stage before (senders a) and the stage after (receivers c) keeping their throughputs, the
stage's peers b are free: a path a -> b -> c costs `arrival[a] + cost_in[a, b] + cost_out[b, c]`
(`cost_out` includes c's worst route onwards), and every holder-to-holder path crosses the stage
once, so the dearest such path used is the swarm's max path cost. For a threshold T, each b picks
one in-threshold t_b: it may take flow from a where `arrival[a] + cost_in[a, b] <= t_b` and send it
to c where `t_b + cost_out[b, c] <= T`. Which t_b is a choice among b's in-costs: a small MILP
(a staircase of binaries per b, "t_b is at least this in-cost"; HiGHS). Feasibility only grows with
T, so T is found by binary search, to within the gain a plan must bring. Then, with each t_b fixed
(`_refine`), an LP finds the cheapest flows in total edge cost, or those that keep most of the
flows now. How a plan is carried out: swarm/flow/stage_moves.py.

Each MILP's work is bounded without a clock (swarm/flow/highs.py): by branch-and-bound nodes
(MILP_NODES) and by HiGHS' interrupt checks (MILP_CHECKS, which also come in the root's cut and
heuristic loops, where most of the time went), so a plan is the same on any machine and load. A
threshold's test that finds no solution within them counts as infeasible. The cheapest-flows solve
starts from the last test's flows, so it never ends with less. Besides the staircase's edge-by-edge
rows, each (b, level) has two rows on b's total flow (the in-edges that need that level, the
out-edges it rules out): the same integer solutions, a tighter relaxation. On 198 solves recorded
from five sweep runs, at 10 nodes, they took the MILPs from 15.4 s to 12.6 s and found 89 of the
101 feasible ones feasible instead of 70. Stages of over MAX_BINARIES sender x peer pairs get no
plan, except shared ones (several holders): those plan over the pairs that carry flow now and the
pairs on the cheapest paths through the stage, MAX_BINARIES in all (`_pruned`). A plan over them is
not exact, but it is never worse than the flows now, and wide several-holder stages are where the
misses were: offline (`--shared-plan-bound`), default-range seed 1 instances 1 (5 x 18, 4 holders)
and 20 (9 x 20, 3 holders) went from 1.099 / 1.069 times the min-cost flow's max path to 1.089 /
1.068 without it (no plan of their wide stages), 0.939 / 0.985 with it (as moved; the exact
per-stage MILP, 36 s a solve there, reaches 0.896 / 0.87).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from swarm.flow.highs import solve_milp

EPS = 1e-9
Edge = tuple[str, str]
Flows = dict[Edge, float]
# Stage peers whose flows share one room: (the mids, their room). With several holders a stage peer
# is one mid per holder (swarm/flow/shared_stage.py), and its capacity is shared by them.
Shared = Sequence[tuple[Sequence[str], float]]
SPLIT = 0.5  # where between its dearest in-edge and what its out-edges leave a refined threshold lies
REFINES = 4  # LPs that re-fix the thresholds from the last flows and re-solve
MILP_NODES = 300  # branch-and-bound nodes a solve may take (none found within them: infeasible)
MILP_GAP = 0.02  # a cheapest-flows solve stops within this relative gap of its bound
MILP_CHECKS = 50  # HiGHS interrupt checks a solve may take (a measure of work that is not the clock)
MILP_START_NODES = 20  # nodes for a cheapest-flows solve, which starts from a threshold test's flows
# Senders x stage peers above which no plan is made: with 300 nodes and no check limit, solves at
# 17 x 17 to 19 x 21 took 0.8-1.6 s each on average (seed 0 instances 15 and 20, seed 2 instance 3
# of the whole range; 47-105 s of MILP in one run) and rarely paid; seed 2 instance 14's plans are
# at most 8 x 26 (under 0.05 s a solve).
MAX_BINARIES = 300


def _solve(
    supply: Mapping[str, float],
    demand: Mapping[str, float],
    room: Mapping[str, float],
    inc: Mapping[Edge, float],
    outc: Mapping[Edge, float],
    top: float,
    price: Mapping[Edge, float] | None,
    keep: Mapping[Edge, float] | None = None,
    start: tuple[Flows, Flows] | None = None,
    shared: Shared = (),
) -> tuple[dict[Edge, float], dict[Edge, float]] | None:
    """Flows whose dearest path a -> b -> c costs at most `top`, or None. With `keep` (the flows
    now), those that keep most of it, and of those the cheapest by `price`. `start`, flows known
    to fit under `top`, is where the search starts (never a worse answer than it)."""
    mids = sorted(room)
    cheapest_in = {b: min((v for (_, bb), v in inc.items() if bb == b), default=np.inf) for b in mids}
    cheapest_out = {b: min((v for (bb, _), v in outc.items() if bb == b), default=np.inf) for b in mids}
    # (an edge that makes a path over `top` with b's cheapest edge on the other side is never used)
    ins = [e for e in inc if inc[e] + cheapest_out[e[1]] <= top + EPS]
    outs = [e for e in outc if outc[e] + cheapest_in[e[0]] <= top + EPS]
    levels = {b: sorted({inc[e] for e in ins if e[1] == b}) for b in mids}
    # u[b, k] = 1: b's in-threshold is at least levels[b][k] (a staircase: u[b, k + 1] <= u[b, k])
    zs = [(b, k) for b in mids for k in range(len(levels[b]))]
    nx, ny = len(ins), len(outs)
    kept = [(j, keep[e]) for j, e in enumerate([*ins, *outs]) if keep is not None and keep.get(e, 0.0) > EPS]
    nw = nx + ny + len(zs)  # first overlap variable: w <= x and w <= the flow now
    n = nw + len(kept)
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []

    def row(entries: list[tuple[int, float]], low: float, high: float) -> None:
        r = len(lo)
        for c, v in entries:
            rows.append(r)
            cols.append(c)
            vals.append(v)
        lo.append(low)
        hi.append(high)

    for a, s in supply.items():
        row([(j, 1.0) for j, e in enumerate(ins) if e[0] == a], s, s)
    for c, s in demand.items():
        row([(nx + j, 1.0) for j, e in enumerate(outs) if e[1] == c], s, s)
    zi = {z: nx + ny + j for j, z in enumerate(zs)}
    rank = {b: {t: k for k, t in enumerate(levels[b])} for b in mids}
    over = {e: bisect_right(levels[e[0]], top - outc[e] + EPS) for e in outs}  # its first level too high
    total = sum(supply.values())
    if shared:  # (a tighter bound per b: only its senders' flow can reach it)
        reach: dict[str, float] = {}
        for a, b in ins:
            reach[b] = reach.get(b, 0.0) + supply[a]
    for mids_of, space in shared:
        group = set(mids_of)
        row([(j, 1.0) for j, e in enumerate(ins) if e[1] in group], -np.inf, max(space, 0.0))
    for b in mids:
        into = [(j, 1.0) for j, e in enumerate(ins) if e[1] == b]
        row(into + [(nx + j, -1.0) for j, e in enumerate(outs) if e[0] == b], 0.0, 0.0)
        row(into, -np.inf, max(room[b], 0.0))
        for k in range(1, len(levels[b])):
            row([(zi[b, k], 1.0), (zi[b, k - 1], -1.0)], -np.inf, 0.0)
        cap = min(max(room[b], 0.0), reach.get(b, 0.0) if shared else total)
        for k in range(len(levels[b])):  # b's flow on edges that need level k, or that it rules out
            need = [(j, 1.0) for j, e in enumerate(ins) if e[1] == b and rank[b][inc[e]] >= k]
            row([*need, (zi[b, k], -cap)], -np.inf, 0.0)
            banned = [(nx + j, 1.0) for j, e in enumerate(outs) if e[0] == b and over[e] <= k]
            if banned:
                row([*banned, (zi[b, k], cap)], -np.inf, cap)
    for j, (a, b) in enumerate(ins):  # a -> b only under b's in-threshold
        row([(j, 1.0), (zi[b, rank[b][inc[a, b]]], -supply[a])], -np.inf, 0.0)
    for j, (b, c) in enumerate(outs):  # b -> c only while b's in-threshold leaves room for it
        if over[b, c] < len(levels[b]):
            row([(nx + j, 1.0), (zi[b, over[b, c]], demand[c])], -np.inf, demand[c])
    for k, (j, _) in enumerate(kept):
        row([(nw + k, 1.0), (j, -1.0)], -np.inf, 0.0)
    matrix = coo_matrix((vals, (rows, cols)), shape=(len(lo), n)).tocsr()
    objective = np.zeros(n)
    if price is not None:
        scale = 1e-3 / max(max(price.values(), default=1.0), 1e-9) if kept else 1.0
        for j, e in enumerate([*ins, *outs]):
            objective[j] = scale * price[e]
    objective[nw:] = -1.0  # (kept flow first: a plan that moves less is carried out more surely)
    integral = np.zeros(n, dtype=bool)
    integral[nx + ny : nw] = True
    upper = np.full(n, np.inf)
    upper[nx + ny : nw] = 1.0
    for k, (_, r) in enumerate(kept):
        upper[nw + k] = r
    first = None if start is None else _start_vector(start, ins, outs, zi, rank, inc, kept, n, nw)
    nodes = MILP_NODES if start is None else MILP_START_NODES
    x = solve_milp(objective, matrix, lo, hi, upper, integral, nodes, MILP_GAP, first, MILP_CHECKS)
    if x is None:
        return None
    return (
        {e: float(x[j]) for j, e in enumerate(ins) if x[j] > EPS},
        {e: float(x[nx + j]) for j, e in enumerate(outs) if x[nx + j] > EPS},
    )


def _start_vector(start, ins, outs, zi, rank, inc, kept, n: int, nw: int) -> np.ndarray:
    """`_solve`'s variables for flows `start`: each b's in-threshold at its dearest in-edge."""
    x = np.zeros(n)
    flows = [start[0].get(e, 0.0) for e in ins] + [start[1].get(e, 0.0) for e in outs]
    x[: len(flows)] = flows
    top_rank: dict[str, int] = {}
    for e, r in zip(ins, flows, strict=False):
        if r > EPS:
            top_rank[e[1]] = max(top_rank.get(e[1], 0), rank[e[1]][inc[e]])
    for (b, k), j in zi.items():
        x[j] = 1.0 if b in top_rank and k <= top_rank[b] else 0.0
    for k, (j, r) in enumerate(kept):
        x[nw + k] = min(flows[j], r)
    return x


def stage_bottleneck(
    flows_in: Mapping[Edge, float], flows_out: Mapping[Edge, float], inc: Mapping[Edge, float], outc
) -> float:
    """The most expensive used path through the stage (0 without flow)."""
    worst_in: dict[str, float] = {}
    for (a, b), r in flows_in.items():
        if r > EPS:
            worst_in[b] = max(worst_in.get(b, -np.inf), inc[a, b])
    used = [worst_in[b] + outc[b, c] for (b, c), r in flows_out.items() if r > EPS and b in worst_in]
    return max(used, default=0.0)


def _least_level(
    supply, demand, room, inc, outc, below: float, within: float, shared: Shared = ()
) -> tuple[float, tuple[Flows, Flows]] | None:
    """The least path cost under `below` (to within `within`) that the stage can be planned to,
    with the flows its test found, or None: binary search over the costs of the paths a -> b -> c."""
    ins: dict[str, list[float]] = {}
    outs: dict[str, list[float]] = {}
    for (_, b), v in inc.items():
        ins.setdefault(b, []).append(v)
    for (b, _), v in outc.items():
        outs.setdefault(b, []).append(v)
    found = {i + o for b in ins for i in ins[b] for o in outs.get(b, ())}
    levels = sorted(t for t in found if t < below)
    found = _solve(supply, demand, room, inc, outc, levels[-1], None, shared=shared) if levels else None
    if found is None:
        return None
    lo, hi = 0, len(levels) - 1  # levels[hi] is feasible, with flows `found`
    while lo < hi and levels[hi] - levels[lo] > within:
        mid = (lo + hi) // 2
        flows = _solve(supply, demand, room, inc, outc, levels[mid], None, shared=shared)
        if flows is not None:
            hi, found = mid, flows
        else:
            lo = mid + 1
    return levels[hi], found


def plan_stage(
    flows_in: Mapping[Edge, float],
    flows_out: Mapping[Edge, float],
    arrival: Mapping[str, float],
    cost_in: Mapping[Edge, float],
    cost_out: Mapping[Edge, float],
    onward: Mapping[str, float],
    room: Mapping[str, float],
    gain: float,
    keep: bool = False,
    top: float | None = None,
    shared: Shared = (),
) -> tuple[float, dict[Edge, float], dict[Edge, float]] | None:
    """The exact stage plan, as (its most expensive path, flows in, flows out), or None when it
    does not make the most expensive path through the stage cheaper by more than `gain` seconds.

    `flows_in` are the flows a -> b into the stage, `flows_out` b -> c out of it; `cost_in` and
    `cost_out` hold every pair the plan may use (the edges' own costs), `arrival` every sender's
    worst route so far, `onward` every receiver's worst route on, `room` what each b may carry.
    Under the least threshold, the flows of least total edge cost, or with `keep` those that keep
    most of the flows now (fewer moves, made more surely, but cheap flows leave later plans room).
    The threshold is found to within `gain` (each try is a MILP); `top` skips that search.
    `shared`: groups of stage peers whose flows share one room (one peer's flows of several holders)."""
    supply: dict[str, float] = {}
    demand: dict[str, float] = {}
    for (a, _), r in flows_in.items():
        if r > EPS:
            supply[a] = supply.get(a, 0.0) + r
    for (_, c), r in flows_out.items():
        if r > EPS:
            demand[c] = demand.get(c, 0.0) + r
    if not supply or not demand or len(room) < 2:
        return None
    inc = {(a, b): arrival[a] + c for (a, b), c in cost_in.items() if a in supply and b in room}
    outc = {(b, c): k + onward[c] for (b, c), k in cost_out.items() if c in demand and b in room}
    if shared and len(inc) > MAX_BINARIES:  # (a wide stage of several holders: its cheapest pairs)
        inc = _pruned(inc, outc, flows_in, MAX_BINARIES)
    if (len(inc) if shared else len(supply) * len(room)) > MAX_BINARIES:
        return None
    if any(e not in inc for e, r in flows_in.items() if r > EPS) or any(
        e not in outc for e, r in flows_out.items() if r > EPS
    ):
        return None  # (a flow whose cost nobody told us: the planner's view is incomplete)
    now = stage_bottleneck(flows_in, flows_out, inc, outc)
    if top is None:
        least = _least_level(supply, demand, room, inc, outc, now - gain, gain, shared)
        if least is None:
            return None
        top, found = least
    else:
        found = _solve(supply, demand, room, inc, outc, top, None, shared=shared)
    if found is None:
        return None
    price, now_flows = {**cost_in, **cost_out}, ({**flows_in, **flows_out} if keep else None)
    best = _solve(supply, demand, room, inc, outc, top, price, now_flows, found, shared)
    if best is not None:
        return stage_bottleneck(best[0], best[1], inc, outc), best[0], best[1]
    # (HiGHS refused the start: a feasible plan's thresholds, then LPs)
    for _ in range(REFINES):  # (each LP keeps the last flows feasible: its objective never rises)
        better = _refine(supply, demand, room, inc, outc, top, found, price, now_flows, shared)
        if better is None or better == found:
            break
        found = better
    return stage_bottleneck(found[0], found[1], inc, outc), found[0], found[1]


def _pruned(
    inc: Mapping[Edge, float], outc: Mapping[Edge, float], flows_in: Mapping[Edge, float], limit: int
) -> dict[Edge, float]:
    """The pairs a wide stage's plan may use: those that carry flow now, then the pairs on the
    cheapest paths through the stage (in-edge plus the peer's cheapest out-edge), up to `limit`."""
    best_out: dict[str, float] = {}
    for (b, _), v in outc.items():
        best_out[b] = min(best_out.get(b, np.inf), v)
    kept = {e for e, r in flows_in.items() if r > EPS and e in inc}
    ranked = sorted((v + best_out.get(e[1], np.inf), e) for e, v in inc.items() if e not in kept)
    for _, e in ranked[: max(limit - len(kept), 0)]:
        kept.add(e)
    return {e: v for e, v in inc.items() if e in kept}  # (in inc's order: the same MILP in any process)


def _levels(found: tuple[Flows, Flows], inc, outc, top: float, split: float) -> dict[str, float]:
    """In-thresholds from flows: each b's `split` of the way from its dearest in-edge to what its
    dearest out-edge leaves under `top`."""
    worst_in: dict[str, float] = {}
    worst_out: dict[str, float] = {}
    for (a, b), r in found[0].items():
        if r > EPS:
            worst_in[b] = max(worst_in.get(b, -np.inf), inc[a, b])
    for (b, c), r in found[1].items():
        if r > EPS:
            worst_out[b] = max(worst_out.get(b, -np.inf), outc[b, c])
    return {b: worst_in[b] + split * (top - worst_out[b] - worst_in[b]) for b in worst_in if b in worst_out}


def _refine(
    supply, demand, room, inc, outc, top: float, found, price, keep, shared: Shared = ()
) -> tuple[Flows, Flows] | None:
    """With the in-thresholds of a feasible plan fixed (`_levels`), the cheapest flows by `price`,
    or with `keep` those that keep most of the flows now: an LP. (Choosing the thresholds and the
    flows at once is a MILP that took over a second per solve on 26 peers a stage.)"""
    level = _levels(found, inc, outc, top, SPLIT)
    return _fixed(supply, demand, room, inc, outc, top, level, price, keep, shared)


def _fixed(
    supply, demand, room, inc, outc, top, level, price, keep, shared: Shared = ()
) -> tuple[Flows, Flows] | None:
    """The LP of `_refine` with the in-thresholds `level` given (a stage peer without one carries
    nothing); None if infeasible."""
    ins = [e for e, v in inc.items() if e[1] in level and v <= level[e[1]] + EPS]
    outs = [e for e, v in outc.items() if e[0] in level and level[e[0]] + v <= top + EPS]
    edges = [*ins, *outs]
    if not ins or not outs:
        return None
    kept = [j for j, e in enumerate(edges) if keep is not None and keep.get(e, 0.0) > EPS]
    n = len(edges) + len(kept)
    node_rows = {("a", a): k for k, a in enumerate(supply)}
    node_rows.update({("c", c): len(supply) + k for k, c in enumerate(demand)})
    node_rows.update({("b", b): len(supply) + len(demand) + k for k, b in enumerate(level)})
    a_eq = np.zeros((len(node_rows), n))
    for j, (a, b) in enumerate(ins):  # sent, and conserved at b
        a_eq[node_rows["a", a], j] = 1.0
        a_eq[node_rows["b", b], j] = 1.0
    for j, (b, c) in enumerate(outs):
        a_eq[node_rows["c", c], len(ins) + j] = 1.0
        a_eq[node_rows["b", b], len(ins) + j] = -1.0
    b_eq = np.array([*supply.values(), *demand.values(), *[0.0] * len(level)])
    groups = [{b for b in mids_of if b in level} for mids_of, _ in shared]
    a_ub = np.zeros((len(level) + len(kept) + len(groups), n))
    b_ub = np.zeros(len(level) + len(kept) + len(groups))
    rows = {b: k for k, b in enumerate(level)}
    for j, (_, b) in enumerate(ins):  # b carries at most its room
        a_ub[rows[b], j] = 1.0
    for b, k in rows.items():
        b_ub[k] = max(room[b], 0.0)
    for k, j in enumerate(kept):  # w <= x
        a_ub[len(level) + k, len(edges) + k] = 1.0
        a_ub[len(level) + k, j] = -1.0
    for k, (group, (_, space)) in enumerate(zip(groups, shared, strict=True)):  # a shared room
        r = len(level) + len(kept) + k
        b_ub[r] = max(space, 0.0)
        for j, (_, b) in enumerate(ins):
            if b in group:
                a_ub[r, j] = 1.0
    objective = np.zeros(n)
    scale = 1e-3 / max(max(price.values(), default=1.0), 1e-9) if kept else 1.0
    for j, e in enumerate(edges if price else ()):
        objective[j] = scale * price[e]
    objective[len(edges) :] = -1.0  # (kept flow first: a plan that moves less is carried out more surely)
    bounds = [(0, None)] * len(edges) + [(0, keep[edges[j]]) for j in kept]
    res = linprog(objective, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=bounds, method="highs")
    if res.status != 0:
        return None
    x = res.x
    return (
        {e: float(x[j]) for j, e in enumerate(ins) if x[j] > EPS},
        {e: float(x[len(ins) + j]) for j, e in enumerate(outs) if x[len(ins) + j] > EPS},
    )


__all__ = ["plan_stage", "stage_bottleneck"]
