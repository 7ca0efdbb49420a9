"""The sending side shared by data holders (as sources) and stage peers: push, cancel, improve.

Built on `Node` (swarm/flow/node.py): the reliable channel and the neighbour views.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable

from swarm.flow.link_use import LinkUse
from swarm.flow.messages import (
    INF,
    Announce,
    Body,
    Cancel,
    CancelDone,
    EdgesDropped,
    NeighbourGone,
    NeighbourJoined,
    Offer,
    Reply,
    Return,
)
from swarm.flow.node import EPS, Env

T0 = 2.0  # annealing start temperature, in milliseconds of path cost (GWTF: T0 about 2, x0.95)
COOLING = 0.95
T_MIN = 0.05
READY_WAIT = 40.0  # retry periods to wait for silent next hops before the first push


class Sender(LinkUse):
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
        # move offer -> the edge generation of each hop it may move flow off, when it was made: a
        # hop that one of us wrote off since had that edge dropped on both sides (see on_reply)
        self._old_gen: dict[int, dict[str, int]] = {}
        self.init_link_use()
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
        """Track an offer. A move (`old` set) only shifts flow that already leaves, so it does not
        count against excess: counted, it would read as a deficit and cancel flow meanwhile."""
        oid = self._new_id()
        self.flows_moved()
        self.offers[oid] = (h, v, rate, old)
        if old is not None:
            self._old_gen[oid] = {old: self._gen.get(old, 0)}
        self._offered[(h, v)] = self._offered.get((h, v), 0.0) + rate
        if old is None:
            self._offered_h[h] = self._offered_h.get(h, 0.0) + rate
        return oid

    def pop_offer(self, oid: int) -> tuple[str, str, float, str | None] | None:
        entry = self.offers.pop(oid, None)
        self._old_gen.pop(oid, None)
        if entry is not None:
            self.flows_moved()
            h, v, rate, old = entry
            self._offered[(h, v)] -= rate
            if old is None:
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
        return min(self.view_spare(v) - self.offered(h, v), self.room(v))

    def target_label(self, h: str, v: str) -> int:
        return self.view_label(v, h)

    def target_cheapest(self, h: str, v: str) -> float:
        st = self.views.get(v)
        return self.link(v) + (st.cheapest.get(h, INF) if st else INF)

    def target_worst(self, h: str, v: str) -> float:
        st = self.views.get(v)
        return self.link(v) + (st.worst.get(h, 0.0) if st else 0.0)

    def worst_of(self, h: str, v: str) -> float:
        """Next hop v's most expensive used route on to h's sink: its path news, else its state."""
        p = self.paths.get(v)
        if p is not None and h in p.worst:
            return p.worst[h]
        st = self.views.get(v)
        return st.worst.get(h, 0.0) if st else 0.0

    def worst(self, h: str) -> float | None:
        if h not in self._worst_cache:
            used = [self.target_worst(h, v) for v, r in self.out[h].items() if r > EPS]
            self._worst_cache[h] = max(used) if used else None
        return self._worst_cache[h]

    def cheapest(self, h: str) -> float:
        """Cheapest route to h's sink through next hops that published spare capacity (cached).

        Unknown (infinite) until `ready`, so that upstream waits for the whole picture too.
        """
        if not self.ready:
            return INF
        self.sync_links()  # a link that filled or freed up changes the cheapest route
        cached = self._cheap_cache.get(h)
        if cached is None:
            cached = self._cheap_cache[h] = self._cheapest_over_targets(h)
        return cached

    def _cheapest_over_targets(self, h: str) -> float:
        """The uncached `cheapest`: next hops that published spare capacity and can reach h's sink."""
        best = INF
        link, top, limits = self.link, self.max_label, self.link_limits
        for v in self.next:
            st = self.views.get(v)
            if st is None or st.spare <= EPS or st.labels.get(h, top) >= top:
                continue
            if limits and self.room(v) <= EPS:
                continue
            c = link(v) + st.cheapest.get(h, INF)
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
        options = self._push_options(h, mine)
        options.sort()
        for _, v, spare in options:
            if left <= EPS:
                break
            rate = min(left, spare)
            oid = self.add_offer(h, v, rate, None)
            bid = self.arrival(h) + self.link(v)
            self.send(v, Offer(h, rate, oid, mine, bid=bid, state=self.state()))
            left -= rate
        return left

    def _push_options(self, h: str, mine: int) -> list[tuple[float, str, float]]:
        """(route cost, next hop, spare) of every admissible next hop: spare and a lower label, read
        straight from the views (this scan runs on every push). Without link limits also a route to
        the sink (see `dead_end`)."""
        options = []
        top, views, link, offered = self.max_label, self.views, self.link, self._offered
        limits, room = self.link_limits, self.room  # (`room` and `dead_end` inlined: a hot scan)
        for v in self.next:
            st = views.get(v)
            if st is None:
                continue
            spare = st.spare - offered.get((h, v), 0.0)
            if limits:
                spare = min(spare, room(v))
            if spare > EPS and st.labels.get(h, top) < mine:
                route = st.cheapest.get(h, INF)
                if limits or route < INF:
                    options.append((link(v) + route, v, spare))
        return options

    def _move_targets(self, h: str) -> list[tuple[str, float]]:
        """(w, w's dearest route on) for each target w a move of h's flow may go to: a lower label,
        link room, and (unless full peers trade) spare capacity. Moved flow follows every route w
        already uses, not only its cheapest."""
        mine = self.label(h)
        moves = []
        for w in self.targets(h):
            if self.target_label(h, w) >= mine or self.room(w) <= EPS:
                continue
            if not self.trades and self.target_spare(h, w) <= EPS:
                continue  # a swap ask to a full w could never be traded (see `trades`)
            moves.append((w, max(self.target_cheapest(h, w), self.target_worst(h, w))))
        return moves

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
        self.flows_moved()
        self._worst_cache.clear()
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
            used = [(v, self.target_worst(h, v)) for v, r in self.out[h].items() if r > EPS]
            if not used:
                continue
            moves = self._move_targets(h)  # the same for every v: judged once, not per used hop
            if not moves:
                continue
            for v, cur in used:
                # the first w (in target order) with the least delta, as a scan of every w finds it
                least = min((there for w, there in moves if w != v), default=None)
                if least is None:
                    continue
                delta = least - cur
                if best is None or delta < best[0]:
                    others = [w for w, there in moves if w != v and there - cur == delta]
                    w = others[0] if others else next(w for w, _ in moves if w != v)  # (NaN: the first)
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
        bid = self.arrival(h) + self.link(w)
        swap = None if spare > EPS else v
        # a swap hands one of w's senders over to v: w must know v's worst route onwards to judge
        # that sender's new path too (unknown, it would count as free and the trade could raise the max)
        onwards = self.worst_of(h, v) if swap else None
        label, gen, state = self.label(h), self._gen.get(v, 0), self.state()
        offer = Offer(h, rate, oid, label, swap, bid=bid, state=state, swap_worst=onwards, swap_gen=gen)
        if swap:
            self.asked(oid, w, h, (v,))
        self.send(w, offer)
        return True

    # Whether a full next hop could trade our flow (a swap ask). A holder's could not: the only
    # other sender of its commodity into stage 0 is itself, so there is no partner to trade with,
    # and an ask without `swap_options` never becomes a hand-over; each ask would cost a refused
    # round trip and one of the few moves a holder gets. (A holder's hand-overs are asked on its
    # walks instead, naming the hop: swarm/flow/holder_hand_overs.py.)
    trades = True

    def asked(self, oid: int, d: str, h: str, hops: tuple[str, ...]) -> None:
        """We (as a) asked d to trade our flow on one of `hops` (see swarm/flow/ask_resync.py)."""

    def on_traded(self) -> None:
        """An exchange we asked for was made (stage peers refund their exchange budget)."""

    # ------------------------------------------------------------ replies
    def on_reply(self, src: str, msg: Reply) -> None:
        self.observe(msg.state)
        gens = self._old_gen.get(msg.offer_id, {})
        entry = self.pop_offer(msg.offer_id)
        if entry is None:
            return
        h, v, _, old = entry
        if v not in self.next:
            return
        if msg.accepted > EPS:
            self.out[h][v] = self.out[h].get(v, 0.0) + msg.accepted
            self.flows_moved()
            self._worst_cache.clear()
            if old is None:
                return
            moved = min(max(msg.exchanged, 0.0), msg.accepted)
            if moved > EPS:  # the old hop already let go of this much (an exchange)
                if msg.swapped is not None:
                    old = msg.swapped  # the receiver chose another of the hops we offered to trade
                # (else we wrote it off, this flow with it, when it left or since: see `_old_gen`)
                if old in self.next and self.same_edge(old, gens.get(old, -1)):
                    self.out[h][old] = self.out[h].get(old, 0.0) - moved
                    self.flows_moved()
                self.on_traded()
            rest = min(msg.accepted - moved, self.out[h].get(old, 0.0))
            if rest > EPS:
                self.cancel(h, old, rest)

    def on_return(self, src: str, msg: Return) -> None:
        self.observe(msg.state)
        if src in self.next:  # may dip below zero while a cancel to src is in flight
            self.out[msg.holder][src] = self.out[msg.holder].get(src, 0.0) - msg.rate
            self.flows_moved()
            self._worst_cache.clear()

    def on_cancel_done(self, src: str, msg: CancelDone) -> None:
        self.observe(msg.state)
        entry = self.cancels.pop(msg.cancel_id, None)
        if entry is None or src not in self.next:
            return
        h, v, rate = entry
        self.out[h][v] = self.out[h].get(v, 0.0) + max(0.0, rate - msg.cancelled)
        self.flows_moved()
        self._worst_cache.clear()

    def write_off(self, node: str, inflow: dict[str, float], out: dict[str, float]) -> None:
        """Tell a neighbour we consider gone that we dropped our flows with it (best effort).

        A crashed peer never reads it. A live one that was only thought gone (a failed call, a stale
        record) drops its side too, so the two sides agree again when it is rediscovered: it would
        otherwise keep counting our old in-flow against its capacity and never be offered work. The
        envelope's newer edge generation says it (`Node._same_generation`), and so does any later
        message of ours, should this one be lost.
        """
        if any(r > EPS for r in (*inflow.values(), *out.values())):
            self.send(node, EdgesDropped(), reliable=False)

    def forget_target(self, node: str) -> None:
        """A next hop is gone: its flow vanishes, offers to it count as rejected."""
        for h in self.holders:
            self.out[h].pop(node, None)
            self.flows_moved()
            self._worst_cache.clear()
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
            if body.wave_holder:
                self.on_wave(src, body.wave_holder, body.wave)
        else:
            return False
        return True

    def on_wave(self, src: str, holder: str, wave: int) -> None:
        """A refresh wave of `holder` reached us from `src` (swarm/flow/refresh_waves.py)."""

    def downstream(self) -> set[str]:
        used = {v for nexts in self.out.values() for v, r in nexts.items() if r > EPS}
        return used | {e[1] for e in self.offers.values()}

    def routes(self) -> dict[str, dict[str, float]]:
        """This node's routing table per holder: holder -> next hop -> rate."""
        return {h: {v: r for v, r in nexts.items() if r > EPS} for h, nexts in self.out.items()}


__all__ = ["Env", "Sender", "NeighbourGone", "NeighbourJoined", "Offer", "Cancel", "EPS"]
