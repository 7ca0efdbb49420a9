"""What every routing node shares: a reliable channel, its view of neighbours, and the sender side.

A node only knows its own state, the states its neighbours published (as delivered in messages)
and the messages it gets. The environment (`Env`: the in-memory bus here, the P2P layer in the live
swarm) moves envelopes and fires timers; a node never reads a clock, only the `now` it is handed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from typing import Protocol

from swarm.flow.messages import (
    INF,
    Ack,
    Announce,
    Body,
    Cancel,
    CancelDone,
    Envelope,
    NeighbourGone,
    NeighbourJoined,
    Offer,
    Reply,
    Return,
    State,
)

EPS = 1e-9
T0 = 2.0  # annealing start temperature, in milliseconds of path cost (GWTF: T0 about 2, x0.95)
COOLING = 0.95
T_MIN = 0.05
COST_GRAIN_S = 0.01  # route-cost changes under 10 ms are not announced
COST_REL = 0.05  # nor those under 5%
READY_WAIT = 40.0  # retry periods to wait for silent next hops before the first push
COST_HOLD = 20.0  # at most one costs-only announcement per COST_HOLD announcement periods


class Env(Protocol):
    """What a node may ask of its environment."""

    retry_s: float

    def transmit(self, envelope: Envelope) -> None: ...

    def set_timer(self, node: str, delay: float, token: str) -> None: ...

    def cost(self, a: str, b: str) -> float: ...


def _coarse(cost: float) -> float:
    """Costs on a COST_GRAIN_S grid: smaller changes are not worth a message."""
    if not math.isfinite(cost):
        return cost
    return round(cost / COST_GRAIN_S)


def _summary(state: State) -> tuple[bool, tuple, dict[str, float]]:
    """What a neighbour knows from a state: has spare and labels (and which holders it can route:
    news it must get), then route costs (best effort)."""
    reach = tuple(h for h, c in sorted(state.cheapest.items()) if math.isfinite(c))
    return (state.spare > EPS, (tuple(sorted(state.labels.items())), reach), dict(state.cheapest))


NONE, COSTS, BAD, GOOD = 0, 1, 2, 3


def _news(told: tuple | None, now: tuple, upstream: bool, sender: bool = True) -> int:
    """What a neighbour that last heard `told` would learn from `now` (see `Node._publish`)."""
    if told is None:
        return GOOD
    old_labels, old_reach = told[1]
    new_labels, new_reach = now[1]
    if upstream and now[0] and not told[0]:
        return GOOD
    if old_labels != new_labels:
        before = dict(old_labels)
        if any(lab < before.get(h, lab + 1) for h, lab in new_labels):
            return GOOD
        return BAD
    if upstream:
        if old_reach != new_reach:
            return GOOD if set(new_reach) - set(old_reach) else BAD
        if told[0] != now[0]:
            return BAD
        if _moved(told[2], now[2]):
            return COSTS if sender or _cheaper(told[2], now[2]) else NONE
    return NONE


def _cheaper(old: dict[str, float], new: dict[str, float]) -> bool:
    """Did some route get cheaper (news for every upstream; dearer routes only concern senders)?"""
    return any(c < old.get(h, INF) for h, c in new.items())


def _moved(old: dict[str, float], new: dict[str, float]) -> bool:
    """Did a published route cost move enough to tell upstream (COST_REL or COST_GRAIN_S)?"""
    if old.keys() != new.keys():
        return True
    for h, c in new.items():
        o = old[h]
        if math.isfinite(c) != math.isfinite(o):
            return True
        if math.isfinite(c) and abs(c - o) > max(COST_GRAIN_S, COST_REL * abs(o)):
            return True
    return False


class Node:
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
        self.views: dict[str, State] = {}
        self.depth = 0
        self.now = 0.0
        self.version = 0
        self.sent = 0
        self._seq = 0
        self._unacked: dict[int, tuple[Envelope, float]] = {}
        self._seen: dict[str, set[int]] = {}
        self._retry_armed = False
        self._told: dict[str, tuple] = {}  # neighbour -> (has spare, labels, costs) it last heard from us
        self._announce_armed = False
        self._cost_at = -INF
        self.announce_s = env.retry_s / 4.0
        self._cheap_cache: dict[str, float] = {}
        self._fwd_cache: dict[str, int] = {}

    # ------------------------------------------------------------- channel
    def send(self, dst: str, body: Body, reliable: bool = True) -> None:
        """Send `body`; reliable ones are retransmitted until acknowledged, others (seq -1) are not.

        Every state we hand a neighbour is remembered, so announcements only carry news to it.
        """
        st = getattr(body, "state", None)
        if isinstance(st, State) and st.node == self.id:
            self._told[dst] = _summary(st)
        self.sent += 1
        if not reliable:
            self.env.transmit(Envelope(self.id, dst, -1, self.depth + 1, body))
            return
        self._seq += 1
        env = Envelope(self.id, dst, self._seq, self.depth + 1, body)
        self._unacked[self._seq] = (env, self.now)
        self.env.transmit(env)
        if not self._retry_armed:
            self._retry_armed = True
            self.env.set_timer(self.id, self.env.retry_s, "retry")

    def stamp(self) -> int:
        """A fresh version for a state snapshot: the newest snapshot sent always wins."""
        self.version += 1
        return self.version

    def receive(self, envelope: Envelope, now: float) -> None:
        """Entry point for a delivered envelope."""
        self.now = now
        body = envelope.body
        if isinstance(body, Ack):
            self._unacked.pop(body.seq, None)
            return
        if envelope.seq >= 0:
            self.sent += 1
            self.env.transmit(Envelope(self.id, envelope.src, 0, 0, Ack(envelope.seq)))
            seen = self._seen.setdefault(envelope.src, set())
            if envelope.seq in seen:
                return  # a retransmission of something already applied
            seen.add(envelope.seq)
        if envelope.src not in self.prev and envelope.src not in self.next:
            return  # from a node we consider gone: its flow was already written off
        self.depth = max(self.depth, envelope.depth)
        self.handle(envelope.src, body)
        self.settle()

    def notify(self, event: NeighbourGone | NeighbourJoined, now: float) -> None:
        """Failure detector / discovery events from the environment."""
        self.now = now
        if isinstance(event, NeighbourGone):
            self.prev.discard(event.node)
            self.next.discard(event.node)
            self.views.pop(event.node, None)
            self._told.pop(event.node, None)
            self._cheap_cache.clear()
            self._fwd_cache.clear()
            for seq in [s for s, (e, _) in self._unacked.items() if e.dst == event.node]:
                del self._unacked[seq]
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
            self._told.pop(event.node, None)  # tell the newcomer who we are
            self.on_joined()
        self.settle()

    def on_timer(self, token: str, now: float) -> None:
        self.now = now
        if token == "retry":
            self._retry_armed = False
            for seq, (env, sent_at) in list(self._unacked.items()):
                if now - sent_at >= self.env.retry_s - EPS:
                    self._unacked[seq] = (env, now)
                    self.sent += 1
                    self.env.transmit(env)
            if self._unacked:
                self._retry_armed = True
                self.env.set_timer(self.id, self.env.retry_s, "retry")
        elif token == "ready":
            if not self.ready:
                self.ready = True
                self._cheap_cache.clear()
                self.settle()
        elif token == "announce":
            self._announce_armed = False
            self._publish()
        else:
            self.timer(token)
            self.settle()

    def view_label(self, node: str, holder: str) -> int:
        st = self.views.get(node)
        return st.labels.get(holder, self.max_label) if st else self.max_label

    def view_spare(self, node: str) -> float:
        st = self.views.get(node)
        return st.spare if st else 0.0

    def observe(self, state: State) -> None:
        old = self.views.get(state.node)
        if old is None or state.version >= old.version:
            self.views[state.node] = state
            if state.node not in self.next:
                return  # only next hops' views feed the cached labels and route costs
            if old is None or (old.spare > EPS) != (state.spare > EPS) or old.labels != state.labels:
                self._cheap_cache.clear()
                self._fwd_cache.clear()
            elif old.cheapest != state.cheapest:
                self._cheap_cache.clear()

    def announce(self) -> None:
        """Publish our state, coalesced: at most one announcement per `announce_s` of virtual time."""
        if not self._announce_armed:
            self._announce_armed = True
            self.env.set_timer(self.id, self.announce_s, "announce")

    def senders(self) -> set[str]:
        """Upstream nodes whose flow we carry: they care when our route gets dearer."""
        return set()

    def downstream(self) -> set[str]:
        """Next hops that hold flow from us: they need our labels to return flow (nobody else does)."""
        return set()

    def _publish(self) -> None:
        """Tell each neighbour what changed for it since it last heard from us.

        Upstream neighbours (who push to us) need fullness, labels and route costs; downstream ones
        only our labels, and only if they hold flow from us (offers carry our state anyway). Good
        news (spare again, a lower label, a holder reachable again) is reliable: missing it could
        leave flow unrouted. Bad news and route costs are best effort: a neighbour that missed them
        learns the truth from our reply to its next offer. Cost-only news is batched, because it
        cascades through every stage.
        """
        if not getattr(self, "ready", True):
            return  # nobody can use our state before our route costs are known (see check_ready)
        st = self.state()
        now = _summary(st)
        good: list[str] = []
        other: list[str] = []
        costs_only = True
        senders = self.senders()
        for node in sorted(self.prev):
            news = _news(self._told.get(node), now, upstream=True, sender=node in senders)
            if news == GOOD:
                good.append(node)
            elif news:
                other.append(node)
                costs_only = costs_only and news == COSTS
        for node in sorted(self.downstream() - self.prev):
            if node not in self.holders:
                news = _news(self._told.get(node), now, upstream=False)
                if news == GOOD:
                    good.append(node)
                elif news:
                    other.append(node)
                    costs_only = False
        if not good and not other:
            return
        if not good and costs_only:
            wait = self._cost_at + COST_HOLD * self.announce_s - self.now
            if wait > EPS:  # only route costs moved: batch such news
                self._announce_armed = True
                self.env.set_timer(self.id, wait, "announce")
                return
        self._cost_at = self.now
        body = Announce(st)
        for node in good:
            self.send(node, body)
        for node in other:
            self.send(node, body, reliable=False)

    # ------------------------------------------------------- for subclasses
    def handle(self, src: str, body: Body) -> None:
        raise NotImplementedError

    def settle(self) -> None:
        raise NotImplementedError

    def state(self) -> State:
        raise NotImplementedError

    def forget(self, node: str) -> None:
        raise NotImplementedError

    def on_joined(self) -> None:
        """A neighbour joined: a new chance to push and improve."""

    def timer(self, token: str) -> None:
        """Protocol timers other than retransmission."""


class Sender(Node):
    """The sending side shared by holders (as sources) and peers: push, cancel, improve.

    `out[h][v]` is the rate of holder h's flow that v accepted; offers and cancels in flight are
    tracked until their replies come, so accounting stays exact under loss and reordering.
    """

    def __init__(
        self,
        node_id: str,
        env: Env,
        stage: int,
        stages: int,
        holders: Iterable[str],
        seed: int,
        improve: bool,
    ) -> None:
        super().__init__(node_id, env, stage, stages, holders)
        self.out: dict[str, dict[str, float]] = {h: {} for h in self.holders}
        self.offers: dict[int, tuple[str, str, float, str | None]] = {}  # id -> (h, dst, rate, old hop)
        self.cancels: dict[int, tuple[str, str, float]] = {}
        self._offered: dict[tuple[str, str], float] = {}
        self._offered_h: dict[str, float] = {}
        self._ids = 0
        self.rng = random.Random(seed)
        self.improve = improve
        self.temperature = T0
        self.budget = 0
        self.moves = 0
        self.ready = False
        env.set_timer(node_id, READY_WAIT * env.retry_s, "ready")

    def check_ready(self) -> bool:
        """Push nothing before every next hop told its route cost: the first pushes pick the cheapest.

        A node publishes nothing before it is ready itself, so route costs cascade up from the last
        stage and the swarm's first flow follows cheapest paths instead of whichever neighbour spoke
        first. A next hop that never speaks is waited for only until the "ready" timer fires.
        """
        if not self.ready:
            for h in self.holders:
                for v in self.targets(h):
                    if v not in self.holders and v not in self.views:
                        return False
            self.ready = True
            self._cheap_cache.clear()
            self.announce()
        return True

    # ---------------------------------------------------------- accounting
    def supply(self, h: str) -> float:
        raise NotImplementedError

    def label(self, h: str) -> int:
        raise NotImplementedError

    def arrival(self, h: str) -> float:
        """Cost of the most expensive used path from holder h to this node (0 at the holder)."""
        return 0.0

    def offered(self, h: str, dst: str | None = None) -> float:
        if dst is None:
            return self._offered_h.get(h, 0.0)
        return self._offered.get((h, dst), 0.0)

    def add_offer(self, h: str, v: str, rate: float, old: str | None) -> int:
        oid = self._new_id()
        self.offers[oid] = (h, v, rate, old)
        self._offered[(h, v)] = self._offered.get((h, v), 0.0) + rate
        self._offered_h[h] = self._offered_h.get(h, 0.0) + rate
        return oid

    def pop_offer(self, oid: int) -> tuple[str, str, float, str | None] | None:
        entry = self.offers.pop(oid, None)
        if entry is not None:
            h, v, rate, _ = entry
            self._offered[(h, v)] -= rate
            self._offered_h[h] -= rate
            if not self.offers:
                self._offered.clear()
                self._offered_h.clear()
        return entry

    def excess(self, h: str) -> float:
        return self.supply(h) - sum(self.out[h].values()) - self.offered(h)

    def targets(self, h: str) -> list[str]:
        """Nodes this node may push holder h's flow to."""
        return sorted(self.next)

    def target_spare(self, h: str, v: str) -> float:
        return self.view_spare(v) - self.offered(h, v)

    def target_label(self, h: str, v: str) -> int:
        return self.view_label(v, h)

    def target_cheapest(self, h: str, v: str) -> float:
        st = self.views.get(v)
        return self.env.cost(self.id, v) + (st.cheapest.get(h, INF) if st else INF)

    def target_worst(self, h: str, v: str) -> float:
        st = self.views.get(v)
        return self.env.cost(self.id, v) + (st.worst.get(h, 0.0) if st else 0.0)

    def worst(self, h: str) -> float | None:
        used = [self.target_worst(h, v) for v, r in self.out[h].items() if r > EPS]
        return max(used) if used else None

    def cheapest(self, h: str) -> float:
        """Cheapest route to h's sink through next hops that published spare capacity (cached).

        Unknown (infinite) until `ready`, so that upstream waits for the whole picture too.
        """
        if not self.ready:
            return INF
        cached = self._cheap_cache.get(h)
        if cached is None:
            cached = self._cheap_cache[h] = self._cheapest_over_targets(h)
        return cached

    def _cheapest_over_targets(self, h: str) -> float:
        """The uncached `cheapest`: next hops that published spare capacity and can reach h's sink."""
        best = INF
        cost, top = self.env.cost, self.max_label
        for v in self.next:
            st = self.views.get(v)
            if st is None or st.spare <= EPS or st.labels.get(h, top) >= top:
                continue
            c = cost(self.id, v) + st.cheapest.get(h, INF)
            if c < best:
                best = c
        return best

    def _new_id(self) -> int:
        self._ids += 1
        return self._ids

    # -------------------------------------------------------------- moves
    def push(self, h: str) -> float:
        """Offer excess to admissible targets, cheapest route to the sink first; returns what is left."""
        left = self.excess(h)
        mine = self.label(h)
        options = [
            v for v in self.targets(h) if self.target_spare(h, v) > EPS and self.target_label(h, v) < mine
        ]
        options.sort(key=lambda v: (self.target_cheapest(h, v), v))
        for v in options:
            if left <= EPS:
                break
            rate = min(left, self.target_spare(h, v))
            oid = self.add_offer(h, v, rate, None)
            bid = self.arrival(h) + self.env.cost(self.id, v)
            self.send(v, Offer(h, rate, oid, mine, bid=bid, state=self.state()))
            left -= rate
        return left

    def cancel_deficit(self, h: str) -> None:
        """More flow leaves than arrives: withdraw it from the most expensive next hops."""
        deficit = sum(self.out[h].values()) + self.offered(h) - self.supply(h)
        if deficit <= EPS:
            return
        for v in sorted(self.out[h], key=lambda v: (-self.target_worst(h, v), v)):
            if deficit <= EPS:
                break
            rate = min(deficit, self.out[h][v])
            if rate > EPS:
                self.cancel(h, v, rate)
                deficit -= rate

    def cancel(self, h: str, v: str, rate: float) -> None:
        self.out[h][v] -= rate
        cid = self._new_id()
        self.cancels[cid] = (h, v, rate)
        self.send(v, Cancel(h, rate, cid))

    def try_improve(self) -> bool:
        """GWTF local improvement: move flow off the next hop whose route is most expensive.

        The move goes to a same-stage alternative with a cheaper route: directly when it has spare
        capacity (make before break: offer first, cancel the old hop on accept), or as a swap that
        asks the full alternative to hand one of its in-flows over to our old hop. Uphill moves
        pass with probability exp(-delta_ms / T); T cools by 0.95 per accepted move.
        """
        if not self.improve or self.budget <= 0 or self.offers or self.cancels:
            return False
        best: tuple[float, str, str, str] | None = None
        for h in self.holders:
            mine = self.label(h)
            for v, r in self.out[h].items():
                if r <= EPS:
                    continue
                cur = self.target_worst(h, v)
                for w in self.targets(h):
                    if w == v or self.target_label(h, w) >= mine:
                        continue
                    delta = self.target_cheapest(h, w) - cur
                    if best is None or delta < best[0]:
                        best = (delta, h, v, w)
        if best is None:
            return False
        delta, h, v, w = best
        margin = 1e-6 + 1e-4 * abs(self.target_worst(h, v))
        if delta >= -margin:
            if self.temperature < T_MIN or not math.isfinite(delta):
                return False
            if self.rng.random() >= math.exp(-max(delta, 0.0) * 1000.0 / self.temperature):
                self.budget -= 1
                return False
        self.temperature *= COOLING
        self.budget -= 1
        self.moves += 1
        spare = self.target_spare(h, w)
        rate = min(self.out[h][v], spare) if spare > EPS else self.out[h][v]
        oid = self.add_offer(h, w, rate, v)
        bid = self.arrival(h) + self.env.cost(self.id, w)
        swap = None if spare > EPS else v
        self.send(w, Offer(h, rate, oid, self.label(h), swap, bid=bid, state=self.state()))
        return True

    # ------------------------------------------------------------ replies
    def on_reply(self, src: str, msg: Reply) -> None:
        self.observe(msg.state)
        entry = self.pop_offer(msg.offer_id)
        if entry is None:
            return
        h, v, _, old = entry
        if v not in self.next:
            return
        if msg.accepted > EPS:
            self.out[h][v] = self.out[h].get(v, 0.0) + msg.accepted
            if old is not None and self.out[h].get(old, 0.0) > EPS:
                self.cancel(h, old, min(msg.accepted, self.out[h][old]))

    def on_return(self, src: str, msg: Return) -> None:
        self.observe(msg.state)
        if src in self.next:  # may dip below zero while a cancel to src is in flight
            self.out[msg.holder][src] = self.out[msg.holder].get(src, 0.0) - msg.rate

    def on_cancel_done(self, src: str, msg: CancelDone) -> None:
        self.observe(msg.state)
        entry = self.cancels.pop(msg.cancel_id, None)
        if entry is None or src not in self.next:
            return
        h, v, rate = entry
        self.out[h][v] = self.out[h].get(v, 0.0) + max(0.0, rate - msg.cancelled)

    def forget_target(self, node: str) -> None:
        """A next hop is gone: its flow vanishes, offers to it count as rejected."""
        for h in self.holders:
            self.out[h].pop(node, None)
        for oid in [k for k, e in self.offers.items() if e[1] == node]:
            self.pop_offer(oid)
        self.cancels = {k: e for k, e in self.cancels.items() if e[1] != node}

    def dispatch_sender(self, src: str, body: Body) -> bool:
        if isinstance(body, Reply):
            self.on_reply(src, body)
        elif isinstance(body, Return):
            self.on_return(src, body)
        elif isinstance(body, CancelDone):
            self.on_cancel_done(src, body)
        elif isinstance(body, Announce):
            self.observe(body.state)
        else:
            return False
        return True

    def downstream(self) -> set[str]:
        used = {v for nexts in self.out.values() for v, r in nexts.items() if r > EPS}
        return used | {e[1] for e in self.offers.values()}

    def routes(self) -> dict[str, dict[str, float]]:
        """This node's routing table per holder: holder -> next hop -> rate."""
        return {h: {v: r for v, r in nexts.items() if r > EPS} for h, nexts in self.out.items()}


__all__ = ["Env", "Node", "Sender", "NeighbourGone", "NeighbourJoined", "Offer", "Cancel", "EPS"]
