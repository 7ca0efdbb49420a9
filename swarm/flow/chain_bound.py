"""How far make-room chains across holders could take a converged routing, with exact figures.

An analysis, not a part of the protocol (like swarm/flow/polish_bound.py and shared_bound.py). The
several-holder misses sit where a holder's worst path runs through a dear peer x while the cheaper
stage mate y it should take is full of other holders' flow (docs/routing.md, "Several holders: the
split is not what misses"). Hand-overs move one holder's flow into spare room only, and at full
stages there is none. A chain makes room first:

    holder g's through-flow c -> y -> w moves to y's stage mate m (spare room): c -> m -> w,
    then holder h's flow a -> x -> z moves into the room on y: a -> y -> z.

Both halves are hand-overs as the protocol makes them (`swarm/flow/handover.py`: the next hops
stay, only the sender re-points), so each chain is local: seven peers, no stage-wide plan. With
m = x it is the cross-holder through-swap. Each greedy step takes, among hand-overs and chains of
the worst holder's worst-path flow, the one that lowers the exact max path over every holder most.
Every peer stays within its capacity and every holder keeps its flow.
"""

from __future__ import annotations

from swarm.flow.cost import EPS, HolderRoutes, max_path_cost, total_cost
from swarm.flow.instance import Instance
from swarm.flow.polish_bound import _through

Table = dict[str, dict[str, float]]
MAX_STEPS = 400
# Exact evaluations per step: candidates are ranked by the dearer of the two new through-costs
# (each from exact arrivals and routes onwards) and only the cheapest are tried. On whole-range
# seed 0 instances 1 and 28 (4 x 11 and 11 x 5, four holders; the protocol's routes with room
# chains) 40 reach what trying all reaches (1.056 and 1.016).
TRIES = 40
ROOMS = 3  # chains tried per move of the worst holder's flow (the cheapest ways to make room)
# A step that leaves the max path where it is may still be taken when it lowers the total cost:
# where a holder has two worst paths of the same cost no single move lowers its max path.
TIES = True
MIN_RATE = 1e-6  # (smaller moves are rounding, and would let the greedy crawl)


def _move(table: Table, a: str, b: str, dx: float) -> None:
    row = table.setdefault(a, {})
    row[b] = row.get(b, 0.0) + dx
    if row[b] <= EPS:
        del row[b]


def _shift(table: Table, a: str, x: str, z: str, y: str, rate: float) -> None:
    """Hand `rate` of a -> x -> z over to x's stage mate y: a -> y -> z."""
    _move(table, a, x, -rate)
    _move(table, x, z, -rate)
    _move(table, a, y, rate)
    _move(table, y, z, rate)


def _through_pairs(table: Table, x: str) -> list[tuple[str, str, float]]:
    """(sender, next hop, rate) of the flow through x, every in-flow paired with every out-flow."""
    ins = [(a, row[x]) for a, row in table.items() if row.get(x, 0.0) > EPS]
    outs = [(z, r) for z, r in table.get(x, {}).items() if r > EPS]
    return [(a, z, min(ra, rz)) for a, ra in ins for z, rz in outs]


Chain = tuple[str, str, str, str, str, float, tuple[str, str, str, str] | None]


