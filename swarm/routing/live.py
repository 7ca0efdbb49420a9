"""The routing protocol run live: this process's agent, its messages over P2P, timers on the loop.

The same `swarm.flow` state machines that the simulator drives over an in-memory bus run here over
hivemind P2P: `transmit` sends the envelope with the `flow` RPC, `set_timer` schedules on the event
loop, neighbours come and go with the DHT's stage records (and RPC failures). The peer's routing
table is its agent's out-flows. The sender of a `flow` message is authenticated by libp2p, so a peer
cannot speak for another.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import msgpack

from swarm.flow.holder_agent import HolderAgent
from swarm.flow.instance import Link, geo_matrix, known_region, link_cost, link_rate
from swarm.flow.messages import (
    INF,
    Envelope,
    Exchange,
    ExchangeDone,
    HandOver,
    NeighbourGone,
    NeighbourJoined,
)
from swarm.flow.node import Node as Agent
from swarm.flow.peer import PeerAgent
from swarm.node import SwarmNode
from swarm.routing.codec import from_wire, to_wire
from swarm.routing.demand import next_demand
from swarm.wire import WireError

log = logging.getLogger(__name__)
LOOPBACK = Link(0.0005, 1e9)  # a pair of peers of which one named no region: assume a fast link


class LiveFlow:
    """Hosts one routing agent (a stage peer's or a holder's) in a live process.

    Edge costs are GWTF's d(a, b) from the compute times peers publish and, when both ends named
    their region (`swarm join --region`), the geo matrix's latency and bandwidth between them. A
    peer that named its region also bounds each such link at what it carries (link limits, as in
    the simulator); pairs where a region is missing count as a fast local link without a bound.
    """

    retry_s = 0.5
    # A departed peer's record lingers until its TTL runs out (swarm/presence.py, RECORD_TTL_S):
    # exchange notes are kept that much longer (swarm/flow/trade_notes.py).
    departure_s = 30.0
    # Holders start no relabel epochs live (swarm/flow/holder_agent.py). Their stall check reads flow
    # that cannot come home yet as stuck while peers are still joining, and with epochs on,
    # tests/live/test_churn.py's stage of three 1-microbatch/s replicas was not routed to one of them
    # in iteration 1. The bus and the simulator use them.
    relabel_epochs = False
    # Nor do holders cap refused demand (swarm/flow/holder_ceiling.py): live, a joiner does not yet
    # tell every holder that it brings room, so a capped holder would not push again.
    room_news = False

    def __init__(self, node: SwarmNode, *, stage: int, stages: int, capacity: float, compute_s: float,
                 activation_bytes: float, region: str = "",
                 on_change: Callable[[], None] = lambda: None):  # fmt: skip
        self.node, self.stage, self.stages = node, stage, stages
        self.capacity, self.compute_s = capacity, compute_s
        self.activation_bytes = activation_bytes
        self.region = region if known_region(region) else ""
        self.regions: dict[str, str] = {node.peer_id: self.region}
        self.link_capacity = bool(self.region)  # read by the agent when it is made
        self.on_change = on_change
        self.on_unknown: Callable[[], None] = lambda: None
        self.compute: dict[str, float] = {node.peer_id: compute_s}
        self.holders: tuple[str, ...] = ()
        self.neighbours: dict[str, int] = {}  # peer -> stage (-1 for holders)
        self.mates: set[str] = set()  # peers of our own stage (exchanges: swarm/flow/exchange.py)
        self.agent: Agent | None = None
        self.closed = False
        self.loop = asyncio.get_running_loop()
        self.t0 = self.loop.time()
        self.sent = 0
        self.received = 0

    # ------------------------------------------------------------------ Env
    def now(self) -> float:
        return self.loop.time() - self.t0

    def transmit(self, envelope: Envelope) -> None:
        self.sent += 1
        payload = msgpack.packb(to_wire(envelope), use_bin_type=True)
        asyncio.ensure_future(self._send(envelope.dst, payload))

    async def _send(self, dst: str, payload: bytes) -> None:
        try:
            await self.node.call(dst, "flow", {"m": payload}, timeout=5.0)
        except Exception as exc:  # noqa: BLE001 - the protocol retransmits until acknowledged
            log.warning("flow message to %s failed: %s", dst, exc)

    def restate_demand(self, policy: str, microbatches: int, seconds: float) -> None:
        """After a holder's iteration: ask the routing for what `policy` says (routing/demand.py)."""
        agent = self.agent
        if not isinstance(agent, HolderAgent) or self.closed:
            return
        new = next_demand(policy, agent.demand, microbatches, seconds)
        if new is not None:
            log.info("holder demand %.2f -> %.2f microbatches/s", agent.demand, new)
            agent.now = self.now()
            agent.set_demand(new)
            self.on_change()

    def set_timer(self, node: str, delay: float, token: str) -> None:
        self.loop.call_later(delay, self._fire, token)

    def _fire(self, token: str) -> None:
        if self.agent is not None:
            self.agent.on_timer(token, self.now())
            self.on_change()

    def _links(self, a: str, b: str) -> tuple[Link, Link] | None:
        """The geo links a -> b and b -> a, or None when either end named no known region."""
        ra, rb = self.regions.get(a, ""), self.regions.get(b, "")
        if not (ra and rb):
            return None
        geo = geo_matrix()
        return geo.link(ra, rb), geo.link(rb, ra)

    def cost(self, a: str, b: str) -> float:
        """GWTF's d(a, b): published compute times, and the geo links between the two regions."""
        ca, cb = self.compute.get(a, self.compute_s), self.compute.get(b, self.compute_s)
        ab, ba = self._links(a, b) or (LOOPBACK, LOOPBACK)
        return link_cost(ca, cb, ab, ba, self.activation_bytes)

    def is_mate(self, a: str, b: str) -> bool:
        """Whether b is a peer of our stage in our DHT view (exchanges ask only those)."""
        return b in self.mates

    def edge_capacity(self, a: str, b: str) -> float:
        """Microbatches/s the link pair between a and b carries (inf when a region is unknown)."""
        links = self._links(a, b)
        return link_rate(*links, self.activation_bytes, self.stages) if links else INF

    # --------------------------------------------------------------- wiring
    async def register(self) -> None:
        await self.node.rpc.add("flow", self.on_message)

    async def on_message(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        raw = header.get("m")
        if not isinstance(raw, bytes) or len(raw) > 1 << 20:
            raise WireError("flow message must be bytes under 1 MiB")
        try:
            envelope = from_wire(msgpack.unpackb(raw, raw=False, strict_map_key=False))
        except (ValueError, msgpack.UnpackException) as exc:
            raise WireError(f"malformed flow message: {exc}") from None
        if not isinstance(envelope, Envelope):
            raise WireError("flow message must be an envelope")
        if envelope.src != sender.to_base58() or envelope.dst != self.node.peer_id:
            raise WireError("flow envelope names another sender or addressee")
        mate = envelope.src in self.mates and isinstance(envelope.body, (Exchange, ExchangeDone, HandOver))
        if self.agent is None or (envelope.src not in self.neighbours and not mate):
            # Not (yet) a neighbour in our DHT view: refuse without acknowledging, so the sender
            # retransmits once we have seen its record, instead of it being dropped for good.
            self.on_unknown()
            raise WireError("not a known neighbour yet; retry later")
        self.received += 1
        self.agent.receive(envelope, self.now())
        self.on_change()
        return {"ok": True}, b""

    def update(self, holders: list[str], neighbours: dict[str, int], compute: dict[str, float],
               mates: set[str] | None = None, regions: dict[str, str] | None = None) -> None:  # fmt: skip
        """The DHT's view changed: new holder set (restart), or neighbours joined or left."""
        if self.closed:
            return
        self.compute.update(compute)
        moved = []
        for peer, region in (regions or {}).items():
            region = region if known_region(region) else ""  # not in the matrix: unknown
            if peer != self.node.peer_id and self.regions.get(peer) != region:
                self.regions[peer] = region
                moved.append(peer)
        if self.agent is not None:
            for peer in moved:  # its edge costs and link bounds changed
                self.agent.forget_costs(peer)
        gone_mates, self.mates = self.mates - set(mates or ()), set(mates or ())
        holders_t = tuple(sorted(holders))
        if holders_t != self.holders or self.agent is None:
            self.holders = holders_t
            self.neighbours = {}
            self.agent = self._make_agent()
        now = self.now()
        for mate in sorted(gone_mates):  # exchanges may wait on it (swarm/flow/trade_notes.py)
            self.agent.mate_gone(mate, now)
        for peer in sorted(set(self.neighbours) - set(neighbours)):
            del self.neighbours[peer]
            self.agent.notify(NeighbourGone(peer), now)
        for peer, stage in sorted(neighbours.items()):
            if peer not in self.neighbours:
                self.neighbours[peer] = stage
                self.agent.notify(NeighbourJoined(peer, stage), now)
        self.on_change()

    def peer_failed(self, peer: str) -> None:
        """An RPC to `peer` failed: treat it as gone until the DHT shows it again."""
        if self.agent is not None and peer in self.neighbours:
            del self.neighbours[peer]
            self.agent.notify(NeighbourGone(peer), self.now())
            self.on_change()

    def close(self) -> None:
        """Stop routing (the peer leaves or moves to another stage): timers and messages go quiet."""
        self.closed = True
        self.agent = None
        self.neighbours = {}

    def _make_agent(self) -> Agent:
        me = self.node.peer_id
        if self.stage == -1:
            agent: Agent = HolderAgent(me, self, self.stages, list(self.holders), demand=self.capacity)
        else:
            agent = PeerAgent(me, self, self.stage, self.stages, list(self.holders), self.capacity)
        agent.now = self.now()
        return agent

    def routes(self) -> dict[str, dict[str, float]]:
        return self.agent.routes() if self.agent is not None else {}

    def describe(self) -> dict:
        """For the `stats` RPC and tests: what this agent knows and has done."""
        return {
            "sent": self.sent, "received": self.received, "holders": list(self.holders),
            "neighbours": dict(self.neighbours), "routes": self.routes(),
            "prev": sorted(self.agent.prev) if self.agent else [],
            "next": sorted(self.agent.next) if self.agent else [],
        }  # fmt: skip
