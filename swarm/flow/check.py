"""Invariants of a protocol state, checked at quiescent points (tests, benchmarks, the simulator)."""

from __future__ import annotations

from collections.abc import Callable

from swarm.flow.cost import EPS
from swarm.flow.holder_agent import HolderAgent
from swarm.flow.peer import PeerAgent

TOL = 1e-6


def violations(bus, in_transit: Callable[[str, str], bool] | None = None) -> list[str]:
    """Everything wrong with the bus's current flow: [] when capacities and conservation hold.

    Checks both ends of every edge agree, every peer (and, when limited, every link) carries at most
    its capacity, every peer's in-flow equals its out-flow per holder, and no holder sends more than
    its demand.
    `in_transit(a, b)` may excuse a disagreement on edge a->b while a message settling it is on
    its way (watches between quiescent points).
    """
    problems: list[str] = []
    agents = bus.agents
    instance = bus.instance
    for node, agent in agents.items():
        if instance.link_capacity:
            for v in {v for nexts in agent.out.values() for v in nexts}:
                rate = sum(nexts.get(v, 0.0) for nexts in agent.out.values())
                cap = instance.edge_capacity(node, v)
                if v in agents and rate > cap + TOL:
                    problems.append(f"{node}->{v} carries {rate:.6f} > link capacity {cap:.6f}")
        for h, nexts in agent.out.items():
            for v, rate in nexts.items():
                if rate < -TOL:
                    problems.append(f"{node}->{v} [{h}] negative rate {rate}")
                target = agents.get(v)
                if target is None:
                    continue
                got = (
                    target.sink_in.get(node, 0.0)
                    if isinstance(target, HolderAgent)
                    else target.inflow[h].get(node, 0.0)
                )
                if abs(got - rate) > TOL and not (in_transit and in_transit(node, v)):
                    problems.append(f"{node}->{v} [{h}] sender says {rate:.6f}, receiver {got:.6f}")
        if isinstance(agent, PeerAgent):
            if agent.carried() > agent.capacity + TOL:
                problems.append(f"{node} carries {agent.carried():.6f} > capacity {agent.capacity}")
            for h in agent.holders:
                ex = agent.supply(h) - sum(agent.out[h].values())
                if abs(ex) > TOL:
                    problems.append(f"{node} [{h}] in-out = {ex:.6f}")
        else:
            if agent.served() > agent.demand + TOL:
                problems.append(f"{node} sends {agent.served():.6f} > demand {agent.demand}")
            back = sum(agent.sink_in.values())
            if abs(back - agent.served()) > TOL and agent.served() > EPS:
                problems.append(f"{node} sends {agent.served():.6f} but gets back {back:.6f}")
    return problems
