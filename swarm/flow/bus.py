"""An in-memory message bus that runs one routing state machine per node in virtual time.

Seeded random delays (so messages overtake each other), optional loss (the protocol retransmits),
and churn events (leave, join, capacity and demand changes). Used by tests, `swarm bench flow` and
the simulator; the live swarm runs the same state machines over the DHT and P2P instead.
"""

from __future__ import annotations

import heapq
import itertools
import random
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from swarm.flow.cost import EPS
from swarm.flow.holder_agent import HolderAgent
from swarm.flow.instance import HolderSpec, Instance, InstanceError, Link, PeerSpec
from swarm.flow.messages import Ack, Envelope, NeighbourGone, NeighbourJoined
from swarm.flow.peer import FIRST_MOVES, PeerAgent

Delay = tuple[float, float] | Callable[[str, str, random.Random], float]


@dataclass
class ProtocolStats:
    """Counters of one run (or, on `bus.stats`, of the bus's whole life).

    rounds: asynchronous rounds, i.e. the longest causal chain of protocol messages (each message
    is one round deeper than the deepest message its sender had seen).
    """

    rounds: int = 0
    messages: int = 0
    dropped: int = 0
    virtual_time: float = 0.0
    quiescent: bool = True
    sent_by: dict[str, int] = field(default_factory=dict)


