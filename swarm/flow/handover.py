"""Hand-overs: a stage mate with spare capacity takes over part of a peer's flow, and the flow keeps
its next hop.

At the maximum flow the bottleneck stage is full, so no route to the sink has spare capacity and no
improvement move is admissible; exchanges only trade two in-flows (cycles of four edges). A dear
sliver of flow on the worst path therefore stays put: on 10 x 50 (docs/routing.md) the worst path runs
through 0.069 microbatches/s on s3p6 -> s4p0 -> s5p1 -> s6p1 while s4p8 and s5p0 have room.

A hand-over moves a's flow u -> b -> z to b's stage mate d: a -> d -> z. z's in-flow only changes
sender, so only b's and d's throughputs change and nothing ripples past the four peers. Chained,
hand-overs make the longer cycles (two remove the sliver above). Offline, greedy hand-overs with
exact path costs took docs/routing.md's 10 x 50 from max path / opt 1.108 to 1.036 and 4 x 120 from
1.155 to 1.082.

Roles: a asks d for an exchange (`Offer.swap_from` = b); when no trade pays and d has spare
capacity, d reserves it and asks b (`HandOver`). b picks the next hop z for which the most
expensive path through the new edges a -> d -> z is cheapest, by the exchange rule (the edges cost
less and that path gets no dearer, or the path gets cheaper by more than the edges get dearer);
it hands the flow over, tells z (`HandedOver`) and answers d (`ExchangeDone(onward=z)`); d answers
a (`Reply(exchanged=..., swapped=b)`). With limited links there are no hand-overs (b cannot see
the room on d's links).

At the last stage z is the holder's sink, which takes its own microbatches from any last-stage
peer: b lets a's flow go at once (its deficit then cancels b -> sink) and d pushes what it takes
over to the sink as excess, so no `HandOff` is needed and the sink plays no part. Stage peers make
no direct moves any more (swarm/flow/peer.py), so this is how a dear last hop gets cheaper.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from swarm.flow.ask_budget import hand_over_budget
from swarm.flow.exchange import ANSWER_WAIT, GAIN_S, Exchanger, _Pending
from swarm.flow.messages import ExchangeDone, HandOff, HandOffDone, HandOver, Moved, Offer, Reply
from swarm.flow.news import EPS
from swarm.flow.trade_rules import WORST_PATH_PRICE

_Target = tuple[str, float, float, float, float]  # (z, rate to z, b -> z, d -> z, z's worst path on)


@dataclass
class _HandOff:
    """A hand-over this peer (as b) asked its next hop z for: a's flow held aside meanwhile."""

    mate: str  # d
    exchange_id: int  # d's id of it
    holder: str
    sender: str  # a
    onward: str  # z
    rate: float
    ask: int  # a's offer id of the ask
    orphan: bool = False  # d left meanwhile: z's answer still settles a's flow, d hears it once


# Hand-overs a peer (as d) may start: `ask_budget.hand_over_budget`. Before hand-overs counted only
# the paths they make new, on three sweeps (`swarm bench flow-sweep --instances 30 --seed 0/1/2`): 4
# gave a max path 1.023x the min-cost flow's (mean; 55 of 90 within 5%), 16 gave 1.019x (56) and the
# mean path within 10% on 76 (71), at 300 messages per peer (260); unbounded 1.016x (58), 78, 370,
# but it took 1,000 x 16 seed 2 from 50 s to 87 s (1,062 messages per peer instead of 765).
# Hand-overs at the last stage too (`_hand_over_to_sink`). On the whole-range sweep (4-16 x 3-30,
# seed 0, two message timings) max path within 5% on 19 / 15 -> 19 / 16 of 30, mean path within 10%
# on 23 / 25 -> 24 / 26, messages per peer 569 / 570 -> 574 / 570 (docs/routing.md: "sink hand-overs").
LAST_STAGE_HAND_OVERS = True
# What a hand-over of a holder's own flow must save (GAIN_S for others). A holder asks only on its
# worst-path walks, so few such hand-overs happen; a small one can put the flow on a stage-0 peer
# from which an exchange then pays (swarm/flow/holder_hand_overs.py).
HOLDER_GAIN_S = 0.001


