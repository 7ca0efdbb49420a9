"""The figures `swarm bench flow` prints: protocol result against the exact references."""

from __future__ import annotations

import dataclasses
import random
import statistics
from typing import Any

from swarm.flow import cost
from swarm.flow.bottleneck import bottleneck_stage
from swarm.flow.bus import MessageBus, ProtocolStats, total_excess
from swarm.flow.chain_bound import chain_bound
from swarm.flow.check import violations
from swarm.flow.generate import ACTIVATION_BYTES, random_instance
from swarm.flow.instance import Instance
from swarm.flow.messages import (
    Exchange,
    ExchangeDone,
    HandOff,
    HandOffDone,
    HandOver,
    Moved,
    Offer,
    Reply,
    Resync,
    Resynced,
    Traded,
)
from swarm.flow.peer import PeerAgent
from swarm.flow.polish_bound import polish_bound
from swarm.flow.reference import max_flow_value, min_cost_max_flow, with_optimal_demand
from swarm.flow.shared_bound import shared_plan_bound
from swarm.flow.trade_rules import WORST_PATH_PRICE


def figures(bus: MessageBus, stats: ProtocolStats, reference: Instance | None = None) -> dict[str, Any]:
    """Flow, path costs and message counts of the bus's state, beside the exact optimum (of
    `reference` where the bus routes a variant of it, see `reference.with_optimal_demand`)."""
    inst = bus.instance
    ref = inst if reference is None else reference
    routes = bus.routes()
    optimal = min_cost_max_flow(ref)
    nodes = len(bus.agents)
    per_node = [stats.sent_by.get(n, 0) for n in bus.agents]
    degree = [len(a.prev | a.next) for a in bus.agents.values()]
    return {
        "peers": len(inst.peers),
        "stages": inst.stages,
        "holders": len(inst.holders),
        "flow": round(cost.flow_value(routes), 6),
        "optimal_flow": round(max_flow_value(ref), 6),
        "max_path_cost": round(cost.max_path_cost(inst, routes), 6),
        "optimal_max_path_cost": round(cost.max_path_cost(inst, optimal), 6),
        "mean_path_cost": round(cost.mean_path_cost(inst, routes), 6),
        "optimal_mean_path_cost": round(cost.mean_path_cost(inst, optimal), 6),
        "rounds": stats.rounds,
        "messages": stats.messages,
        "messages_per_peer": round(stats.messages / max(nodes, 1), 2),
        "max_messages_per_peer": max(per_node, default=0),
        "messages_per_neighbour": round(stats.messages / max(sum(degree), 1), 2),
        "virtual_seconds": round(stats.virtual_time, 4),
        "quiescent": stats.quiescent,
        "violations": len(violations(bus)),
        "bottleneck_stage": bottleneck_stage(inst, routes),
        "per_holder": per_holder(inst, routes, optimal),
        "routes": cost.aggregate(routes),
    }


def per_holder(
    inst: Instance, routes: cost.HolderRoutes, optimal: cost.HolderRoutes
) -> dict[str, dict[str, float]]:
    """Each holder's demand, flow, max and mean path, beside its share of the exact min-cost flow.

    With several holders the maximum flow can be split among them in many ways, and the min-cost
    flow (GWTF's objective too) gives contested capacity to the holders whose paths are cheap: a far
    holder may get little. This shows which split the protocol settled on, and which holders' paths
    are dear for their share (docs/routing.md: "Several holders: the split is not what misses")."""
    out = {}
    for h in inst.holders:
        mine, best = {h.id: routes.get(h.id, {})}, {h.id: optimal.get(h.id, {})}
        out[h.id] = {
            "demand": round(h.demand, 6),
            "flow": round(cost.flow_value(mine), 6),
            "optimal_flow": round(cost.flow_value(best), 6),
            "max_path_cost": round(cost.max_path_cost(inst, mine), 6),
            "optimal_max_path_cost": round(cost.max_path_cost(inst, best), 6),
            "mean_path_cost": round(cost.mean_path_cost(inst, mine), 6),
            "optimal_mean_path_cost": round(cost.mean_path_cost(inst, best), 6),
        }
    return out


def exchanging(bus: MessageBus) -> set[str]:
    """Peers in the middle of an exchange: a stage mate asked, a `Moved` or the answer still on its
    way. The two ends of an edge such an exchange moves disagree until its last message lands,
    though no peer's throughput changes meanwhile."""
    busy: set[str] = set()
    for agent in bus.agents.values():
        if isinstance(agent, PeerAgent):
            busy |= agent.exchange_parties() | agent.hand_off_parties()
    for envelope in bus.in_flight():
        body = envelope.body
        answer = isinstance(body, Reply) and body.exchanged > 0
        ask = isinstance(body, Offer) and body.swap_from is not None
        moving = (Exchange, ExchangeDone, Moved, HandOver, HandOff, HandOffDone, Resync, Resynced, Traded)
        if answer or ask or isinstance(body, moving):
            busy |= {envelope.src, envelope.dst}
        if isinstance(body, ExchangeDone) and body.onward is not None:
            busy.add(body.onward)  # a hand-over: d starts sending to b's next hop on arrival
        if isinstance(body, HandOff):
            busy.add(body.sender)
        if answer:  # the initiator's old hop (its offer's `old`) let go already
            asked = bus.agents.get(envelope.dst)
            entry = asked.offers.get(body.offer_id) if asked is not None else None
            if entry is not None and entry[3] is not None:
                busy.add(entry[3])
    return busy


