"""Exact centralized references: maximum flow, min-cost maximum flow, min-max-path maximum flow.

Used only to judge the decentralized protocol (tests, benchmarks, the simulator's oracle), so they
lean on well-kept solvers: networkx for the maximum flow, scipy's HiGHS for the LP and the MILP.

Holders are commodities: a microbatch of holder h must come back to h, so each holder gets its own
copy of the layered graph, sharing the peers' capacities (a multi-commodity flow, exact as an LP).

GWTF's objective (the most expensive *used* path as cheap as possible, among maximum flows) is a
MILP: binary y_e marks an edge as used (x_e <= ub_e * y_e), node potentials pi are earliest-arrival
times along used edges (pi_b >= pi_a + d_ab - M_e (1 - y_e), with M_e = longest(a) + d_ab, so an
unused edge never binds), the sink potential is <= T, minimise T. Every used path then costs at
most T, and the potentials of any flow whose used paths cost at most T are feasible, so the optimum
is exact (to HiGHS's MIP gap, which we set to 0; `MinMaxSolution.lower_bound` reports the proven
bound if a time limit stops it early). A second MILP then minimises the total cost with T fixed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import networkx as nx
import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp
from scipy.sparse import coo_matrix, hstack, vstack

from swarm.flow.cost import flow_value, layers, max_path_cost
from swarm.flow.instance import Instance

CLEAN = 1e-7  # LP values below this are solver noise


def max_flow_value(instance: Instance) -> float:
    """Maximum microbatches/s over all holders (networkx, nodes split for capacities).

    Every holder reaches every first-stage peer and is reached by every last-stage peer, so the
    multi-commodity maximum equals this single-commodity one (each path can end at its own holder).
    With link capacities a holder's own links bound its paths, so the exact multi-commodity LP
    answers instead.
    """
    if instance.link_capacity:
        return _lp_max_flow(_model(instance))
    g = nx.DiGraph()
    for h in instance.holders:
        g.add_edge("__src__", ("out", h.id), capacity=h.demand)
        g.add_edge(("in", h.id), "__sink__", capacity=h.demand)
    for p in instance.peers:
        g.add_edge(("in", p.id), ("out", p.id), capacity=p.capacity)
    for h in instance.holders:
        lay = layers(instance, h.id)
        for left, right in zip(lay, lay[1:]):
            for a in left:
                for b in right:
                    g.add_edge(("out", a), ("in", b))  # unbounded
    return float(nx.maximum_flow_value(g, "__src__", "__sink__"))


@dataclass
class _Model:
    """The multi-commodity LP: one variable per (holder, edge)."""

    edges: list[tuple[str, str, str]]  # (holder, a, b)
    cost: np.ndarray
    a_eq: coo_matrix
    a_ub: coo_matrix
    b_ub: np.ndarray
    out_of_holders: np.ndarray  # coefficient row: total flow


def _model(instance: Instance, keep: Callable[[str, str, str], bool] | None = None) -> _Model:
    edges: list[tuple[str, str, str]] = []
    for h in instance.holder_ids():
        lay = layers(instance, h)
        for left, right in zip(lay, lay[1:]):
            edges.extend((h, a, b) for a in left for b in right if keep is None or keep(h, a, b))
    n = len(edges)
    cost = np.array([instance.edge_cost(a, b) for _, a, b in edges])
    peers = [p.id for p in instance.peers]
    holders = instance.holder_ids()
    cons_row = {(h, p): i for i, (h, p) in enumerate((h, p) for h in holders for p in peers)}
    cap_row = {p: i for i, p in enumerate(peers)}
    link_row: dict[tuple[str, str], int] = {}  # shared by every holder's copy of the edge
    link_cap: list[float] = []
    eq_r, eq_c, eq_v = [], [], []
    ub_r, ub_c, ub_v = [], [], []
    total = np.zeros(n)
    for j, (h, a, b) in enumerate(edges):
        if (h, b) in cons_row:  # into a peer
            eq_r.append(cons_row[(h, b)]), eq_c.append(j), eq_v.append(1.0)
            ub_r.append(cap_row[b]), ub_c.append(j), ub_v.append(1.0)
        if (h, a) in cons_row:  # out of a peer
            eq_r.append(cons_row[(h, a)]), eq_c.append(j), eq_v.append(-1.0)
        if a == h:
            ub_r.append(len(peers) + holders.index(h)), ub_c.append(j), ub_v.append(1.0)
            total[j] = 1.0
        if instance.link_capacity:
            k = link_row.get((a, b))
            if k is None:
                k = link_row[(a, b)] = len(link_row)
                link_cap.append(instance.edge_capacity(a, b))
            ub_r.append(len(peers) + len(holders) + k), ub_c.append(j), ub_v.append(1.0)
    a_eq = coo_matrix((eq_v, (eq_r, eq_c)), shape=(len(cons_row), n))
    a_ub = coo_matrix((ub_v, (ub_r, ub_c)), shape=(len(peers) + len(holders) + len(link_row), n))
    b_ub = np.array([p.capacity for p in instance.peers] + [h.demand for h in instance.holders] + link_cap)
    return _Model(edges, cost, a_eq, a_ub, b_ub, total)


def _routes(instance: Instance, edges: list[tuple[str, str, str]], x: np.ndarray) -> dict:
    routes: dict[str, dict[str, dict[str, float]]] = {h: {} for h in instance.holder_ids()}
    for (h, a, b), v in zip(edges, x):
        if v > CLEAN:
            routes[h].setdefault(a, {})[b] = float(v)
    return routes


def _lp_max_flow(m: _Model) -> float:
    res = linprog(
        -m.out_of_holders,
        A_ub=m.a_ub,
        b_ub=m.b_ub,
        A_eq=m.a_eq,
        b_eq=np.zeros(m.a_eq.shape[0]),
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0:
        raise RuntimeError(f"max-flow LP failed: {res.message}")
    return float(-res.fun)


# The min-cost LP first needs the maximum. Without link limits the single-commodity maximum is exact
# (see `max_flow_value`) and takes about a second where the LP takes minutes on large models: at
# 1,000 x 16 with 4 holders (232,800 variables) the max-flow LP ran past 280 s, the min-cost LP
# after it took 118 s. Smaller models keep the LP's maximum: the two values differ in the last bits,
# and where several min-cost flows tie HiGHS may then return another one with another max path
# (whole-range seed 0 instance 6, 13 x 28 with 3 holders: 5.566 s instead of 5.507 s at the same
# cost), so every figure measured so far stays as it was.
LP_MAX_FLOW_VARIABLES = 100_000


def min_cost_max_flow(instance: Instance) -> dict[str, dict[str, dict[str, float]]]:
    """Exact multi-commodity minimum-cost maximum flow (HiGHS LP); per-holder routes."""
    m = _model(instance)
    large = len(m.edges) > LP_MAX_FLOW_VARIABLES and not instance.link_capacity
    best = max_flow_value(instance) if large else _lp_max_flow(m)
    a_ub = vstack([m.a_ub, coo_matrix(-m.out_of_holders)])
    b_ub = np.append(m.b_ub, -best * (1 - 1e-9) + 1e-12)
    res = linprog(
        m.cost,
        A_ub=a_ub,
        b_ub=b_ub,
        A_eq=m.a_eq,
        b_eq=np.zeros(m.a_eq.shape[0]),
        bounds=(0, None),
        method="highs",
    )
    if res.status != 0:
        raise RuntimeError(f"min-cost LP failed: {res.message}")
    return _routes(instance, m.edges, res.x)


def with_optimal_demand(
    instance: Instance, optimal: dict[str, dict[str, dict[str, float]]] | None = None
) -> Instance:
    """The instance with every holder asking for its share of the exact min-cost maximum flow.

    A diagnostic, not something a holder can know: with several holders the maximum flow can be
    split among them in many ways, and this hands the protocol the optimum's split, so that what is
    left of a gap is the paths (docs/routing.md, "Several holders: the split is not what misses").
    The maximum flow and the minimum cost stay those of `instance` (its optimum meets these demands).
    """
    optimal = min_cost_max_flow(instance) if optimal is None else optimal
    holders = tuple(
        replace(h, demand=min(h.demand, flow_value({h.id: optimal.get(h.id, {})}))) for h in instance.holders
    )
    return replace(instance, holders=holders)


@dataclass
class MinMaxSolution:
    """GWTF's optimum: routes, their max path cost, the proven lower bound, whether proven exact."""

    routes: dict[str, dict[str, dict[str, float]]]
    max_path_cost: float
    lower_bound: float
    exact: bool


