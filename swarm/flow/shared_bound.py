"""How far stage plans over every holder's flow could take a converged routing, with exact figures.

An analysis, not a part of the protocol (like swarm/flow/polish_bound.py): it tells whether the
several-holder misses are within reach of re-planning one stage at a time over all holders' flows
(swarm/flow/shared_stage.py), and whether the protocol's kinds of moves could carry such plans out.
Starting from the protocol's routes, each round plans every stage in turn, the first and last too
(there the holders are the senders or the receivers), with exact arrivals and routes onwards from
the whole routing; a plan is taken when it makes the stage's dearest path cheaper by more than
GAIN. With `moves`, what is taken is where `stage_moves.moves_for` gets from the flows now towards
the plan (hand-overs into spare room, exchanges of one holder, pairs of hand-overs across holders,
no path through the stage dearer on the way), as the protocol would have to; without, the plan
itself. Every peer stays within its capacity and every holder keeps its flow.
"""

from __future__ import annotations

from swarm.flow.cost import EPS, HolderRoutes
from swarm.flow.instance import Instance
from swarm.flow.polish_bound import _through
from swarm.flow.shared_stage import HolderStage, keyed, plan_shared_stage
from swarm.flow.stage_assignment import stage_bottleneck
from swarm.flow.stage_moves import moves_for

ROUNDS = 6  # passes over the stages (each stops early once no stage pays)
# What a plan must save, in seconds. The protocol's GAIN_S (0.02) stops the descent early: on seed 0
# instance 10 of the whole-range sweep (12 x 6, 3 holders) the first plan saves 0.013 s and opens
# the way for plans that take it from 1.061 to 1.016 times the min-cost flow's max path.
GAIN = 0.001
MAX_MOVES = 256  # (the protocol's 64 stop seed 0 instance 1's plans half-way: 1.115 against 0.947)
Table = dict[str, dict[str, float]]


def _stage(instance: Instance, tables: dict[str, Table], s: int):  # noqa: ANN202
    """Every holder's flows through stage s and its exact figures around it, the edges' costs and
    the stage peers' capacities."""
    mids = [p.id for p in instance.peers_of(s)]
    figures: dict[str, HolderStage] = {}
    for h, table in tables.items():
        arrive, onward = _through(instance, h, table)
        onward = {**onward, h: 0.0}  # (h as the receiver is its sink)
        flows_in = {(a, b): r for a, row in table.items() for b, r in row.items() if b in mids and r > EPS}
        flows_out = {(b, c): r for b in mids for c, r in table.get(b, {}).items() if r > EPS}
        figures[h] = HolderStage(
            flows_in,
            flows_out,
            {a: arrive[a] for a, _ in flows_in},
            {c: onward[c] for _, c in flows_out},
        )
    senders = sorted({a for f in figures.values() for a in f.arrival})  # (sorted: the same plan in
    takers = sorted({c for f in figures.values() for c in f.onward})  # every process)
    cost_in = {(a, b): instance.edge_cost(a, b) for a in senders for b in mids}
    cost_out = {(b, c): instance.edge_cost(b, c) for b in mids for c in takers}
    room = {p.id: p.capacity for p in instance.peers_of(s)}
    return figures, cost_in, cost_out, room


def _replan(instance: Instance, tables: dict[str, Table], s: int, moves: bool) -> bool:
    """Plan stage s and put what is taken into `tables`; True if something was."""
    figures, cost_in, cost_out, room = _stage(instance, tables, s)
    found = plan_shared_stage(figures, cost_in, cost_out, room, GAIN)
    if found is None:
        return False
    _, per_in, per_out = found
    if moves:
        flows_in, flows_out, arrival, inc, outc, onward, _, _ = keyed(figures, cost_in, cost_out, room)
        dear = {(a, b): arrival[a] + c for (a, b), c in inc.items()}
        dear.update({(b, c): k + onward[c] for (b, c), k in outc.items()})
        now = stage_bottleneck(flows_in, flows_out, dear, dear)
        plan_in = {((a, h), (b, h)): r for h, f in per_in.items() for (a, b), r in f.items()}
        plan_out = {((b, h), (c, h)): r for h, f in per_out.items() for (b, c), r in f.items()}
        waves, end_in, end_out = moves_for(flows_in, flows_out, plan_in, plan_out, dear, now, MAX_MOVES, room)
        if not waves or stage_bottleneck(end_in, end_out, dear, dear) >= now - GAIN:
            return False
        per_in = {h: {} for h in figures}
        per_out = {h: {} for h in figures}
        for ((a, h), (b, _)), r in end_in.items():
            per_in[h][a, b] = r
        for ((b, h), (c, _)), r in end_out.items():
            per_out[h][b, c] = r
    for h, f in figures.items():
        table = tables[h]
        for (a, b), r in (*f.flows_in.items(), *f.flows_out.items()):
            table[a][b] -= r
            if table[a][b] <= EPS:
                del table[a][b]
        for (a, b), r in (*per_in[h].items(), *per_out[h].items()):
            row = table.setdefault(a, {})
            row[b] = row.get(b, 0.0) + r
    return True


def shared_plan_bound(
    instance: Instance, routes: HolderRoutes, moves: bool = True, rounds: int = ROUNDS
) -> tuple[dict[str, Table], int]:
    """The routes after rounds of shared stage plans over every stage, and how many were taken."""
    tables = {
        h: {a: {b: r for b, r in row.items() if r > EPS} for a, row in table.items()}
        for h, table in routes.items()
    }
    taken = 0
    for _ in range(rounds):
        before = taken
        for s in range(instance.stages):
            taken += _replan(instance, tables, s, moves)
        if taken == before:
            break
    return tables, taken


__all__ = ["shared_plan_bound"]
