"""Stage plans over every holder's flow at once: which peers of a stage carry how much of each
holder's flow, with each peer's capacity shared by the holders.

Pure decision code. A stage plan of one holder (`stage_assignment.plan_stage`) keeps the other
holders' flows where they are, and so do all the protocol's other moves, which move one holder's
flow at a time. With three or four holders the max path missed 5% of the min-cost flow's on 13 of
60 whole-range runs: offline, from the protocol's converged routes, handing every holder the
min-cost flow's split did not help, and greedy cross-holder swaps took one of five misses within
5%. Re-solving one stage at a time over all holders' flows (this module's problem, solved exactly
offline) took all five within 5% (seed 0 instances 1 / 10 / 26 / 28: 1.147 / 1.061 / 1.051 /
1.196 -> 0.946 / 1.016 / 1.003 / 1.013; seed 2 instance 21 1.175 -> 0.900; docs/routing.md: "Stage
plans over several holders").

Each stage peer b becomes one mid (b, h) per holder h; senders and receivers likewise, since a
holder's flow only continues as that holder's flow. The edges of holder h join (a, h) to (b, h)
to (c, h) at the edge's own cost, arrivals and routes onwards are each holder's own, and b's room
(its capacity) is shared by its mids. A stage of over `stage_assignment.MAX_BINARIES` pairs plans
over its pairs that carry flow and its cheapest ones (`stage_assignment._pruned`), so not exactly.
How the plan is carried out: `stage_moves.moves_for` with
`space` (hand-overs into spare room, same-holder exchanges, and pairs of hand-overs across holders).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from swarm.flow.stage_assignment import EPS, plan_stage

Edge = tuple[str, str]
Flows = dict[Edge, float]
Mid = tuple[str, str]  # (node, holder)


@dataclass(frozen=True)
class HolderStage:
    """One holder's flows through the stage and its path figures around it."""

    flows_in: Mapping[Edge, float]  # a -> b
    flows_out: Mapping[Edge, float]  # b -> c
    arrival: Mapping[str, float]  # sender a's worst route so far (from this holder)
    onward: Mapping[str, float]  # receiver c's worst route on (back to this holder)


def keyed(figures: Mapping[str, HolderStage], cost_in, cost_out, room: Mapping[str, float]):  # noqa: ANN001, ANN201
    """The several holders' stage as one `plan_stage` problem over mids (node, holder)."""
    flows_in: dict[tuple[Mid, Mid], float] = {}
    flows_out: dict[tuple[Mid, Mid], float] = {}
    arrival: dict[Mid, float] = {}
    onward: dict[Mid, float] = {}
    inc: dict[tuple[Mid, Mid], float] = {}
    outc: dict[tuple[Mid, Mid], float] = {}
    rooms: dict[Mid, float] = {}
    for h, f in sorted(figures.items()):
        if not any(r > EPS for r in f.flows_in.values()):
            continue
        for (a, b), r in f.flows_in.items():
            flows_in[(a, h), (b, h)] = r
        for (b, c), r in f.flows_out.items():
            flows_out[(b, h), (c, h)] = r
        arrival.update({(a, h): v for a, v in f.arrival.items()})
        onward.update({(c, h): v for c, v in f.onward.items()})
        inc.update({((a, h), (b, h)): v for (a, b), v in cost_in.items() if a in f.arrival and b in room})
        outc.update({((b, h), (c, h)): v for (b, c), v in cost_out.items() if c in f.onward and b in room})
        rooms.update({(b, h): room[b] for b in room})
    shared = [(tuple(m for m in rooms if m[0] == b), space) for b, space in sorted(room.items())]
    return flows_in, flows_out, arrival, inc, outc, onward, rooms, shared


def plan_shared_stage(
    figures: Mapping[str, HolderStage],
    cost_in: Mapping[Edge, float],
    cost_out: Mapping[Edge, float],
    room: Mapping[str, float],
    gain: float,
) -> tuple[float, dict[str, Flows], dict[str, Flows]] | None:
    """The exact stage plan over every holder's flow, as (its most expensive path, per holder the
    flows in, per holder the flows out), or None when it does not make the most expensive path
    through the stage cheaper by more than `gain`. `cost_in` / `cost_out` are the edges' own costs
    (any holder's flow may use them), `room` each stage peer's capacity for all holders together."""
    flows_in, flows_out, arrival, inc, outc, onward, rooms, shared = keyed(figures, cost_in, cost_out, room)
    if not flows_in or not arrival:
        return None
    found = plan_stage(flows_in, flows_out, arrival, inc, outc, onward, rooms, gain, shared=shared)
    if found is None:
        return None
    top, new_in, new_out = found
    per_in: dict[str, Flows] = {h: {} for h in figures}
    per_out: dict[str, Flows] = {h: {} for h in figures}
    for ((a, h), (b, _)), r in new_in.items():
        per_in[h][a, b] = r
    for ((b, h), (c, _)), r in new_out.items():
        per_out[h][b, c] = r
    return top, per_in, per_out


__all__ = ["HolderStage", "keyed", "plan_shared_stage"]
