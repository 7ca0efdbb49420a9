"""What every routing node shares: a reliable channel with edge generations and its view of
neighbours (how it reads their states is `swarm/flow/views.py`, what it announces to whom
`swarm/flow/news.py`).

A node only knows its own state, the states its neighbours published (as delivered in messages)
and the messages it gets. The environment (`Env`: the in-memory bus here, the P2P layer in the live
swarm) moves envelopes and fires timers; a node never reads a clock, only the `now` it is handed.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from swarm.flow.messages import (
    INF,
    Ack,
    Body,
    Cancel,
    CancelDone,
    Convert,
    ConvertBack,
    Corridor,
    CorridorPlan,
    EdgesDropped,
    Envelope,
    HandOff,
    HandOffDone,
    LayerAsk,
    LayerInfo,
    LayerSwap,
    Moved,
    NeighbourGone,
    NeighbourJoined,
    Offer,
    OnwardHint,
    Paths,
    Reply,
    Resynced,
    Return,
    RoomAsk,
    RoomNews,
    RotateAsk,
    RotateHint,
    State,
    Traded,
    Walk,
)
from swarm.flow.news import EPS, summary_of
from swarm.flow.views import Views

# Messages that move flow on the edges between sender and addressee (see `Node._same_generation`).
FENCED = (Offer, Reply, Cancel, CancelDone, Return, HandOff, HandOffDone, Convert, ConvertBack)
# ... and the trade answers that settle flow on them (held from a node we consider gone, see receive)
EDGE_NEWS = (*FENCED, Moved, Traded, Resynced)
# Retry periods a message to a stage mate thought gone is kept to send again (`stop_resending`): as
# long as asks and moves are remembered for resyncs (RESYNC_KEEP in swarm/flow/ask_resync.py).
PARKED_KEEP = 32.0


class Env(Protocol):
    """What a node may ask of its environment."""

    retry_s: float

    def transmit(self, envelope: Envelope) -> None: ...

    def set_timer(self, node: str, delay: float, token: str) -> None: ...

    def cost(self, a: str, b: str) -> float: ...


class Node(Views):
    """Reliable channel (seq, ack, retransmit, dedup), causal depth and neighbour views."""

    def __init__(self, node_id: str, env: Env, stage: int, stages: int, holders: Iterable[str]) -> None:
        self.id = node_id
        self.env = env
        self.stage = stage  # -1 for a data holder
        self.stages = stages
        self.holders = tuple(holders)
        self.src_label = stages + 1  # label of a holder as a source (push-relabel's "n")
        self.max_label = 2 * stages + 3  # "cannot reach any sink"
        self.prev: set[str] = set()
        self.next: set[str] = set()
        self.views: dict[str, State] = {}  # as used: labels of another relabel epoch read as max_label
        self._raw: dict[str, State] = {}  # as published
        self.epoch: dict[str, int] = {}  # per holder: the relabel epoch our labels belong to
        self._epochs_told: dict[str, tuple] = {}  # neighbour -> our epochs we sent it (see observe)
        self.paths: dict[str, Paths] = {}  # neighbour -> its last path-cost news (exchanges)
        self.depth = 0
        self.now = 0.0
        self.version = 0
        self.sent = 0
        self._seq = 0
        self._unacked: dict[int, tuple[Envelope, float]] = {}
        self._parked: dict[int, tuple[Envelope, float]] = {}  # to mates thought gone (stop_resending)
        self._seen: dict[str, set[int]] = {}
        self._retry_armed = False
        self._told: dict[str, tuple] = {}  # neighbour -> (has spare, labels, costs) it last heard from us
        self._summarised: State | None = None  # the state `_summary` was made from (see send)
        self._summary: tuple = ()
        self._announce_armed = False
        self._cost_at = -INF
        self.announce_s = env.retry_s / 4.0
        # acknowledgements wait at most this long for a message to ride on; the sender retransmits
        # only after retry_s (4x the largest one-way delay), so a round trip plus this fits well
        self.ack_s = env.retry_s / 8.0
        self._owed: dict[str, list[int]] = {}
        self._ack_armed = False
        self._gen: dict[str, int] = {}  # node -> how often one of us wrote the other off (see receive)
        self._fenced_src = ""  # set while a stale `Moved` or `Traded` is handled (see receive)
        self._static_costs = bool(getattr(env, "static_costs", False))
        self._links: dict[str, float] = {}  # edge costs to neighbours, when the env says they are static
        # links carry at most bandwidth / activation bytes microbatches/s (`Instance.link_capacity`)
        self.link_limits = bool(getattr(env, "link_capacity", False))
        self._caps: dict[tuple[str, str], float] = {}
        self._cheap_cache: dict[str, float] = {}
        self._fwd_cache: dict[str, int] = {}
        self._fwd_count: dict[str, int] = {}  # next hops at each `_fwd_cache` minimum (see `_fold`)
        self._worst_cache: dict[str, float | None] = {}  # per holder, until out-flows or views change
        self._costs_forgotten = 0  # bumped whenever edge costs may have changed (see `forget_costs`)

    # ------------------------------------------------------------- channel
    def send(self, dst: str, body: Body, reliable: bool = True) -> None:
        """Send `body`; reliable ones are retransmitted until acknowledged, others (seq -1) are not.

        Every state we hand a neighbour is remembered, so announcements only carry news to it.
        """
        st = getattr(body, "state", None)
        if isinstance(st, State) and st.node == self.id:
            if st is not self._summarised:  # one summary per state, shared by all who hear it
                self._summarised = st
                summary = summary_of(st)
                if summary != self._summary:  # equal: keep the object, so `_publish` judges it once
                    self._summary = summary
            self._told[dst] = self._summary
        self.sent += 1
        acks = tuple(self._owed.pop(dst, ()))
        gen = self._gen.get(dst, 0)
        if not reliable:
            self.env.transmit(Envelope(self.id, dst, -1, self.depth + 1, body, acks, gen))
            return
        self._seq += 1
        env = Envelope(self.id, dst, self._seq, self.depth + 1, body, acks, gen)
        self._unacked[self._seq] = (env, self.now)
        self.env.transmit(env)
        self._arm_retry()

    def _arm_retry(self) -> None:
        if not self._retry_armed:
            self._retry_armed = True
            self.env.set_timer(self.id, self.env.retry_s, "retry")

    def link(self, v: str) -> float:
        """Edge cost to `v`, remembered when the environment says costs only change by its word
        (`static_costs`; it then calls `forget_costs`): route scans ask for it millions of times."""
        found = self._links.get(v)
        if found is None:
            found = self.env.cost(self.id, v)
            if self._static_costs:
                self._links[v] = found
        return found

    def edge_cap(self, a: str, b: str) -> float:
        """Microbatches/s the link a -> b carries (inf unless the environment limits links)."""
        if not self.link_limits:
            return INF
        found = self._caps.get((a, b))
        if found is None:
            found = self._caps[(a, b)] = self.env.edge_capacity(a, b)
        return found

    def forget_costs(self, node: str | None = None) -> None:
        """Edge costs to `node` (to everyone, without one) changed: drop what was derived from them."""
        self._costs_forgotten += 1
        if node is None:
            self._links.clear()
            self._caps.clear()
        else:
            self._links.pop(node, None)
            self._caps = {k: c for k, c in self._caps.items() if node not in k}
        self._cheap_cache.clear()
        self._worst_cache.clear()
        self._fwd_cache.clear()  # a link bound may have changed which next hops count

    def stamp(self) -> int:
        """A fresh version for a state snapshot: the newest snapshot sent always wins."""
        self.version += 1
        return self.version

    def receive(self, envelope: Envelope, now: float) -> None:
        """Entry point for a delivered envelope."""
        self.now = now
        body = envelope.body
        for seq in (body.seq, *envelope.acks) if isinstance(body, Ack) else envelope.acks:
            sent = self._unacked.get(seq)
            if sent is not None and sent[0].dst == envelope.src:
                del self._unacked[seq]
            parked = self._parked.get(seq)
            if parked is not None and parked[0].dst == envelope.src:
                del self._parked[seq]
        if isinstance(body, Ack) and envelope.gen <= self._gen.get(envelope.src, 0):
            return
        if not self._same_generation(envelope):
            if envelope.seq >= 0:
                self._owe_ack(envelope.src, envelope.seq)
            return
        if isinstance(body, (Ack, EdgesDropped)):
            return
        src, neighbour = envelope.src, envelope.src in self.prev or envelope.src in self.next
        if not neighbour and isinstance(body, EDGE_NEWS) and envelope.gen >= self._gen.get(src, 0):
            # news of our edge from a node we consider gone, in the current generation (it saw our
            # write-off, or wrote us off too): unacknowledged, it comes again until we find the node
            # again. Acknowledged and ignored, an offer stayed open at its sender for good, and a
            # `Moved` whose withdrawal got lost left the edge out of step (false departures with
            # 5% loss). Older ones concern edges already dropped on both sides (`_same_generation`)
            return
        gone = not neighbour and not self.from_mate(body)
        if envelope.seq >= 0:
            self._owe_ack(envelope.src, envelope.seq)
            seen = self._seen.setdefault(envelope.src, set())
            if envelope.seq in seen:
                return  # a retransmission of something already applied
            seen.add(envelope.seq)
        if isinstance(body, RoomNews):  # from any node (a joiner deep in the swarm): moves no flow
            self.depth = max(self.depth, envelope.depth)
            self.on_room_news()
            return
        if gone:
            return  # from a node we consider gone: its flow was already written off
        self.depth = max(self.depth, envelope.depth)
        if isinstance(body, Paths):  # moves no flow: nothing for push-relabel to do
            self.paths[envelope.src] = body
            self.on_paths()
            return
        if isinstance(body, (Corridor, CorridorPlan)):  # advisory too: a plan starts no push
            self.on_corridor(envelope.src, body)
            return
        if isinstance(body, Walk):  # advisory: worst-path asks start from it, no push
            self.on_walk(body)
            return
        if isinstance(body, OnwardHint):  # advisory too: an ask may start from it
            self.on_onward_hint(envelope.src, body)
            return
        if isinstance(body, (RotateAsk, RotateHint)):  # advisory too: asks may start from them
            self.on_rotation(envelope.src, body)
            return
        if isinstance(body, RoomAsk):  # advisory too: asks may start from it
            self.on_room_ask(envelope.src, body)
            return
        if isinstance(body, (LayerAsk, LayerInfo, LayerSwap)):  # advisory too: a plan, its asks
            self.on_layer(envelope.src, body)
            return
        # a trade's word from before one of us wrote the other off: our edge with src was dropped
        stale = isinstance(body, (Moved, Traded)) and envelope.gen < self._gen.get(envelope.src, 0)
        self._fenced_src = envelope.src if stale else ""  # (see `_same_generation`)
        try:
            self.handle(envelope.src, body)
        finally:
            self._fenced_src = ""
        self.settle()

    def _same_generation(self, envelope: Envelope) -> bool:
        """Edge generations: a node that writes a neighbour off (a failed call, a lapsed record)
        drops every flow on their edges and counts one generation more for that neighbour; its
        messages carry the count. The neighbour, alive after all, drops its side when it first sees
        the newer generation, and messages that move flow on their edges from before (either way)
        are stale: acknowledged and dropped, since the state they would change was dropped on both
        sides. A `Moved` from before still counts for the edge it moved our flow off (it is handled
        as from a neighbour written off). False (drop it) for a stale flow message.

        Without this, the two sides of a neighbour wrongly written off while flow was moving ended
        out of step: an acceptance that arrived after the write-off was ignored, the flow's later
        return was not.
        """
        src, gen = envelope.src, envelope.gen
        mine = self._gen.get(src, 0)
        if gen > mine:
            self._gen[src] = gen
            self.drop_edges(src)
            return True
        return gen == mine or not isinstance(envelope.body, FENCED)

    def same_edge(self, node: str, gen: int) -> bool:
        """Whether our edge with `node` is still of generation `gen` (-1: not said), i.e. neither of
        us wrote the other off since (see `_same_generation`)."""
        return gen in (-1, self._gen.get(node, 0))

    def on_corridor(self, src: str, body: Corridor | CorridorPlan) -> None:
        """A corridor probe or plan (swarm/flow/corridor.py); only stage peers take part."""

    def on_walk(self, body: Walk) -> None:
        """The holder's worst-path walk (swarm/flow/walks.py); only stage peers take part."""

    def on_onward_hint(self, src: str, body: OnwardHint) -> None:
        """A next hop made room for our flow to move to its mate (swarm/flow/onward_swaps.py)."""

    def on_rotation(self, src: str, body: RotateAsk | RotateHint) -> None:
        """A rotation's ask or hint from a next hop (swarm/flow/rotations.py)."""

    def on_room_ask(self, src: str, body: RoomAsk) -> None:
        """A next hop asks us to make room on it for another holder's flow (swarm/flow/room_chains.py)."""

    def on_layer(self, src: str, body: LayerAsk | LayerInfo | LayerSwap) -> None:
        """A layer plan's ask, answer or trade (swarm/flow/layer_plans.py)."""

    def on_room_news(self) -> None:
        """New capacity joined the swarm (swarm/flow/holder_ceiling.py); only holders act on it."""

    def send_room_news(self, holders: Iterable[str]) -> None:
        for h in holders:
            self.send(h, RoomNews())

    def drop_edges(self, node: str) -> None:
        """`node` wrote us off and dropped its side of our edges: drop ours (no messages)."""

    def _owe_ack(self, src: str, seq: int) -> None:
        """Acknowledge later: on our next message to `src`, or alone after `ack_s` at the latest."""
        self._owed.setdefault(src, []).append(seq)
        if not self._ack_armed:
            self._ack_armed = True
            self.env.set_timer(self.id, self.ack_s, "acks")

    def _flush_acks(self) -> None:
        self._ack_armed = False
        owed, self._owed = self._owed, {}
        for src, seqs in owed.items():
            self.sent += 1
            gen = self._gen.get(src, 0)
            self.env.transmit(Envelope(self.id, src, 0, 0, Ack(seqs[0]), tuple(seqs[1:]), gen))

    def notify(self, event: NeighbourGone | NeighbourJoined, now: float) -> None:
        """Failure detector / discovery events from the environment."""
        self.now = now
        self._epochs_told.pop(event.node, None)  # a node that rejoins starts without our epochs
        if isinstance(event, NeighbourGone):
            self._gen[event.node] = self._gen.get(event.node, 0) + 1  # (see `_same_generation`)
            self.prev.discard(event.node)
            self.next.discard(event.node)
            self.views.pop(event.node, None)
            self._raw.pop(event.node, None)
            self._told.pop(event.node, None)
            self._cheap_cache.clear()
            self._fwd_cache.clear()
            self._worst_cache.clear()
            self.stop_resending(event.node)
            self._owed.pop(event.node, None)
            self.forget(event.node)
        else:
            if event.stage == self.stage - 1 or (self.stage == 0 and event.stage == -1):
                self.prev.add(event.node)
            if event.stage == self.stage + 1 or (self.stage == self.stages - 1 and event.stage == -1):
                self.next.add(event.node)
            if self.stage == -1 and event.stage == self.stages - 1:
                self.prev.add(event.node)
            self._cheap_cache.clear()
            self._fwd_cache.clear()
            self._worst_cache.clear()
            self._told.pop(event.node, None)  # tell the newcomer who we are
            self.on_joined()
        self.settle()

    def mate_gone(self, node: str, now: float) -> None:
        """A peer of our own stage left (the DHT shows stage mates too): not a neighbour, but
        exchanges may wait on it (swarm/flow/trade_notes.py)."""
        self.now = now
        self.stop_resending(node, park=True)  # (retransmitted for ever to a mate that left)
        if self.on_mate_gone(node):
            self.settle()

    def mate_known(self, node: str) -> bool:
        """Whether the environment knows `node` as a live peer of our stage (`Env.is_mate`; an
        environment without that view counts every named peer as one)."""
        is_mate = getattr(self.env, "is_mate", None)
        return True if is_mate is None else bool(is_mate(self.id, node))

    def on_mate_gone(self, node: str) -> bool:
        """Stage peers settle what they traded with the mate that left; True if anything changed."""
        return False

    def on_timer(self, token: str, now: float) -> None:
        self.now = now
        if token == "retry":
            self._retry_armed = False
            for seq, (env, sent_at) in list(self._unacked.items()):
                if now - sent_at >= self.env.retry_s - EPS:
                    self._unacked[seq] = (env, now)
                    self.sent += 1
                    self.env.transmit(env)
            if self._parked:
                self._unpark(now)
            if self._unacked or self._parked:
                self._arm_retry()
        elif token == "acks":
            self._flush_acks()
        elif token == "ready":
            if not self.ready:
                self.ready = True
                self._cheap_cache.clear()
                self.settle()
        elif token == "announce":
            self._announce_armed = False
            self._publish()
            self.publish_paths()
        else:
            self.timer(token)
            self.settle()

    # ------------------------------------------------------- for subclasses
    def handle(self, src: str, body: Body) -> None:
        raise NotImplementedError

    def stop_resending(self, node: str, park: bool = False) -> None:
        """Give up on what `node` has not acknowledged (it left, or we stopped waiting for it).

        With `park` (a stage mate whose record lapsed), keep it for PARKED_KEEP retry periods and
        send it again, as it was, once the environment knows `node` as a mate again: a mate that
        only lost its record in our view still waits for our answers, and the receiver drops a
        copy it has seen. Dropped at once, an answer lost on its first way left the exchange open
        at d for good (false departures with 5% loss: 1 of 600 runs out of step)."""
        for seq in [s for s, (e, _) in self._unacked.items() if e.dst == node]:
            env, _ = self._unacked.pop(seq)
            if park:
                self._parked[seq] = (env, self.now)
        if park and self._parked:
            self._arm_retry()

    def _unpark(self, now: float) -> None:
        """Parked messages to a mate that is known again go back to retransmission; old ones go."""
        for seq, (env, parked_at) in list(self._parked.items()):
            if now - parked_at > PARKED_KEEP * self.env.retry_s:
                del self._parked[seq]
            elif self.mate_known(env.dst):
                del self._parked[seq]
                self._unacked[seq] = (env, now)
                self.sent += 1
                self.env.transmit(env)

    def from_mate(self, body: Body) -> bool:
        """Messages taken from nodes that are not (or no longer) our neighbours: a stage mate's
        exchange, and its outcome for our flow."""
        return False

    def settle(self) -> None:
        raise NotImplementedError

    def state(self) -> State:
        raise NotImplementedError

    def forget(self, node: str) -> None:
        raise NotImplementedError

    def on_joined(self) -> None:
        """A neighbour joined: a new chance to push and improve."""

    def on_paths(self) -> None:
        """A neighbour's path costs arrived (`self.paths`)."""

    def publish_paths(self) -> None:
        """Tell neighbours whose path costs moved (exchanging peers do)."""

    def timer(self, token: str) -> None:
        """Protocol timers other than retransmission."""
