"""What one churn event costs the protocol, as the swarm grows (`swarm bench flow-events`).

The 20% churn of `swarm bench flow --churn` removes and adds many peers at once; a real swarm (and
the simulator) sees them one at a time, each while the others carry on. This measures single
events: on a converged swarm, one crash or one join at a time, each run until the protocol is quiet
again. Shapes are (stages, peers per stage). Deeper swarms at the same width keep every peer's
neighbourhood and grow the swarm; wider ones grow both. Whether the messages an event costs per peer
follow the neighbourhood or the swarm is the issue's scaling claim, per event rather than summed
over a whole run.

Event costs are heavy-tailed (most events touch a few peers, a few move flow through every stage),
so medians are reported beside means.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
from typing import Any

from swarm.flow import cost
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.churn import add_random_peer, remove_random_peer
from swarm.flow.generate import random_instance
from swarm.flow.reference import max_flow_value


def _degree(bus: MessageBus) -> float:
    """Mean neighbours (senders and next hops) of a stage peer."""
    peer_ids = {p.id for p in bus.instance.peers}
    return statistics.mean(len(a.prev | a.next) for a in bus.agents.values() if a.id in peer_ids)


def _check(stages: int, per_stage: int, events: int, holders: int) -> None:
    if stages < 2 or per_stage < 2:
        raise ValueError(f"every shape needs >= 2 stages and >= 2 peers per stage, got {stages}x{per_stage}")
    if events < 1 or holders < 1:
        raise ValueError("--events and --holders must be >= 1")


def event_cost(
    stages: int,
    per_stage: int,
    events: int,
    seed: int = 0,
    holders: int = 1,
    link_capacity: bool = False,
    activation_bytes: float = 4 * 2**20,
) -> dict[str, Any]:
    """Converge a random geo instance of about `stages` x `per_stage` peers, then apply `events`
    single events (crash, join, crash, ...), each followed by re-convergence; per-event figures."""
    _check(stages, per_stage, events, holders)
    inst = random_instance(stages * per_stage, stages, holders, seed, activation_bytes)
    inst = dataclasses.replace(inst, link_capacity=link_capacity)
    bus = MessageBus(inst, seed=seed)
    setup = bus.run_until_quiescent()
    peers, degree = len(inst.peers), _degree(bus)
    rng = random.Random(seed + 1)
    msgs: list[int] = []
    rounds: list[int] = []
    exact = valid = 0
    for i in range(events):
        if i % 2 == 1 or remove_random_peer(bus, rng) is None:
            add_random_peer(bus, rng, f"joiner{i}")
        stats = bus.run_until_quiescent()
        msgs.append(stats.messages)
        rounds.append(stats.rounds)
        exact += abs(cost.flow_value(bus.routes()) - max_flow_value(bus.instance)) <= 1e-6
        valid += not violations(bus)
    mean, median = statistics.mean(msgs), statistics.median(msgs)
    return {
        "stages": stages,
        "per_stage": per_stage,
        "peers": peers,
        "holders": holders,
        "link_capacity": link_capacity,
        "neighbours_per_peer": round(degree, 1),
        "setup_messages_per_peer": round(setup.messages / peers, 1),
        "events": events,
        "event_messages_mean": round(mean),
        "event_messages_median": round(median),
        "event_messages_max": max(msgs),
        "event_messages_per_peer_mean": round(mean / peers, 2),
        "event_messages_per_peer_median": round(median / peers, 2),
        "event_messages_per_neighbour_median": round(median / peers / degree, 3),
        "event_rounds_median": statistics.median(rounds),
        "exact_after_event": exact,
        "valid_after_event": valid,
    }


def event_costs(
    shapes: list[tuple[int, int]],
    events: int,
    seed: int = 0,
    holders: int = 1,
    link_capacity: bool = False,
) -> dict[str, Any]:
    """`event_cost` for each (stages, peers per stage) shape, and how the median per-event cost per
    peer grew from the first shape to the last against how the swarm and the neighbourhood grew."""
    if not shapes:
        raise ValueError("give at least one shape")
    for s, n in shapes:  # every shape before the first run, not after it
        _check(s, n, events, holders)
    rows = [event_cost(s, n, events, seed, holders, link_capacity) for s, n in shapes]
    first, last = rows[0], rows[-1]
    return {
        "rows": rows,
        "swarm_growth": round(last["peers"] / first["peers"], 2),
        "neighbour_growth": round(last["neighbours_per_peer"] / first["neighbours_per_peer"], 2),
        "event_messages_per_peer_growth": round(
            last["event_messages_per_peer_median"] / max(first["event_messages_per_peer_median"], 1e-9), 2
        ),
    }


def parse_shapes(text: str) -> list[tuple[int, int]]:
    """'4x8,8x8,16x8' -> [(4, 8), (8, 8), (16, 8)] (stages x peers per stage)."""
    shapes = []
    for part in text.split(","):
        bits = part.strip().lower().split("x")
        if len(bits) != 2 or not all(b.strip().isdigit() for b in bits):
            raise ValueError(f"a shape is STAGESxPEERS_PER_STAGE (e.g. 8x16), got {part.strip()!r}")
        shapes.append((int(bits[0]), int(bits[1])))
    return shapes