class HandOvers(Exchanger):
    """The hand-over roles of a stage peer (d: takes the flow over, b: hands it over, z: its next
    hop); `PeerAgent` supplies the in-flows, labels and capacity."""

    capacity: float

    def init_hand_overs(self) -> None:
        self.reserved = 0.0  # capacity held for hand-overs we (as d) are waiting on
        self.hand_overs = -1  # hand-overs we (as d) may still start (set at the first ask)
        self._handing: dict[int, _HandOff] = {}  # hand-offs we (as b) wait on z for

    def reset_exchanges(self) -> None:
        super().reset_exchanges()
        self.hand_overs = -1

    # ------------------------------------------------------------------ d
    def start_hand_over(self, a: str, msg: Offer) -> bool:
        """a asked us for a trade that nobody pays for: with spare capacity, reserve it and ask b
        (the hop a ranked first for us) to hand a's flow over. False: reject the ask."""
        h = msg.holder
        spare = self.spare()
        if self.hand_overs < 0:
            self.hand_overs = hand_over_budget(len(self.next))
        planned = msg.corridor_olds[0] if msg.corridor_olds else None  # a corridor step's next hop
        room = msg.room_bound is not None and spare > EPS and self.take_room()  # (room_chains.py)
        budget = self.hand_overs > 0 or planned is not None or room  # (the origin's probes bound those)
        if self.link_limits or spare <= EPS or not msg.swap_options or not budget:
            return False
        if self.last and not LAST_STAGE_HAND_OVERS:
            return False
        option = msg.swap_options[0]  # the hop a ranked first for us
        rate = min(option.rate, msg.rate, spare)
        b = option.hop
        if b == self.id or rate <= EPS or not self.mate_known(b):
            return False  # (a's word on its hops can be stale: b may have left meanwhile)
        up_a = (msg.bid - self.env.cost(a, self.id)) if msg.bid is not None else 0.0
        self.reserved += rate
        self.hand_overs -= planned is None and not room
        eid = self._new_id()
        self._pending[eid] = _Pending(a, msg, "", rate, b)
        inbound, onwards = self.fresh_arrival(h), self.fresh_worst(h) or 0.0
        label, gen = self.label(h), option.gen
        sends_here = self.inflow[h].get(a, 0.0) > EPS
        uses = tuple(sorted(v for v, r in self.out[h].items() if r > EPS))
        ask = HandOver(
            h,
            rate,
            eid,
            a,
            up_a,
            label,
            inbound,
            onwards,
            msg.offer_id,
            gen,
            sends_here,
            uses,
            planned,
            msg.critical,
            msg.room_bound,
            msg.room_rise,
        )
        self.send(b, ask)
        self.env.set_timer(self.id, ANSWER_WAIT * self.env.retry_s, f"exchange:{eid}")
        return True

    def take_room(self) -> bool:
        """Whether we take a make-room chain's hand-over on its own budget (swarm/flow/room_chains.py)."""
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
        """b handed `moved` of a's flow over to us, to run on to `onward` (or nothing: `moved` 0).
        `late`: we gave up on b (it left) and released the reservation; z told us instead.
        `onward_gen`: z's edge generation with us when it took the flow over; if one of us wrote the
        other off since, the edge was dropped on both sides with that flow (with false departures
        and 5% loss, 1 of 160 runs ended out of step by a hand-over's rate without this check)."""
        if not late:
            self.reserved = max(0.0, self.reserved - p.rate)
        moved = max(moved, 0.0)
        same_edge = self.same_edge(onward or "", onward_gen)
        to_hop = onward is not None and onward in self.next and onward not in self.holders  # (a sink: excess)
        if moved > EPS and to_hop and same_edge:
            self.out[h][onward] = self.out[h].get(onward, 0.0) + moved
            self.flows_moved()
            self._worst_cache.clear()
        # (if z left meanwhile, b let go of a's flow all the same: it is ours, to push on elsewhere)
        if moved > EPS and self.initiator_here(p):
            self.inflow[h][p.initiator] = self.inflow[h].get(p.initiator, 0.0) + moved
            if p.offer.bid is not None:
                self.bids[h][p.initiator] = p.offer.bid
        if moved > EPS and to_hop and same_edge and p.offer.corridor and p.offer.corridor_olds[0] == onward:
            self.next_corridor_step(h, p.offer, moved)
        if not self.initiator_here(p):
            return  # a left: the flow we now send on has no sender, cancel_deficit withdraws it
        self.relabel()
        if late or p.answered:  # a heard "nothing so far" already: the hand-over goes as `Moved`
            if moved > EPS:
                self.send(p.initiator, Moved(h, moved, p.mate, self.state(), ask=p.offer.offer_id))
            return
        state = self.state()
        reply = Reply(p.offer.offer_id, h, moved, state, exchanged=moved, swapped=p.mate, waiting=waited)
        self.send(p.initiator, reply)

    # ------------------------------------------------------------------ b
    def on_hand_over(self, src: str, msg: HandOver) -> None:
        """d offers to carry some of a's flow through us on to one of our next hops z: if that pays
        for some z, hold a's flow aside and ask z to take it from d instead (only z moves the edge
        b -> z); otherwise answer d that nothing moved."""
        h, a, d = msg.holder, msg.sender, src
        rate, z = 0.0, None
        open_ask = not self.ask_closed(d, a, msg.ask) and self.same_edge(a, msg.sender_gen)
        if h in self.inflow and a in self.prev and not self.link_limits and open_ask:
            rate = min(msg.rate, self.movable(h, a))
            judge = self._hand_over_hop if msg.onward is None else self._planned_hop
            judge = self._room_hop if msg.room_bound is not None and msg.onward is None else judge
            z = judge(h, a, d, msg, rate) if rate > EPS else None
        if z is None:
            self.send(d, ExchangeDone(msg.exchange_id, h, 0.0, self.state()))
            if rate > EPS:
                self.hand_over_refused(h, a, d, msg, rate)
            return
        rate = min(rate, self.out[h][z])
        if z in self.holders:
            self._hand_over_to_sink(h, a, d, rate, msg)
            return
        self._held[(h, a)] = self._held.get((h, a), 0.0) + rate
        hid = self._new_id()
        self._handing[hid] = _HandOff(d, msg.exchange_id, h, a, z, rate, msg.ask)
        # (no timer: z answers or leaves, see drop_hand_offs)
        self.send(z, HandOff(h, rate, hid, d, exchange=msg.exchange_id))

    def hand_over_refused(self, h: str, a: str, d: str, msg: HandOver, rate: float) -> None:
        """No next hop made d's hand-over pay (see swarm/flow/onward_swaps.py)."""

    def _hand_over_to_sink(self, h: str, a: str, d: str, rate: float, msg: HandOver) -> None:
        """We are the last stage: z is the holder's sink, which takes everything of its own from
        any last-stage peer. So nothing waits on it: we let a's flow go now (the deficit cancels our
        flow to the sink) and d, which takes a's flow, pushes it to the sink as its own excess."""
        self.inflow[h][a] -= rate
        self.flows_moved()
        self._worst_cache.clear()
        self.gave(d, h, a, msg.ask, rate)
        self.send(d, ExchangeDone(msg.exchange_id, h, rate, self.state(), h))

    def _planned_hop(self, h: str, a: str, d: str, msg: HandOver, rate: float) -> str | None:
        """A corridor step (swarm/flow/corridor.py): its planned next hop z, if we still send
        there and d may replace us as z's sender (z's label must not drop)."""
        z = msg.onward
        if z is None or self.out[h].get(z, 0.0) <= EPS:
            return None
        if self.last:
            return z if z == h else None
        if z in self.holders or z not in self.next or msg.label + 1 < self.view_label(z, h):
            return None
        return z

    def next_corridor_step(self, h: str, offer: Offer, moved: float) -> None:
        """A corridor step we took over is done: ask the plan's next taker (swarm/flow/corridor.py)."""

    def _hand_over_targets(self, h: str, d: str, msg: HandOver) -> Iterator[_Target]:
        """Our next hops z that d may send a's flow on to: (z, our rate to z, b -> z, d -> z, z's
        worst path on). One scan for both judges (the plain hand-over and the make-room chain's)."""
        cost, me = self.env.cost, self.id
        for z, r in self.out[h].items():
            sink = self.last and z == h  # (the sink's label never changes)
            if r <= EPS or (z in self.holders and not sink) or z not in self.next:
                continue
            if not sink and msg.label + 1 < self.view_label(z, h):
                continue  # d replaces us as z's sender: z's label must not drop
            try:
                bz, dz = cost(me, z), cost(d, z)
            except Exception:  # noqa: BLE001 - z left the instance
                continue
            yield z, r, bz, dz, 0.0 if sink else self.worst_of(h, z)

    def _hand_over_hop(self, h: str, a: str, d: str, msg: HandOver, rate: float) -> str | None:
        """The next hop z whose flow a -> us -> z pays most as a -> d -> z (None: none pays).

        Paths are counted only over edges that carry flow before and after (as exchanges count
        them, `trade_rules.rise`): a -> d and d -> z may carry flow already, and a partial hand-over
        leaves a -> us -> z in use."""
        try:
            ab, ad = self.env.cost(a, self.id), self.env.cost(a, d)
        except Exception:  # noqa: BLE001 - a or d left the instance
            return None
        up_a = msg.arrival
        gain = HOLDER_GAIN_S if a in self.holders else GAIN_S  # (see holder_hand_overs.py)
        best: tuple[float, str] | None = None
        for z, r, bz, dz, onwards in self._hand_over_targets(h, d, msg):
            via_b = up_a + ab + bz + onwards
            via_d = up_a + ad + max(msg.onwards, dz + onwards)  # a's paths through d
            into_z = max(msg.inbound, up_a + ad) + dz + onwards  # paths over the edge d -> z
            before = max(
                via_b,
                up_a + ad + msg.onwards if msg.sends_here else 0.0,
                msg.inbound + dz + onwards if z in msg.uses else 0.0,
            )
            moved = min(rate, r)
            keeps = self.movable(h, a) > moved + EPS and r > moved + EPS  # a -> us -> z stays in use
            delta, rise = ad + dz - ab - bz, max(via_d, into_z, via_b if keeps else 0.0) - before
            pays = (delta < -gain and rise <= EPS) or (rise < -gain and delta <= -WORST_PATH_PRICE * rise)
            if pays and (best is None or delta + rise < best[0]):
                best = (delta + rise, z)
        return best[1] if best is not None else None

    def _room_hop(self, h: str, a: str, d: str, msg: HandOver, rate: float) -> str | None:
        """A make-room chain's hand-over (swarm/flow/room_chains.py): the next hop z for which the
        most expensive path through the new edges a -> d -> z is cheapest, if under the chain's bound
        and the edges get dearer by at most `room_rise` (it need not pay for h: it makes room on us
        for another holder's flow, whose path gets cheaper by as much)."""
        bound = msg.room_bound if msg.room_bound is not None else 0.0
        try:
            ab, ad = self.env.cost(a, self.id), self.env.cost(a, d)
        except Exception:  # noqa: BLE001 - a or d left the instance
            return None
        up_a = msg.arrival
        best: tuple[float, str] | None = None
        for z, _, bz, dz, onwards in self._hand_over_targets(h, d, msg):
            if ad + dz - ab - bz > msg.room_rise:
                continue  # (the edges would get dearer than the other holder's path gets cheaper)
            worst = max(
                up_a + ad + max(msg.onwards, dz + onwards), max(msg.inbound, up_a + ad) + dz + onwards
            )
            if worst < bound - EPS and (best is None or worst < best[0]):
                best = (worst, z)
        return best[1] if best is not None else None

    def on_hand_off_done(self, src: str, msg: HandOffDone) -> None:
        """z moved `moved` of our flow to d: a's flow goes with it, and d hears where it runs."""
        self.observe(msg.state)
        p = self._handing.pop(msg.handoff_id, None)
        if p is None:
            return
        self._release(p)
        moved = min(max(msg.moved, 0.0), p.rate)
        h = p.holder
        if moved > EPS:
            self.inflow[h][p.sender] = max(0.0, self.inflow[h].get(p.sender, 0.0) - moved)
            self.out[h][p.onward] = self.out[h].get(p.onward, 0.0) - moved
            self.flows_moved()
            self._worst_cache.clear()
            self.gave(p.mate, h, p.sender, p.ask, moved)
        onward = p.onward if moved > EPS else None  # (z named with nothing moved: z did not answer)
        done = ExchangeDone(p.exchange_id, h, moved, self.state(), onward, onward_gen=msg.sender_gen)
        self._answer_mate(p, done)

    def _release(self, p: _HandOff) -> None:
        key = (p.holder, p.sender)
        self._held[key] = self._held.get(key, 0.0) - p.rate
        if self._held[key] <= EPS:
            del self._held[key]

    def drop_hand_offs(self, node: str) -> None:
        """A peer left, or wrote us off: hand-offs waiting on it (as z) end, and nothing of ours
        moved. d hears so, with z named: z may have taken the flow over onto d -> z all the same (a
        live z that had not yet seen our write-off), and d asks z (swarm/flow/trade_notes.py)."""
        for hid in [k for k, p in self._handing.items() if p.onward == node]:
            p = self._handing.pop(hid)
            self._release(p)
            done = ExchangeDone(p.exchange_id, p.holder, 0.0, self.state(), onward=node)
            self._answer_mate(p, done)

    def orphan_hand_offs(self, d: str) -> None:
        """Our stage mate d left while we (as b) wait on z for hand-overs it asked: z's answer still
        settles a's flow (and a hears of it, see `gave`), but an answer to d would be retransmitted
        for ever (found with answers delayed past the wait and peers killed: 2 of 60 runs never
        went quiet). So d hears it once, then it is parked until d is a known mate again: a d that
        only lost its record is still waiting for it (a, told twice, moves the old edge once:
        `Resyncs.on_reply`)."""
        for p in self._handing.values():
            if p.mate == d:
                p.orphan = True

    def _answer_mate(self, p: _HandOff, done: ExchangeDone) -> None:
        """Answer d. An orphan's answer goes once and is parked (`Node.stop_resending`): d may
        think us gone as well and refuse that copy, and then it would never learn that its flow
        runs on d -> z, which z counts (false departures both ways with 5% loss: 1 of 600 runs
        out of step); parked, it goes again once d is a known mate of our stage again."""
        self.send(p.mate, done)
        if p.orphan:
            self.stop_resending(p.mate, park=True)

    def hand_off_settled(self, d: str, eid: int) -> bool:
        """Whether we (as z) already told d what we took over for its hand-over `eid`."""
        return False

    def took_over(self, b: str, d: str, eid: int, h: str, moved: float) -> None:
        """We (as z) now count `moved` of b's flow to us as d's (see swarm/flow/trade_notes.py)."""

    def hand_off_parties(self) -> set[str]:
        """The peers of hand-offs we (as b) are waiting on: us, d, a and z."""
        parties: set[str] = set()
        for p in self._handing.values():
            parties |= {self.id, p.mate, p.sender, p.onward}
        return parties

    # ------------------------------------------------------------------ z
    def on_hand_off(self, src: str, msg: HandOff) -> None:
        """Our sender b hands some of its flow to us over to its stage mate d."""
        h, d = msg.holder, msg.sender
        moved = 0.0
        if h in self.inflow and d in self.prev and d != src and not self.hand_off_settled(d, msg.exchange):
            moved = min(msg.rate, self.movable(h, src))
        if moved > EPS:
            self.inflow[h][src] -= moved
            self.inflow[h][d] = self.inflow[h].get(d, 0.0) + moved
            self.bids[h].pop(d, None)
            self.took_over(src, d, msg.exchange, h, moved)
        else:
            moved = 0.0
        self.send(src, HandOffDone(msg.handoff_id, h, moved, self.state(), sender_gen=self._gen.get(d, 0)))


__all__ = ["HandOvers"]