class MessageBus:
    """Runs the protocol for an `Instance`; `instance` follows churn and change events."""

    def __init__(
        self,
        instance: Instance,
        seed: int = 0,
        delay: Delay = (0.01, 0.05),
        loss: float = 0.0,
        improve: bool = True,
    ) -> None:
        if not 0.0 <= loss < 1.0:
            raise InstanceError(f"loss must be in [0, 1), got {loss}")
        if not callable(delay) and not (0.0 <= delay[0] <= delay[1]):
            raise InstanceError(f"delay must be (min, max) with 0 <= min <= max, got {delay}")
        self.instance = instance
        self.rng = random.Random(seed)
        self.seed = seed
        self.delay = delay
        self.loss = loss
        self.improve = improve
        max_delay = self._max_delay(instance) if callable(delay) else max(delay[1], 1e-6)
        self.retry_s = 4.0 * max_delay
        self.now = 0.0
        self.stats = ProtocolStats()
        self.static_costs = True  # costs change only by set_compute / add_peer, which tell the agents
        self._heap: list[tuple[float, int, int, object]] = []
        self._tick = itertools.count()
        self.agents: dict[str, PeerAgent | HolderAgent] = {}
        self._max_depth = 0
        holders = instance.holder_ids()
        for h in instance.holders:
            self.agents[h.id] = HolderAgent(
                h.id, self, instance.stages, holders, h.demand, seed=self._child_seed(h.id), improve=improve
            )
        for p in instance.peers:
            self.agents[p.id] = self._make_peer(p)
        for agent in self.agents.values():
            self._wire(agent)
        for agent in list(self.agents.values()):
            agent.settle()

    # ------------------------------------------------------------ Env API
    def transmit(self, envelope: Envelope) -> None:
        self.stats.messages += 1
        self.stats.sent_by[envelope.src] = self.stats.sent_by.get(envelope.src, 0) + 1
        if envelope.dst not in self.agents or (self.loss and self.rng.random() < self.loss):
            self.stats.dropped += 1
            return
        if callable(self.delay):
            d = float(self.delay(envelope.src, envelope.dst, self.rng))
        else:
            d = self.rng.uniform(*self.delay)
        heapq.heappush(self._heap, (self.now + d, next(self._tick), 0, envelope))

    def set_timer(self, node: str, delay: float, token: str) -> None:
        heapq.heappush(self._heap, (self.now + delay, next(self._tick), 1, (node, token)))

    def cost(self, a: str, b: str) -> float:
        return self.instance.edge_cost(a, b)

    @property
    def link_capacity(self) -> bool:
        return self.instance.link_capacity

    def edge_capacity(self, a: str, b: str) -> float:
        return self.instance.edge_capacity(a, b)

    def is_mate(self, a: str, b: str) -> bool:
        """Whether b is a live peer of a's stage (exchanges ask only those, see `Node.mate_known`)."""
        agents = self.agents
        return a != b and a in agents and b in agents and agents[a].stage == agents[b].stage

    # ------------------------------------------------------------ running
    def _step(self) -> None:
        t, _, kind, item = heapq.heappop(self._heap)
        self.now = max(self.now, t)
        if kind == 0:
            env: Envelope = item  # type: ignore[assignment]
            agent = self.agents.get(env.dst)
            if agent is None or env.src not in self.agents:
                return
            if not isinstance(env.body, Ack) and env.depth > self._max_depth:
                self._max_depth = env.depth
            agent.receive(env, self.now)
        else:
            node, token = item  # type: ignore[misc]
            agent = self.agents.get(node)
            if agent is not None:
                agent.on_timer(token, self.now)

    def in_flight(self) -> list[Envelope]:
        """Envelopes sent and not delivered yet (for benchmarks' watches)."""
        return [item for _, _, kind, item in self._heap if kind == 0]  # type: ignore[misc]

    def run_until(self, t: float) -> None:
        """Advance virtual time to `t`, delivering due messages and firing due timers."""
        while self._heap and self._heap[0][0] <= t:
            self._step()
        self.now = max(self.now, t)
        self.stats.rounds = self._max_depth

    @property
    def depth(self) -> int:
        """The causal depth reached so far (asynchronous rounds since the start)."""
        return self._max_depth

    def run_until_quiescent(
        self, max_time: float = 1e4, watch: Callable[[], None] | None = None, every: float = 0.0
    ) -> ProtocolStats:
        """Run until no message is in flight and no timer is due; returns this run's counters.

        `watch` is called every `every` virtual seconds and at the end (benchmarks that track when
        a property first holds for good)."""
        start_msgs, start_depth, start_time = self.stats.messages, self._max_depth, self.now
        start_drop = self.stats.dropped
        start_sent = dict(self.stats.sent_by)
        deadline = self.now + max_time
        check = self.now + every
        while self._heap and self._heap[0][0] <= deadline:
            if watch is not None and self._heap[0][0] > check:
                watch()
                check = self._heap[0][0] + every
            self._step()
        if watch is not None:
            watch()
        self.stats.rounds = self._max_depth
        self.stats.quiescent = not self._heap
        self.stats.virtual_time = self.now
        return ProtocolStats(
            rounds=self._max_depth - start_depth,
            messages=self.stats.messages - start_msgs,
            dropped=self.stats.dropped - start_drop,
            virtual_time=self.now - start_time,
            quiescent=not self._heap,
            sent_by={k: v - start_sent.get(k, 0) for k, v in self.stats.sent_by.items()},
        )

    # ------------------------------------------------------------- results
    def routes(self) -> dict[str, dict[str, dict[str, float]]]:
        """Per-holder routes: routes[holder][node][next_hop] = rate, from every sender's table."""
        out: dict[str, dict[str, dict[str, float]]] = {h: {} for h in self.instance.holder_ids()}
        for node, agent in self.agents.items():
            for h, nexts in agent.routes().items():
                if nexts and h in out:
                    out[h][node] = dict(nexts)
        return out

    def quiescent(self) -> bool:
        return not self._heap

    # --------------------------------------------------------------- churn
    def remove_peer(self, peer_id: str) -> None:
        """A peer leaves or crashes: its neighbours learn it (failure detector) and repair."""
        spec = self.instance.node(peer_id)
        if not isinstance(spec, PeerSpec):
            raise InstanceError(f"{peer_id!r} is not a stage peer")
        inst = self.instance
        links = {pair: link for pair, link in inst.explicit_links.items() if peer_id not in pair}
        self.instance = inst.replace(peers=[p for p in inst.peers if p.id != peer_id], explicit_links=links)
        agent = self.agents.pop(peer_id)
        # everyone that counts it as a neighbour (views can differ after a write-off)
        around = agent.prev | agent.next
        around |= {n for n, a in self.agents.items() if peer_id in a.prev or peer_id in a.next}
        for other in sorted(around):
            if other in self.agents:
                self.agents[other].notify(NeighbourGone(peer_id), self.now)
        for mate in sorted(p.id for p in self.instance.peers_of(spec.stage)):
            self.agents[mate].mate_gone(peer_id, self.now)

    def add_peer(self, spec: PeerSpec, links: Mapping[tuple[str, str], Link] | None = None) -> None:
        """A peer joins: the adjacent stages discover it, it announces itself and is pushed to.
        `links` are its explicit links (required where the instance gives links per pair)."""
        inst = self.instance
        self.instance = inst.replace(
            peers=[*inst.peers, spec], explicit_links={**inst.explicit_links, **(links or {})}
        )
        for other in self.agents.values():
            other.forget_costs(spec.id)  # the id may have served before, elsewhere
        agent = self._make_peer(spec)
        self.agents[spec.id] = agent
        self._wire(agent)
        for other in sorted(agent.prev | agent.next):
            self.agents[other].notify(NeighbourJoined(spec.id, spec.stage), self.now)
        agent.settle()
        agent.tell_room()

    def set_capacity(self, peer_id: str, capacity: float) -> None:
        spec = self.instance.node(peer_id)
        if not isinstance(spec, PeerSpec):
            raise InstanceError(f"{peer_id!r} is not a stage peer")
        new = PeerSpec(spec.id, spec.stage, capacity, spec.compute_s, spec.region)
        peers = [new if p.id == peer_id else p for p in self.instance.peers]
        self.instance = self.instance.replace(peers=peers)
        agent = self.agents[peer_id]
        assert isinstance(agent, PeerAgent)
        agent.now = self.now
        agent.set_capacity(capacity)

    def set_demand(self, holder_id: str, demand: float) -> None:
        spec = self.instance.node(holder_id)
        if not isinstance(spec, HolderSpec):
            raise InstanceError(f"{holder_id!r} is not a data holder")
        new = HolderSpec(spec.id, demand, spec.compute_s, spec.region)
        self.instance = self.instance.replace(
            holders=[new if h.id == holder_id else h for h in self.instance.holders]
        )
        agent = self.agents[holder_id]
        assert isinstance(agent, HolderAgent)
        agent.now = self.now
        agent.set_demand(demand)

    def set_compute(self, node_id: str, compute_s: float) -> None:
        """A node's compute time changed (so did its edge costs): neighbours re-evaluate."""
        for other in self.agents.values():
            other.forget_costs(None if other.id == node_id else node_id)
        spec = self.instance.node(node_id)
        if isinstance(spec, PeerSpec):
            new_p = PeerSpec(spec.id, spec.stage, spec.capacity, compute_s, spec.region)
            self.instance = self.instance.replace(
                peers=[new_p if p.id == node_id else p for p in self.instance.peers]
            )
        else:
            new_h = HolderSpec(spec.id, spec.demand, compute_s, spec.region)
            self.instance = self.instance.replace(
                holders=[new_h if h.id == node_id else h for h in self.instance.holders]
            )
        agent = self.agents[node_id]
        for other in [node_id, *sorted(agent.prev | agent.next)]:
            a = self.agents[other]
            a.now = self.now
            a.budget = max(a.budget, 2 + len(a.next) // 2)
            a._told.clear()
            a.settle()

    # ------------------------------------------------------------- helpers
    def _max_delay(self, instance: Instance) -> float:
        """The largest one-way delay of a callable over a seeded sample of node pairs (>= 1 ms)."""
        assert callable(self.delay)
        ids = sorted([h.id for h in instance.holders] + [p.id for p in instance.peers])
        rng = random.Random(zlib.crc32(f"retry:{self.seed}".encode()))
        pairs = [(rng.choice(ids), rng.choice(ids)) for _ in range(min(400, len(ids) ** 2))]
        return max([0.001, *(float(self.delay(a, b, rng)) for a, b in pairs)])

    def _child_seed(self, node: str) -> int:
        return zlib.crc32(f"{self.seed}:{node}".encode())

    def _make_peer(self, p: PeerSpec) -> PeerAgent:
        agent = PeerAgent(
            p.id,
            self,
            p.stage,
            self.instance.stages,
            self.instance.holder_ids(),
            p.capacity,
            seed=self._child_seed(p.id),
            improve=self.improve,
        )
        agent.budget = FIRST_MOVES  # (its next hops are not wired yet: no base_budget here)
        agent.now = self.now
        return agent

    def _wire(self, agent: PeerAgent | HolderAgent) -> None:
        """Discovery: who is in the adjacent stages (the DHT's stage keys)."""
        inst, s = self.instance, agent.stage
        last = inst.stages - 1
        ids = inst.holder_ids()
        if s == -1:
            agent.next = {p.id for p in inst.peers_of(0)}
            agent.prev = {p.id for p in inst.peers_of(last)}
            agent.budget = 2 + len(agent.next) // 2
        else:
            agent.prev = set(ids) if s == 0 else {p.id for p in inst.peers_of(s - 1)}
            agent.next = set(ids) if s == last else {p.id for p in inst.peers_of(s + 1)}
        agent.now = self.now


def total_excess(bus: MessageBus) -> float:
    """Sum of |excess| over peers: zero at a consistent quiescent point."""
    return sum(
        abs(a.excess(h))
        for a in bus.agents.values()
        if isinstance(a, PeerAgent)
        for h in a.holders
        if abs(a.excess(h)) > EPS
    )
