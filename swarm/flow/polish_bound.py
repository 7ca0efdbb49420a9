"""How far the exchange rule could take a converged routing with exact news, one trade at a time.

An analysis, not a part of the protocol: it tells whether a max path above the target is the local
rule's reach or the protocol's information and timing. Starting from the protocol's routes, each step
looks at the edges on the most expensive used path (exact, from the whole routing), tries every
exchange of one of them with another in-flow of the same stage (a -> b, c -> d become a -> d,
c -> b for the smaller of the two rates, as `swarm/flow/exchange.py` does), and makes the one that
lowers the max path most. Every peer keeps its throughput, so the flow value is unchanged. With
`price`, a trade must also obey the protocol's rule: the four edges may get dearer by at most
`price` times what the most expensive path through them saves (`WORST_PATH_PRICE`).
"""

from __future__ import annotations

from swarm.flow.cost import EPS, HolderRoutes, max_path_cost
from swarm.flow.instance import Instance

Table = dict[str, dict[str, float]]


def _through(instance: Instance, h: str, table: Table) -> tuple[dict[str, float], dict[str, float]]:
    """Per node, the most expensive used route from holder h to it, and from it on to h's sink."""
    order = [h] + [p.id for s in range(instance.stages) for p in instance.peers_of(s)]
    arrive = {h: 0.0}
    for a in order:
        if a in arrive:
            for b, rate in table.get(a, {}).items():
                if rate > EPS and b != h:
                    arrive[b] = max(arrive.get(b, 0.0), arrive[a] + instance.edge_cost(a, b))
    onward: dict[str, float] = {}
    for a in reversed(order):
        used = [
            instance.edge_cost(a, b) + (0.0 if b == h else onward.get(b, 0.0))
            for b, rate in table.get(a, {}).items()
            if rate > EPS
        ]
        if used:
            onward[a] = max(used)
    return arrive, onward


def _move(table: Table, changes: list[tuple[str, str, float]]) -> None:
    for a, b, dx in changes:
        row = table.setdefault(a, {})
        row[b] = row.get(b, 0.0) + dx
        if row[b] <= EPS:
            del row[b]


def _link_fits(instance: Instance, routes: dict[str, Table], a: str, b: str) -> bool:
    if not instance.link_capacity:
        return True
    carried = sum(t.get(a, {}).get(b, 0.0) for t in routes.values())
    return carried <= instance.edge_capacity(a, b) + 1e-9


def polish_bound(
    instance: Instance, routes: HolderRoutes, price: float | None = None, max_steps: int = 10_000
) -> tuple[dict[str, Table], int]:
    """The routes after greedy exact-information exchanges on the worst path, and the steps made."""
    cur = {h: {a: dict(row) for a, row in table.items()} for h, table in routes.items()}
    steps = 0
    while steps < max_steps:
        worst = {h: max_path_cost(instance, {h: t}) for h, t in cur.items()}
        h = max(worst, key=lambda k: worst[k])
        rest = max((w for k, w in worst.items() if k != h), default=0.0)
        best = _best_trade(instance, cur, h, worst[h], rest, price)
        if best is None:
            break
        _move(cur[h], best)
        steps += 1
    return cur, steps


def _best_trade(
    instance: Instance, cur: dict[str, Table], h: str, base: float, rest: float, price: float | None
) -> list[tuple[str, str, float]] | None:
    """The exchange on holder h's most expensive paths that lowers the max path most, or None."""
    table, cost = cur[h], instance.edge_cost
    stage = {p.id: p.stage for p in instance.peers}
    arrive, onward = _through(instance, h, table)

    def via(a: str, b: str) -> float:
        return arrive.get(a, 0.0) + cost(a, b) + (0.0 if b == h else onward.get(b, 0.0))

    edges = [(a, b, r) for a, row in table.items() for b, r in row.items() if r > EPS and b != h]
    best: tuple[float, list[tuple[str, str, float]]] | None = None
    for a, b, f1 in edges:
        if via(a, b) < base - 1e-9:
            continue  # not on a most expensive path
        for c, d, f2 in edges:
            if c == a or d == b or stage.get(d) != stage.get(b):
                continue
            if price is not None:
                before = max(via(a, b), via(c, d))
                after = max(via(a, d), via(c, b))
                rise = cost(a, d) + cost(c, b) - cost(a, b) - cost(c, d)
                if before - after <= EPS or rise > price * (before - after):
                    continue
            x = min(f1, f2)
            changes = [(a, b, -x), (c, d, -x), (a, d, x), (c, b, x)]
            _move(table, changes)
            fits = _link_fits(instance, cur, a, d) and _link_fits(instance, cur, c, b)
            value = max(max_path_cost(instance, {h: table}), rest)
            _move(table, [(u, v, -dx) for u, v, dx in changes])
            if fits and value < base - 1e-9 and (best is None or value < best[0]):
                best = (value, changes)
    return None if best is None else best[1]


__all__ = ["polish_bound"]