class _Search:
    def __init__(self, instance: Instance, tables: dict[str, Table]) -> None:
        self.inst, self.tables = instance, tables
        self.capacity = {p.id: p.capacity for p in instance.peers}
        self.stage = {p.id: p.stage for p in instance.peers}
        self.worst = {h: max_path_cost(instance, {h: t}) for h, t in tables.items()}

    def spare(self, p: str) -> float:
        return self.capacity[p] - sum(sum(t.get(p, {}).values()) for t in self.tables.values())

    def apply(self, chain: Chain, undo: bool = False) -> None:
        a, x, z, y, h, rate, room = chain
        if room is not None:
            g, c, w, m = room
            if undo:
                _shift(self.tables[g], c, m, w, y, rate)
            else:
                _shift(self.tables[g], c, y, w, m, rate)
        if undo:
            _shift(self.tables[h], a, y, z, x, rate)
        else:
            _shift(self.tables[h], a, x, z, y, rate)

    def value(self, chain: Chain) -> tuple[float, float]:
        """The exact max path over every holder with the chain made, and the routing's total cost."""
        self.apply(chain)
        moved = {chain[4]} | ({chain[6][0]} if chain[6] else set())
        out = max(
            max_path_cost(self.inst, {k: t}) if k in moved else self.worst[k] for k, t in self.tables.items()
        )
        total = total_cost(self.inst, self.tables)
        self.apply(chain, undo=True)
        return out, total

    def candidates(self, h: str, base: float, chains: bool) -> list[tuple[float, Chain]]:
        cost, inst = self.inst.edge_cost, self.inst
        figures = {g: _through(inst, g, t) for g, t in self.tables.items()}

        def via(g: str, a: str, x: str, z: str) -> float:
            arrive, onward = figures[g]
            return arrive.get(a, 0.0) + cost(a, x) + cost(x, z) + (0.0 if z == g else onward.get(z, 0.0))

        spare = {p.id: self.spare(p.id) for p in inst.peers}
        found: list[tuple[float, Chain]] = []
        for x in list(self.tables[h]):
            if x not in self.stage:
                continue
            mates = [p.id for p in inst.peers_of(self.stage[x]) if p.id != x]
            for a, z, amount in _through_pairs(self.tables[h], x):
                if via(h, a, x, z) < base - 1e-9:
                    continue  # not on a most expensive path
                for y in mates:
                    new_h = via(h, a, y, z)
                    if new_h >= base - 1e-9:
                        continue
                    if spare[y] > MIN_RATE:
                        found.append((new_h, (a, x, z, y, h, min(amount, spare[y]), None)))
                    rooms: list[tuple[float, Chain]] = []
                    for g, tg in self.tables.items() if chains else ():
                        for c, w, g_amount in _through_pairs(tg, y):
                            for m in (p.id for p in inst.peers_of(self.stage[x]) if p.id != y):
                                room = spare[m] + (min(amount, g_amount) if m == x else 0.0)
                                rate = min(amount, g_amount, room)
                                new_g = via(g, c, m, w)
                                if rate > MIN_RATE and new_g < base - 1e-9:
                                    rooms.append((max(new_h, new_g), (a, x, z, y, h, rate, (g, c, w, m))))
                    rooms.sort(key=lambda item: (item[0], -item[1][5]))
                    found += rooms[:ROOMS]
        found.sort(key=lambda item: (item[0], -item[1][5]))  # (cheapest, then the most flow moved)
        return found


def chain_bound(
    instance: Instance, routes: HolderRoutes, max_steps: int = MAX_STEPS, chains: bool = True
) -> tuple[dict[str, Table], dict[str, int]]:
    """The routes after greedy hand-overs and (with `chains`) make-room chains, and the steps taken
    of each kind. Without link limits only (a chain does not look at the links' room)."""
    if instance.link_capacity:
        raise ValueError("chain_bound takes instances without link limits")
    tables = {
        h: {a: {b: r for b, r in row.items() if r > EPS} for a, row in table.items()}
        for h, table in routes.items()
    }
    search = _Search(instance, tables)
    steps = {"hand_overs": 0, "chains": 0}
    while sum(steps.values()) < max_steps:
        base = max(search.worst.values(), default=0.0)
        h = max(search.worst, key=lambda k: search.worst[k])
        now = total_cost(instance, tables)
        best: tuple[tuple[float, float], Chain] | None = None
        for _, chain in search.candidates(h, base, chains)[:TRIES]:
            value = search.value(chain)
            better = value[0] < base - 1e-9 or (TIES and value[0] <= base + 1e-12 and value[1] < now - 1e-9)
            if better and (best is None or value < best[0]):
                best = (value, chain)
        if best is None:
            break
        chain = best[1]
        search.apply(chain)
        for k in {chain[4]} | ({chain[6][0]} if chain[6] else set()):
            search.worst[k] = max_path_cost(instance, {k: tables[k]})
        steps["chains" if chain[6] else "hand_overs"] += 1
    return tables, steps


__all__ = ["chain_bound"]
