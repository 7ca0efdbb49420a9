"""Which stage limits the flow: where joining peers should go."""

from __future__ import annotations

from swarm.flow.cost import HolderRoutes, aggregate
from swarm.flow.instance import Instance


def stage_utilisation(instance: Instance, routes: HolderRoutes) -> list[float]:
    """Flow through each stage divided by the stage's total capacity."""
    table = aggregate(routes)
    util = []
    for s in range(instance.stages):
        peers = instance.peers_of(s)
        cap = sum(p.capacity for p in peers)
        through = sum(sum(table.get(p.id, {}).values()) for p in peers)
        util.append(through / cap if cap > 0 else float("inf"))
    return util


def bottleneck_stage(instance: Instance, routes: HolderRoutes) -> int:
    """The stage of the minimum cut: the most utilised stage (lowest index on ties).

    Every stage is completely connected to the next, so a minimum cut of the layered graph is one
    whole stage (or the holders' demand). A stage that the maximum flow saturates has utilisation
    1 and is that cut; when demand limits the flow, the most utilised stage is the first to become
    the bottleneck, which is still where a joining peer helps most.
    """
    util = stage_utilisation(instance, routes)
    return max(range(instance.stages), key=lambda s: (round(util[s], 9), -s))
