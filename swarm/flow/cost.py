"""Costs of a routing: flow value, the most expensive used path (GWTF's objective), mean path cost.

A routing is kept per holder, because every microbatch returns to the holder that sent it:
`routes[holder][node][next_hop] = rate` (microbatches/s), where `node` is the holder itself for the
first hop and `next_hop` is the holder again after the last stage.
"""

from __future__ import annotations

from collections.abc import Mapping

from swarm.flow.instance import Instance

HolderRoutes = Mapping[str, Mapping[str, Mapping[str, float]]]
Routes = dict[str, dict[str, float]]

EPS = 1e-9


def aggregate(routes: HolderRoutes) -> Routes:
    """Sum the per-holder routes into one table: node -> next hop -> rate."""
    table: Routes = {}
    for per_node in routes.values():
        for node, nexts in per_node.items():
            row = table.setdefault(node, {})
            for nxt, rate in nexts.items():
                if rate > EPS:
                    row[nxt] = row.get(nxt, 0.0) + rate
    return table


def flow_value(routes: HolderRoutes) -> float:
    """Microbatches/s leaving all holders."""
    return sum(sum(per_node.get(h, {}).values()) for h, per_node in routes.items())


def layers(instance: Instance, holder: str) -> list[list[str]]:
    """The layered DAG of one holder's microbatches: [holder], stage 0, ..., stage S-1, [holder]."""
    return [[holder], *([p.id for p in instance.peers_of(s)] for s in range(instance.stages)), [holder]]


def max_path_cost(instance: Instance, routes: HolderRoutes) -> float:
    """Cost of the most expensive holder-to-holder path using only edges that carry flow.

    Exact longest path over the layered DAG by dynamic programming, per holder, max over holders.
    """
    worst = 0.0
    for holder, per_node in routes.items():
        reach = {holder: 0.0}  # node -> cost of the most expensive used path from the holder
        for left, right in zip(layers(instance, holder), layers(instance, holder)[1:]):
            nxt_reach: dict[str, float] = {}
            for a in left:
                if a not in reach:
                    continue
                for b, rate in per_node.get(a, {}).items():
                    if rate > EPS and b in right:
                        cost = reach[a] + instance.edge_cost(a, b)
                        if cost > nxt_reach.get(b, -1.0):
                            nxt_reach[b] = cost
            reach = nxt_reach
            if not reach:
                break
        worst = max(worst, reach.get(holder, 0.0))
    return worst


def total_cost(instance: Instance, routes: HolderRoutes) -> float:
    """Sum over edges of rate x cost: the objective of the min-cost flow."""
    return sum(
        rate * instance.edge_cost(a, b)
        for per_node in routes.values()
        for a, nexts in per_node.items()
        for b, rate in nexts.items()
        if rate > EPS
    )


def mean_path_cost(instance: Instance, routes: HolderRoutes) -> float:
    """Flow-weighted mean path cost (every unit of flow crosses exactly one path)."""
    value = flow_value(routes)
    return total_cost(instance, routes) / value if value > EPS else 0.0
