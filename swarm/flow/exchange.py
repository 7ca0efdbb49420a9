"""Exchanges: two peers of a stage trade upstream senders when the four edges then cost less, or
when the most expensive path through them gets cheaper (GWTF's min-max objective). When no trade
pays and the asked peer has spare capacity, the ask becomes a hand-over (swarm/flow/handover.py).

With every peer's throughput fixed, the cost of a routing splits into one assignment problem per
pair of consecutive stages (which upstream peer feeds which downstream peer), and trading
a->b, c->d for a->d, c->b whenever that costs less reaches that assignment's optimum closely
(offline, on eight random geo instances: within 0.3% of the exact per-layer assignment in mean path
cost, where push-relabel's own flow is 3-12% above it).

Roles: the initiator a (its flow on a->b would be cheaper on a->d), the full peer d it asks, d's
stage mate b, and c, one of d's upstream senders. Only the receiving end of an edge ever moves it,
and d holds the partner's flow aside until b answers, so two exchanges never move the same flow
twice, and no peer's throughput changes at any moment: nothing ripples beyond the four peers.

The worst path through a->b is a's worst route from the holder + d(a,b) + b's worst route on to the
holder's sink. Peers keep those two figures fresh for their neighbours with `Paths` news (best
effort, it moves no flow). Offline, with exact figures and unlimited tries, this local rule takes
the protocol's routes to within 5% of the min-cost flow's worst path on three of four instances.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.flow.ask_resync import ANSWER_WAIT
from swarm.flow.messages import (
    Body,
    Exchange,
    ExchangeDone,
    HandOver,
    Moved,
    Offer,
    Reply,
    Return,
    SwapOption,
)
from swarm.flow.news import EPS
from swarm.flow.swap_asks import GAIN_S, SwapAsks
from swarm.flow.trade_rules import edge_price, plan_rise, rise, rotate_rise, trade_price

EXPIRED_KEPT = 64  # trades given up on (`give_up`) remembered, so that b's late answer is still applied


# A trade that would lower d's label is refused (a lower label is news that spreads). But at the
# maximum flow an idle peer of a non-bottleneck stage reaches no sink with spare, so its label sits
# far above its upstream peers' and every ask to it was refused. An idle d has no sender to trade
# and no news to spread but its own, so it may take a's flow over as a hand-over (docs/routing.md: "Idle
# hand-overs": with three message timings, max path within 5% on 69 -> 74 of 90 runs of the default
# range, 45 -> 48 of the whole range).
IDLE_HAND_OVERS = True


@dataclass
class _Pending:
    """An exchange this peer (as d) started: the offer it answers and the partner flow held aside."""

    initiator: str
    offer: Offer
    partner: str
    rate: float
    mate: str
    answered: bool = False  # a heard "nothing moved so far" (`Reply.waiting`): b's answer goes as `Moved`
    dropped: bool = False  # a wrote us off meanwhile (see `drop_initiator`): its flow does not come to us
    partner_gen: int = 0  # our edge generation with the partner c when we asked b (see `_partner_flow`)


class Exchanger(SwapAsks):
    """The exchange roles of a stage peer; `PeerAgent` supplies the in-flows and labels."""

    inflow: dict[str, dict[str, float]]
    bids: dict[str, dict[str, float]]
    last: bool

    def init_exchanges(self) -> None:
        self.init_swap_asks()
        self._held: dict[tuple[str, str], float] = {}  # (holder, partner) -> flow held aside
        self._pending: dict[int, _Pending] = {}
        self._expired: dict[int, _Pending] = {}

    def from_mate(self, body: Body) -> bool:
        # `Moved` too: a next hop we wrote off may have taken our flow over in an exchange meanwhile
        return isinstance(body, (Exchange, ExchangeDone, HandOver, Moved))

    def movable(self, h: str, u: str) -> float:
        """In-flow from u that may be returned, cancelled or moved (not held for an exchange)."""
        return self.inflow[h].get(u, 0.0) - self._held.get((h, u), 0.0)

    def incoming_exchanges(self, a: str) -> float:
        """Flow that exchanges we (as d) are waiting on would bring us from initiator a."""
        return sum(p.rate for p in self._pending.values() if p.initiator == a)

    # ------------------------------------------------------------------ b (hook)
    def ask_closed(self, d: str, a: str, ask: int) -> bool:
        """Whether a settled its ask to d with us already (see swarm/flow/resync.py)."""
        return False

    def gave(self, d: str, h: str, a: str, ask: int, rate: float) -> None:
        """We (as b) moved `rate` of a's flow over to our mate d for a's ask (see resync.py)."""

    # ------------------------------------------------------------------ d
    def start_exchange(self, a: str, msg: Offer) -> bool:
        """a asks to trade its flow on a->b for one of our in-flows c->d (d = us), for any b among
        the hops it offers: pick the (b, c) that gains most, hold c's flow aside and ask b.
        False: nothing to trade (reject)."""
        h = msg.holder
        if msg.swap_from is None:
            return False
        if msg.corridor_olds:  # a corridor step: a hand-over with a planned next hop, no trade
            return self.start_hand_over(a, msg)
        rotation = msg.rotate_hop is not None  # (only the trade it was judged for: rotations.py)
        planned = msg.layer_partner  # a layer plan's swap: with this partner, not judged alone
        if planned is not None and msg.label + 1 < self.label(h):
            return False  # (a partner with nothing movable is refused below: no partners)
        if msg.label + 1 < self.label(h):  # (a replaces c as our sender: our label must not drop)
            return not rotation and IDLE_HAND_OVERS and self.supply(h) <= EPS and self.start_hand_over(a, msg)
        if msg.room_bound is not None:  # a make-room chain: a hand-over only (swarm/flow/room_chains.py)
            return self.start_hand_over(a, msg)
        single = SwapOption(msg.swap_from, msg.rate, msg.swap_worst or 0.0, msg.swap_gen)
        options = msg.swap_options or (single,)
        cost, me = self.env.cost, self.id
        movable, holders = self.movable, self.holders
        partners = [c for c in self.inflow[h] if c != a and c not in holders and movable(h, c) > EPS]
        if planned is not None:
            partners = [c for c in partners if c == planned]
        if not partners:
            return planned is None and not rotation and self.start_hand_over(a, msg)
        # Routes so far: a's from its bid, c's from its path news; routes onwards: b's as a heard it,
        # ours from our next hops' path news. Unknown parts count as zero.
        try:
            ad = cost(a, me)
            up_a = (msg.bid - ad) if msg.bid is not None else 0.0
            ups = [(c, cost(c, me), self.arrival_via(h, c)) for c in partners]
        except Exception:  # noqa: BLE001 - a or a partner left the instance: nothing to trade
            return False
        worst_d = self.fresh_worst(h) or 0.0
        sends_here = self.inflow[h].get(a, 0.0) > EPS  # a -> d carries flow already: its paths exist
        room_a = self.in_room(a)
        best: tuple[float, str, SwapOption, float] | None = None
        price = trade_price(self.link_limits)
        for option in options:
            b, worst_b = option.hop, option.worst
            if b == me or not self.mate_known(b):
                continue  # (a's word on its hops can be stale: b may have left meanwhile)
            try:
                ab = cost(a, b)
                cbs = [cost(c, b) for c, _, _ in ups]
            except Exception:  # noqa: BLE001 - b left the instance: nothing to trade there
                continue
            for (c, cd, arrival_c), cb in zip(ups, cbs):
                delta = ad - ab + cb - cd
                up_c = arrival_c - cd
                partner = movable(h, c)
                moved = min(option.rate, msg.rate, partner, room_a)
                paths = (up_a + ab + worst_b, up_c + cd + worst_d, up_a + ad + worst_d, up_c + cb + worst_b)
                keeps_ab, keeps_cd = option.rate > moved + EPS, partner > moved + EPS
                if planned is not None:  # the layer plan was judged as a whole (layer_plans.py)
                    up, pays = 0.0, True
                elif msg.plan_taker is not None:  # an onward swap: judged with the hand-over after it
                    up = plan_rise(msg, paths, worst_d, keeps_ab, keeps_cd, cost, me)
                    pays = up < -GAIN_S
                elif rotation:  # judged with the trade after it (swarm/flow/rotations.py)
                    up = rotate_rise(msg, paths, c, arrival_c - cd, worst_b, moved, keeps_ab, keeps_cd, cost)
                    pays = up < -GAIN_S
                else:
                    up = rise(paths, sends_here, keeps_ab=keeps_ab, keeps_cd=keeps_cd)
                    # a trade pays when the four edges cost less and the most expensive path through
                    # them gets no dearer, or when that path gets cheaper by more than the edges get
                    # dearer (weighted by WORST_PATH_PRICE: GWTF's objective is the worst path)
                    pays = (delta < -GAIN_S and up <= EPS) or (
                        up < -GAIN_S and delta <= -edge_price(msg, price) * up
                    )
                if pays and (best is None or delta + up < best[0]):
                    best = (delta + up, c, option, moved)
        if best is None:
            if msg.plan_taker is not None or rotation or planned is not None:
                return False
            return self.start_hand_over(a, msg) or self.ask_rotations(a, msg, up_a, ups)
        _, c, option, rate = best
        b = option.hop
        if rate <= EPS:
            return False
        self._held[(h, c)] = self._held.get((h, c), 0.0) + rate
        eid = self._new_id()
        gen = self._gen.get(c, 0)
        self._pending[eid] = _Pending(a, msg, c, rate, b, partner_gen=gen)
        self.send(b, Exchange(h, rate, eid, a, c, ask=msg.offer_id, partner_gen=gen, sender_gen=option.gen))
        self.env.set_timer(self.id, ANSWER_WAIT * self.env.retry_s, f"exchange:{eid}")
        return True

    def ask_rotations(self, a: str, msg: Offer, up_a: float, ups: list[tuple[str, float, float]]) -> bool:
        """No trade pays for a's worst-path ask: ask our senders for rotations (swarm/flow/rotations.py).
        Returns False: a's ask is refused all the same."""
        return False

    def ask_onward(self, msg: ExchangeDone) -> bool:
        """b dropped our hand-over's hand-off to z: ask z what it took over (trade notes)."""
        return False

    def settle_check(self, eid: int, rate: float) -> None:
        """Settle an exchange whose b we asked c about (swarm/flow/trade_notes.py)."""

    def b_said(self, eid: int, moved: float) -> None:
        """b's own answer to an exchange we asked c about (kept in case c leaves first)."""

    def checking(self, eid: int) -> bool:
        """Whether we asked c about exchange `eid` (its b left): it waits for c, not for b."""
        return False

    def exchange_applied(self, eid: int, p: _Pending, moved: float) -> None:
        """We (as d) took `moved` of p.partner's flow off on b's word (see swarm/flow/trade_notes.py)."""

    def start_hand_over(self, a: str, msg: Offer) -> bool:
        """No trade pays: hand a's flow over from b to us instead (swarm/flow/handover.py)."""
        return False

    def finish_hand_over(
        self,
        h: str,
        p: _Pending,
        moved: float,
        onward: str | None,
        late: bool,
        waited: bool = False,
        onward_gen: int = -1,
    ) -> None:
        """Settle our side of a hand-over b answered (or gave up on); see swarm/flow/handover.py."""

    def expire_exchange(self, eid: int) -> None:
        """b has not answered within ANSWER_WAIT (slow, or gone and not known to be yet): a hears
        that nothing moved so far (`Reply.waiting`), so that it is not kept waiting.

        The trade stays open: c's flow stays held aside (for a hand-over, our capacity and a's link
        stay reserved), and b's answer, when it comes, is applied and told to a with `Moved`. b
        answers (we resend the ask until b acknowledges it, b resends its answer until we do) or
        leaves (`mate_gone`, see swarm/flow/trade_notes.py). Releasing the hold here let c cancel
        that flow, or us return it, before b's late trade moved it once more: with every answer of
        30% of the exchanges delayed past the wait, 19 of 40 random swarms ended with edges out of
        step, and 9 of 60 with the asks delayed instead (0 now).
        """
        p = self._pending.get(eid)
        if p is None or p.answered or self.checking(eid):
            return
        if not self.mate_known(p.mate):  # b left and nobody told us (the environment no longer has it)
            self.give_up(eid)
            return
        p.answered = True
        if p.initiator in self.prev:
            self.send(p.initiator, Reply(p.offer.offer_id, p.offer.holder, 0.0, self.state(), waiting=True))

    def give_up(self, eid: int) -> None:
        """Stop waiting for b: it left with our hand-over unanswered, or it is no longer a peer of
        our stage that the environment knows. c's flow and our reservations are released and a
        hears that nothing moved. Should b's answer come all the same, it is applied as a late
        answer; for a hand-over whose b left, z tells us what it took over
        (swarm/flow/trade_notes.py)."""
        p = self._pending.pop(eid, None)
        if p is None:
            return
        self.stop_resending(p.mate)
        self._finish(p.offer.holder, p, 0.0, waited=True)
        self._expired[eid] = p
        while len(self._expired) > EXPIRED_KEPT:
            del self._expired[next(iter(self._expired))]

    def on_exchange_done(self, src: str, msg: ExchangeDone) -> None:
        """b moved `moved` of a's flow to us and took as much of c's: settle our side, answer a."""
        self.observe(msg.state)
        if self.checking(msg.exchange_id):
            # we asked c what b moved (b was thought gone): c's answer settles c -> d, since c
            # ignores b's `Moved` once it has answered (swarm/flow/trade_notes.py); b moving
            # nothing sent c nothing, so then c's answer will be 0 and we settle now
            if msg.moved <= EPS:
                self.settle_check(msg.exchange_id, 0.0)
            else:
                self.b_said(msg.exchange_id, msg.moved)
            return
        if self.ask_onward(msg):
            return
        p = self._pending.pop(msg.exchange_id, None)
        if p is not None:
            moved = min(max(msg.moved, 0.0), p.rate)
            self._finish(msg.holder, p, moved, msg.onward, onward_gen=msg.onward_gen)
            if p.partner and moved > EPS:
                self.exchange_applied(msg.exchange_id, p, moved)
            return
        p = self._expired.pop(msg.exchange_id, None)  # one we gave up on (`give_up`)
        moved = min(max(msg.moved, 0.0), p.rate) if p is not None else 0.0
        if p is None or moved <= EPS:
            return
        if not p.partner:  # b did move the flows after all, so our side follows
            self.finish_hand_over(p.offer.holder, p, moved, msg.onward, late=True, onward_gen=msg.onward_gen)
            return
        self.late_exchange(msg.exchange_id, p, moved)

    def late_exchange(self, eid: int, p: _Pending, moved: float) -> None:
        """b moved `moved` of an exchange we gave up on (`give_up`): settle c -> d and a -> d, and
        tell a (which heard that nothing moved) with `Moved`."""
        h = p.offer.holder
        if self._partner_flow(h, p):
            self.inflow[h][p.partner] = max(0.0, self.inflow[h][p.partner] - moved)
            self.exchange_applied(eid, p, moved)
        if self.initiator_here(p):
            self.inflow[h][p.initiator] = self.inflow[h].get(p.initiator, 0.0) + moved
            self.send(p.initiator, Moved(h, moved, p.mate, self.state(), ask=p.offer.offer_id))
            self._return_link_overflow(p.initiator, h)

    def _return_link_overflow(self, u: str, h: str) -> None:
        """An answer told as `Moved` may bring more over u's link than it now carries (the room stays
        reserved while we wait, but not after `give_up`, and the link's capacity may change). Refusing
        the answer would leave b and us disagreeing, so we take it and hand the overflow back to u,
        which pushes it elsewhere or returns it (`Return` commutes with the `Moved` sent just before)."""
        if not self.link_limits:
            return
        carried = sum(self.inflow[g].get(u, 0.0) for g in self.holders)
        rate = min(carried - self.edge_cap(u, self.id), self.movable(h, u))
        if rate > EPS:
            self.inflow[h][u] -= rate
            self.send(u, Return(h, rate, self.state()))

    def _finish(
        self,
        h: str,
        p: _Pending,
        moved: float,
        onward: str | None = None,
        waited: bool = False,
        onward_gen: int = -1,
    ) -> None:
        if not p.partner:  # a hand-over (no partner in-flow was held)
            self.finish_hand_over(h, p, moved, onward, late=False, waited=waited, onward_gen=onward_gen)
            return
        key = (h, p.partner)
        self._held[key] = self._held.get(key, 0.0) - p.rate
        if self._held[key] <= EPS:
            del self._held[key]
        if moved > EPS and self._partner_flow(h, p):
            self.inflow[h][p.partner] = max(0.0, self.inflow[h][p.partner] - moved)
        if not self.initiator_here(p):
            return
        if moved > EPS:
            self.inflow[h][p.initiator] = self.inflow[h].get(p.initiator, 0.0) + moved
            if p.offer.bid is not None:
                self.bids[h][p.initiator] = p.offer.bid
        self.relabel()
        if p.answered:  # a heard "nothing so far" when we stopped waiting: the trade goes as `Moved`
            if moved > EPS:
                self.send(p.initiator, Moved(h, moved, p.mate, self.state(), ask=p.offer.offer_id))
                self._return_link_overflow(p.initiator, h)
            return
        state = self.state()
        reply = Reply(p.offer.offer_id, h, moved, state, exchanged=moved, swapped=p.mate, waiting=waited)
        self.send(p.initiator, reply)

    def _partner_flow(self, h: str, p: _Pending) -> bool:
        """Whether c's flow that b took off c -> d is still counted here: c is our neighbour and
        neither of us wrote the other off since we asked b (that dropped the edge on both sides)."""
        return p.partner in self.inflow[h] and self._gen.get(p.partner, 0) == p.partner_gen

    def initiator_here(self, p: _Pending) -> bool:
        """Whether a's flow that b moves to us has a sender: a is our neighbour and did not write us
        off meanwhile (then a settles a -> b with b, `Resync`, and the flow is a's to push again)."""
        return p.initiator in self.prev and not p.dropped

    def drop_initiator(self, a: str) -> None:
        """a wrote us off (see `Node._same_generation`): trades it asked us for no longer bring us
        its flow, whatever b answers."""
        for p in (*self._pending.values(), *self._expired.values()):
            if p.initiator == a:
                p.dropped = True

    def exchange_parties(self) -> set[str]:
        """The peers of the exchanges we (as d) are waiting on: us, the initiators, mates, partners."""
        parties: set[str] = set()
        for p in self._pending.values():
            parties |= {self.id, p.initiator, p.mate, p.partner} - {""}
        return parties

    # ------------------------------------------------------------------ b
    def on_exchange(self, src: str, msg: Exchange) -> None:
        """d asks us to move a's flow to d and take c's instead: apply what we still have of a's."""
        h, a, c = msg.holder, msg.sender, msg.partner
        moved = 0.0
        # c replaces a as a sender: our label must not drop (news that would ripple through the swarm)
        keeps = self.view_label(c, h) + 1 >= self.label(h) and not self.ask_closed(src, a, msg.ask)
        keeps = keeps and self.same_edge(a, msg.sender_gen)  # (see `Exchange.sender_gen`)
        if h in self.inflow and a in self.prev and c in self.prev and a != c and keeps:
            moved = min(msg.rate, self.movable(h, a), self.in_room(c))
        if moved > EPS:
            self.inflow[h][a] -= moved
            self.inflow[h][c] = self.inflow[h].get(c, 0.0) + moved
            self.bids[h].pop(c, None)
            state = self.state()
            self.send(c, Moved(h, moved, src, state, exchange=msg.exchange_id, old_gen=msg.partner_gen))
            self.gave(src, h, a, msg.ask, moved)
        else:
            moved = 0.0
        self.send(src, ExchangeDone(msg.exchange_id, h, moved, self.state()))


__all__ = ["ANSWER_WAIT", "GAIN_S", "Exchanger"]