class MaxFlowWatch:
    """Rounds after which the maximum flow is routed for good (`MessageBus` watch): the holders
    send the maximum flow, no peer has excess, capacities and conservation hold, and both ends of
    every edge agree except edges an exchange is moving at that moment (it changes no throughput).

    After churn the maximum flow is usually back well before the protocol is quiet: exchanges and
    improvement moves go on polishing routes without changing any throughput.
    """

    def __init__(self, bus: MessageBus, value: float, tol: float = 1e-6) -> None:
        self.bus, self.value, self.tol = bus, value, tol
        self.start = bus.depth
        self.rounds: int | None = None

    def __call__(self) -> None:
        bus = self.bus
        busy = exchanging(bus)
        ok = (
            abs(cost.flow_value(bus.routes()) - self.value) <= self.tol
            and total_excess(bus) <= self.tol
            and not violations(bus, in_transit=lambda a, b: a in busy and b in busy)
        )
        if not ok:
            self.rounds = None
        elif self.rounds is None:
            self.rounds = bus.depth - self.start


MAX_PATH_WITHIN = 1.05  # issue 3's figures: max path / optimum, mean path / optimum
MEAN_PATH_WITHIN = 1.10


def _rerun(
    stages: int,
    per_stage: int,
    holders: int,
    seed: int,
    bus_seed: int,
    link_capacity: bool,
    optimal_demand: bool,
) -> str:
    """The `swarm bench flow` command that runs one sweep run again, on its own."""
    command = f"swarm bench flow --random --peers {stages * per_stage} --stages {stages} --holders {holders}"
    command += f" --seed {seed} --bus-seed {bus_seed} --json"
    command += " --link-capacity" if link_capacity else ""
    return command + (" --optimal-demand" if optimal_demand else "")