def _longest_to(instance: Instance, holder: str) -> dict[str, float]:
    """Longest path from the holder to each node (an upper bound on any earliest-arrival time)."""
    reach = {holder: 0.0}
    lay = layers(instance, holder)
    sink_cost = 0.0
    for left, right in zip(lay, lay[1:]):
        nxt: dict[str, float] = {}
        for b in right:
            nxt[b] = max(reach[a] + instance.edge_cost(a, b) for a in left)
        if right == [holder]:
            sink_cost = nxt[holder]
        else:
            reach.update(nxt)
    reach["__sink__"] = sink_cost
    return reach


def _shortest(instance: Instance, holder: str) -> tuple[dict[str, float], dict[str, float]]:
    """Cheapest path cost from the holder to each node, and from each node back to the holder."""
    lay = layers(instance, holder)
    pre = {holder: 0.0}
    for left, right in zip(lay[:-2], lay[1:-1]):
        for b in right:
            pre[b] = min(pre[a] + instance.edge_cost(a, b) for a in left)
    suf = {p: instance.edge_cost(p, holder) for p in lay[-2]}
    for left, right in zip(reversed(lay[1:-2]), reversed(lay[2:-1])):
        for a in left:
            suf[a] = min(instance.edge_cost(a, b) + suf[b] for b in right)
    suf[holder] = min(instance.edge_cost(holder, b) + suf[b] for b in lay[1])
    return pre, suf