def sweep(
    count: int,
    seed: int = 0,
    stages: tuple[int, int] = (4, 12),
    per_stage: tuple[int, int] = (3, 20),
    holders: tuple[int, int] = (1, 1),
    link_capacity: bool = False,
    activation_bytes: float = ACTIVATION_BYTES,
    timings: int = 1,
    polish: bool = False,
    optimal_demand: bool = False,
    shared: bool = False,
    chains: bool = False,
) -> dict:
    """The protocol against the exact optimum on `count` seeded random geo instances: how often it
    routes the exact maximum flow, the distribution of max and mean path cost over the optimum's,
    rounds and messages per peer.

    One instance can mislead (the protocol's path depends on message timing); a sweep shows where a
    change helps and where it hurts. Even a sweep moves by several instances when only the timing
    changes, so `timings` > 1 runs every instance under that many message timings (bus seeds s,
    s + 1000, ...), and the figures count runs (`runs` = count x timings).

    `polish` adds `polish_bound`: the max path / optimum after greedy exact-information exchanges
    from each run's routes (swarm/flow/polish_bound.py), with the protocol's price and without it.
    `misses` names every run short of a target (the exact maximum flow, max path within 5%, mean
    path within 10%), with the `swarm bench flow` command that runs it again; `by_holders` counts
    the runs that reach each target per number of holders (docs/routing.md, "Several holders
    without link limits"). `optimal_demand` hands every holder its share of the min-cost flow as its
    demand (`reference.with_optimal_demand`, a diagnostic); the figures stay against the optimum.
    `shared` adds `shared_plan_bound`: the max and mean path / optimum after rounds of stage plans
    over every holder's flow from each run's routes, as planned and as the protocol's kinds of moves
    carry them out (swarm/flow/shared_bound.py; without link limits only). `chains` adds
    `chain_bound`: the max and mean path / optimum after greedy hand-overs and make-room chains
    across holders from each run's routes (swarm/flow/chain_bound.py; without link limits only).
    """
    if count < 1:
        raise ValueError(f"a sweep needs at least one instance, got {count}")
    if timings < 1:
        raise ValueError(f"a sweep needs at least one message timing per instance, got {timings}")
    rng = random.Random(seed)
    worst, mean, rounds, per_peer, flows = [], [], [], [], []
    misses: list[dict] = []
    by_holders: dict[int, list[int]] = {}  # holders -> [runs, exact, max path within 5%, mean within 10%]
    priced: list[float] = []
    unpriced: list[float] = []
    planned: dict[str, list[float]] = {"plans": [], "moves": [], "plans_mean": [], "moves_mean": []}
    chained: dict[str, list[float]] = {"max": [], "mean": [], "max_hand_overs": [], "chains": []}
    for i in range(count):
        s, pps, hs = rng.randint(*stages), rng.randint(*per_stage), rng.randint(*holders)
        inst_seed = seed * 100_003 + i
        inst = random_instance(s * pps, s, hs, inst_seed, activation_bytes)
        inst = dataclasses.replace(inst, link_capacity=link_capacity)
        optimal, exact = min_cost_max_flow(inst), max(max_flow_value(inst), 1e-12)
        opt_max, opt_mean = cost.max_path_cost(inst, optimal), cost.mean_path_cost(inst, optimal)
        routed = with_optimal_demand(inst, optimal) if optimal_demand else inst
        for t in range(timings):
            bus_seed = inst_seed + 1000 * t
            bus = MessageBus(routed, seed=bus_seed)
            stats = bus.run_until_quiescent()
            routes = bus.routes()
            flows.append(cost.flow_value(routes) / exact)
            worst.append(cost.max_path_cost(inst, routes) / opt_max)
            mean.append(cost.mean_path_cost(inst, routes) / opt_mean)
            reached = (
                flows[-1] >= 1 - 1e-6,
                worst[-1] <= MAX_PATH_WITHIN + 1e-9,
                mean[-1] <= MEAN_PATH_WITHIN + 1e-9,
            )
            tally = by_holders.setdefault(hs, [0, 0, 0, 0])
            for k, ok in enumerate((True, *reached)):
                tally[k] += ok
            if not all(reached):
                miss = {
                    "instance": i,
                    "timing": t,
                    "stages": s,
                    "peers": s * pps,
                    "holders": hs,
                    "flow_over_optimal": round(flows[-1], 4),
                    "max_path_over_optimal": round(worst[-1], 3),
                    "mean_path_over_optimal": round(mean[-1], 3),
                }
                if activation_bytes == ACTIVATION_BYTES:  # (`bench flow` takes no other size)
                    miss["command"] = _rerun(s, pps, hs, inst_seed, bus_seed, link_capacity, optimal_demand)
                misses.append(miss)
            rounds.append(stats.rounds)
            per_peer.append(stats.messages / len(bus.agents))
            if polish:
                for price, into in ((WORST_PATH_PRICE, priced), (None, unpriced)):
                    polished, _ = polish_bound(inst, routes, price)
                    into.append(cost.max_path_cost(inst, polished) / opt_max)
            if shared:
                for moves, name in ((False, "plans"), (True, "moves")):
                    replanned, _ = shared_plan_bound(inst, routes, moves)
                    planned[name].append(cost.max_path_cost(inst, replanned) / opt_max)
                    planned[f"{name}_mean"].append(cost.mean_path_cost(inst, replanned) / opt_mean)
            if chains:
                handed, _ = chain_bound(inst, routes, chains=False)
                chained["max_hand_overs"].append(cost.max_path_cost(inst, handed) / opt_max)
                moved, steps = chain_bound(inst, routes)
                chained["max"].append(cost.max_path_cost(inst, moved) / opt_max)
                chained["mean"].append(cost.mean_path_cost(inst, moved) / opt_mean)
                chained["chains"].append(steps["chains"])

    def spread(values: list[float], within: float) -> dict:
        return {
            "median": round(statistics.median(values), 3),
            "mean": round(statistics.mean(values), 3),
            "worst": round(max(values), 3),
            f"within_{round((within - 1) * 100)}pct": sum(v <= within + 1e-9 for v in values),
        }

    out = {
        "instances": count,
        "timings": timings,
        "runs": count * timings,
        "exact_max_flow": sum(f >= 1 - 1e-6 for f in flows),
        "flow_over_optimal_worst": round(min(flows), 4),
        "max_path_over_optimal": spread(worst, MAX_PATH_WITHIN),
        "mean_path_over_optimal": spread(mean, MEAN_PATH_WITHIN),
        "rounds_mean": round(statistics.mean(rounds), 1),
        "messages_per_peer_mean": round(statistics.mean(per_peer), 1),
        "misses": misses,
        "by_holders": {
            str(h): {"runs": n, "exact_max_flow": e, "max_path_within_5pct": m, "mean_path_within_10pct": a}
            for h, (n, e, m, a) in sorted(by_holders.items())
        },
    }
    if shared:
        out["shared_plan_bound"] = {
            "max_path_over_optimal_plans": spread(planned["plans"], MAX_PATH_WITHIN),
            "max_path_over_optimal_moves": spread(planned["moves"], MAX_PATH_WITHIN),
            "mean_path_over_optimal_plans": spread(planned["plans_mean"], MEAN_PATH_WITHIN),
            "mean_path_over_optimal_moves": spread(planned["moves_mean"], MEAN_PATH_WITHIN),
        }
    if chains:
        out["chain_bound"] = {
            "max_path_over_optimal_hand_overs": spread(chained["max_hand_overs"], MAX_PATH_WITHIN),
            "max_path_over_optimal": spread(chained["max"], MAX_PATH_WITHIN),
            "mean_path_over_optimal": spread(chained["mean"], MEAN_PATH_WITHIN),
            "chains_per_run_mean": round(statistics.mean(chained["chains"]), 1),
        }
    if polish:
        out["polish_bound"] = {
            "max_path_over_optimal_priced": spread(priced, MAX_PATH_WITHIN),
            "max_path_over_optimal_unpriced": spread(unpriced, MAX_PATH_WITHIN),
        }
    return out