def min_max_path_solution(instance: Instance, time_limit: float = 60.0) -> MinMaxSolution:
    """Maximum flow whose most expensive used path is as cheap as possible (exact MILP, see module).

    The min-cost maximum flow gives an upper bound U on the optimum; an edge whose cheapest path
    through it already costs more than U can carry nothing in an optimal solution, so it is left
    out of the model (exact pruning, and it is what makes the MILP small).
    """
    upper_bound = max_path_cost(instance, min_cost_max_flow(instance)) * (1 + 1e-9) + 1e-12
    short = {h: _shortest(instance, h) for h in instance.holder_ids()}

    def keep(h: str, a: str, b: str) -> bool:
        pre, suf = short[h]
        return pre[a] + instance.edge_cost(a, b) + (0.0 if b == h else suf[b]) <= upper_bound

    m = _model(instance, keep)
    best = _lp_max_flow(m)
    n = len(m.edges)
    holders = instance.holder_ids()
    # potential variables per (holder, node); the holder's sink copy is its own variable
    pot: dict[tuple[str, str], int] = {}
    for h in holders:
        for layer in layers(instance, h)[1:-1]:
            for p in layer:
                pot[(h, p)] = len(pot)
        pot[(h, "__sink__")] = len(pot)
    n_pot = len(pot)
    t_col = 2 * n + n_pot  # columns: x (n), y (n), pi (n_pot), T
    width = t_col + 1
    longest = {h: _longest_to(instance, h) for h in holders}
    rows: list[int] = []
    cols: list[int] = []
    vals: list[float] = []
    lo: list[float] = []
    hi: list[float] = []

    def row(terms: list[tuple[int, float]], low: float, high: float) -> None:
        for col, val in terms:
            rows.append(len(lo))
            cols.append(col)
            vals.append(val)
        lo.append(low)
        hi.append(high)

    caps = {p.id: p.capacity for p in instance.peers}
    dem = {h.id: h.demand for h in instance.holders}
    for j, (h, a, b) in enumerate(m.edges):
        ub = min(caps.get(b, dem.get(b, best)), caps.get(a, dem.get(a, best)), best)
        ub = min(ub, instance.edge_capacity(a, b))
        row([(j, 1.0), (n + j, -ub)], -np.inf, 0.0)  # x <= ub * y
        pb = pot[(h, "__sink__")] if b == h else pot[(h, b)]
        d = instance.edge_cost(a, b)
        pre, suf = short[h]
        hi_a = 0.0 if a == h else max(pre[a], min(longest[h][a], upper_bound - suf[a]))
        big = hi_a + d - (pre[b] if b != h else 0.0)
        terms = [(2 * n + pb, 1.0), (n + j, -big)]  # pi_b - pi_a - big*y >= d - big
        if a != h:
            terms.append((2 * n + pot[(h, a)], -1.0))
        row(terms, d - big, np.inf)
    for h in holders:  # sink potential <= T
        row([(2 * n + pot[(h, "__sink__")], 1.0), (t_col, -1.0)], -np.inf, 0.0)
    r = len(lo)
    structural = coo_matrix((vals, (rows, cols)), shape=(r, width)).tocsr()
    pad = coo_matrix((m.a_eq.shape[0], width - n))
    a_eq = hstack([m.a_eq, pad])
    a_ub = hstack([m.a_ub, coo_matrix((m.a_ub.shape[0], width - n))])
    total = np.zeros(width)
    total[:n] = m.out_of_holders
    a_all = vstack([structural, a_eq, a_ub, coo_matrix(total)]).tocsr()
    lo_all = np.concatenate(
        [lo, np.zeros(a_eq.shape[0]), np.full(a_ub.shape[0], -np.inf), [best * (1 - 1e-9) - 1e-12]]
    )
    hi_all = np.concatenate([hi, np.zeros(a_eq.shape[0]), m.b_ub, [np.inf]])
    integrality = np.zeros(width)
    integrality[n : 2 * n] = 1
    upper = np.full(width, np.inf)
    upper[n : 2 * n] = 1.0
    lower = np.zeros(width)
    for (h, node), k in pot.items():  # WLOG potentials lie in [cheapest prefix, U - cheapest suffix]
        pre, suf = short[h]
        if node != "__sink__":
            lower[2 * n + k] = pre[node]
            upper[2 * n + k] = max(pre[node], min(longest[h][node], upper_bound - suf[node]))
    upper[t_col] = upper_bound
    bounds = Bounds(lower, upper)
    cons = LinearConstraint(a_all, lo_all, hi_all)
    c1 = np.zeros(width)
    c1[t_col] = 1.0
    opts = {"time_limit": time_limit, "mip_rel_gap": 0.0}
    res = milp(c1, constraints=cons, integrality=integrality, bounds=bounds, options=opts)
    if res.x is None:
        raise RuntimeError(f"min-max MILP found no solution: {res.message}")
    t_star = float(res.x[t_col])
    bound = float(getattr(res, "mip_dual_bound", t_star) or t_star)
    exact = res.status == 0
    # second stage: cheapest total cost among flows whose used paths cost at most T*
    c2 = np.zeros(width)
    c2[:n] = m.cost
    upper2 = upper.copy()
    upper2[t_col] = t_star * (1 + 1e-9) + 1e-9
    res2 = milp(c2, constraints=cons, integrality=integrality, bounds=Bounds(lower, upper2), options=opts)
    x = res2.x if res2.x is not None else res.x
    x = np.where(x[:n] > CLEAN, x[:n], 0.0)
    routes = _routes(instance, m.edges, x)
    return MinMaxSolution(routes, max_path_cost(instance, routes), min(bound, t_star), exact)


def min_max_path_flow(instance: Instance, time_limit: float = 60.0) -> dict[str, dict[str, dict[str, float]]]:
    """Per-holder routes of the exact min-max-path maximum flow (the simulator's oracle)."""
    return min_max_path_solution(instance, time_limit).routes
