"""Trade notes: a b that leaves half-way through an exchange or a hand-over leaves no edge out of step.

Exchange (swarm/flow/exchange.py): b, the receiving end of c -> b and a -> b, takes c's flow off
c -> d and tells both ends, c by `Moved` and d by `ExchangeDone`. If b dies after sending them and
only one arrives, c and d disagree on c -> d by the traded rate, for good. Hand-over
(swarm/flow/handover.py): z, the receiving end of b -> z, counts b's flow as d's from then on and
tells b, which tells d; if b dies in between, d and z disagree on d -> z.

So the ends remember the trades they applied on b's word for a while, and settle them when b
leaves: c learns it as b's upstream, z as b's downstream (`forget`), d as b's stage mate
(`mate_gone`; live peers see their mates' DHT records too).
- d tells c each trade d applied (`Traded`); c applies the ones it had not heard of.
- c tells d each trade c applied; d applies them if it still waits on b (it holds c's flow aside
  until then, so the flow cannot have gone elsewhere meanwhile).
- d asks c about each exchange it still waits on (`TradeCheck`) and keeps holding c's flow until c
  answers what it applied (0 when nothing); c's answer settles the trade at d, b's own answer no
  longer counts there. A b that is still c's live next hop may only have lost its record in d's
  view: c answers once b's `Moved` came, or b left c's view too. A `Moved` that comes after c
  answered is refused: c cancels on c -> b what it did not count.
- z tells d each hand-over z applied; d applies the ones it has not settled (as a late answer).
b's answers leave at the same moment, so only trades of the last few retry periods can be half
done. Without churn nothing is sent.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.flow.exchange import ANSWER_WAIT, _Pending
from swarm.flow.messages import (
    Body,
    Cancel,
    ExchangeDone,
    Moved,
    NeighbourGone,
    NeighbourJoined,
    TradeCheck,
    Traded,
)
from swarm.flow.news import EPS
from swarm.flow.resync import Resyncs

# Retry periods a trade is remembered at the end that applied it (c and z keep theirs twice as long,
# so that what they applied is still known when d's note of it comes; older, c would answer d's
# `TradeCheck` with 0). b retransmits its answers every retry period until acknowledged, so after a
# few periods both ends have them or b is long gone. 32 periods (RESYNC_KEEP) took the 20% churn of
# docs/routing.md's 8 x 160 and 16 x 160 instances to 1,626 and 337 notes, nearly all told to an end that
# had heard (62 and 5 with 8).
NOTE_KEEP = ANSWER_WAIT
GONE_Z_KEPT = 64  # hand-overs settled while their z was out of view, remembered to ask it again
NOTES_TOLD = 2.0  # windows of notes told when b leaves (see `_prune`)
NOTES_REMEMBERED = 8.0  # windows a note is kept to answer checks


@dataclass
class _Note:
    """A trade applied on the word of `mate` (b): `rate` of `holder`'s flow changed hands."""

    mate: str
    holder: str
    rate: float
    at: float
    other: str  # the other end of the edge it moved: d (at c and z) or c (at d)
    gen: int = -1  # (at z, d) our edge generation with d (c) then: a write-off since dropped the edge


class TradeNotes(Resyncs):
    """Trades remembered at the ends of the edges they moved, settled when their b leaves."""

    def init_trade_notes(self) -> None:
        self._moved_in: dict[tuple[str, int], _Note] = {}  # as c: (d, exchange id) -> trade
        self._taken: dict[tuple[str, int], _Note] = {}  # as z: (d, hand-over id) -> hand-over
        self._traded_out: dict[int, _Note] = {}  # as d: exchange id -> trade applied or settled
        self._checking: dict[int, _Pending] = {}  # as d: exchanges whose b left, waiting for c
        self._deferred: dict[tuple[str, int], tuple[TradeCheck, float]] = {}  # as c: checks of a live b
        self._asking_z: dict[int, str] = {}  # as d: hand-overs whose b dropped its hand-off -> z
        # as d: such hand-overs settled as nothing moved while z was out of our view -> (z, holder,
        # mate, rate); z is asked again if it comes back (`_late_from_z`)
        self._gone_z: dict[int, tuple[str, str, str, float]] = {}
        self._b_said: dict[int, float] = {}  # as d: what b answered for an exchange asked of c

    def dispatch_sender(self, src: str, body: Body) -> bool:
        if isinstance(body, Traded):
            self.observe(body.state)
            if src in self.prev:
                self._heard_from_c(src, body)
            elif src in self.next and body.hand_over and body.exchange_id in self._gone_z:
                self._late_from_z(src, body)
            elif src in self.next and body.hand_over:
                self._heard_from_z(src, body)
            elif src in self.next:
                self._heard_from_d(src, body)
            return True
        if isinstance(body, TradeCheck):
            if src in self.next:
                self._checked_by_d(src, body)
            elif src in self.prev:
                self._checked_as_z(src, body)
            return True
        return super().dispatch_sender(src, body)

    def _window(self) -> float:
        """NOTE_KEEP retry periods, plus what the environment may take to notice a departure
        (`departure_s`: a live peer's record outlives it by up to its TTL; the bus tells at once)."""
        return NOTE_KEEP * self.env.retry_s + getattr(self.env, "departure_s", 0.0)

    def _since(self, periods: float) -> float:
        """Trades newer than this many windows (`_window`)."""
        return self.now - periods * self._window()

    def _prune(self) -> None:
        # c and z tell d only their notes of the last two windows when b leaves, but remember them
        # longer to answer d's `TradeCheck`: a check that came after the note was forgotten was
        # answered 0 for a trade c had applied (with slow trades and false departures, 1 of 100)
        old = self._since(NOTES_REMEMBERED)
        self._moved_in = {k: n for k, n in self._moved_in.items() if n.at >= old}
        self._taken = {k: n for k, n in self._taken.items() if n.at >= old}
        self._traded_out = {k: n for k, n in self._traded_out.items() if n.at >= self._since(1.0)}
        told = self._since(NOTES_TOLD)
        for (d, _), (check, at) in sorted(self._deferred.items()):
            if at < told:  # b never moved it (or d stopped asking): nothing moved
                self._answer_check(d, check)

    def forget_target(self, node: str) -> None:
        """A neighbour left. As c or z: tell d the trades its b (`node`) made us apply. As d: an
        exchange waiting for the answer of c (`node`) ends; c's flow went with c."""
        super().forget_target(node)
        self._prune()
        recent = self._since(NOTES_TOLD)
        for (d, eid), note in sorted(self._moved_in.items()):
            if note.mate == node and d in self.next and note.at >= recent:
                self.send(d, Traded(eid, note.holder, note.rate, node, self.state()))
        for (d, eid), note in sorted(self._taken.items()):
            if note.mate == node and d in self.prev and note.gen == self._gen.get(d, 0) and note.at >= recent:
                traded = Traded(eid, note.holder, note.rate, node, self.state(), True, edge_gen=note.gen)
                self.send(d, traded)
        for eid in sorted(e for e, p in self._checking.items() if p.partner == node):
            self._partner_left(eid)
        for (d, eid), (check, _) in sorted(self._deferred.items()):
            if d == node:
                del self._deferred[(d, eid)]
            elif check.mate == node:  # b's `Moved`, if it ever sent one, went with it
                self._answer_check(d, check)

    # ------------------------------------------------------------------ c
    def on_moved(self, src: str, msg: Moved) -> None:
        if msg.exchange >= 0:
            key = (msg.old, msg.exchange)
            if key in self._moved_in:
                # settled with d already (b was thought gone): nothing more moves here, and b,
                # alive after all, gives back what it took of ours beyond what we counted
                self._refuse_late_move(src, msg, self._moved_in[key].rate)
                return
            self._prune()
            self._moved_in[key] = _Note(src, msg.holder, msg.rate, self.now, msg.old)
        super().on_moved(src, msg)
        deferred = self._deferred.get((msg.old, msg.exchange)) if msg.exchange >= 0 else None
        if deferred is not None:
            self._answer_check(msg.old, deferred[0])

    def _refuse_late_move(self, b: str, msg: Moved, counted: float) -> None:
        """b's `Moved` came after we settled its trade with d at `counted`: b added the whole
        rate to c -> b, so we cancel the rest there (a b we wrote off drops the edge anyway).
        The rest is counted on c -> b first and cancelled like any flow (`Sender.cancel`): b may
        have returned it already, its `Return` overtaking this `Moved`, and an untracked cancel then
        left c -> b below zero at c (false departures with 1-3 holders and 5% loss: 1 of 400)."""
        extra, h = msg.rate - counted, msg.holder
        if b == self._fenced_src:
            return  # (from before one of us wrote the other off: b dropped that flow with the edge)
        if extra <= EPS or h not in self.out:
            return
        if b in self.next:
            self.out[h][b] = self.out[h].get(b, 0.0) + extra
            self.cancel(h, b, extra)
        else:
            self.send(b, Cancel(h, extra, self._new_id()), reliable=False)

    def _heard_from_d(self, d: str, msg: Traded) -> None:
        """d took `rate` of our flow off c -> d on b's word, and b's `Moved` never reached us."""
        self._prune()
        key, h = (d, msg.exchange_id), msg.holder
        if key in self._moved_in or h not in self.out:
            return
        self._moved_in[key] = _Note(msg.mate, h, msg.rate, self.now, d)
        # (else c -> d was dropped on both sides since d applied the trade, this flow with it)
        if d != self._fenced_src and self.same_edge(d, msg.edge_gen):
            self.out[h][d] = self.out[h].get(d, 0.0) - msg.rate
        if msg.mate in self.next:  # (else we wrote b off when it left: the flow is ours to push again)
            self.out[h][msg.mate] = self.out[h].get(msg.mate, 0.0) + msg.rate
        self.flows_moved()
        self._worst_cache.clear()

    def _checked_by_d(self, d: str, msg: TradeCheck) -> None:
        """Answer what b moved of ours off c -> d for d's exchange; from then on that is settled.
        While b is still our live next hop, d may only have lost b's record (b's answers to d are
        then refused until d finds it again): b's `Moved` may still come, so the answer waits for
        it, or for b to leave our view. Answering 0 at once left a -> b out of step whenever b did
        move the flows (d's stage alone thinking b gone: 17 of 60 runs of the false-departure
        harness)."""
        self._prune()
        key = (d, msg.exchange_id)
        if key not in self._moved_in and msg.mate in self.next:
            self._deferred[key] = (msg, self.now)
            return
        self._answer_check(d, msg)

    def _answer_check(self, d: str, msg: TradeCheck) -> None:
        key = (d, msg.exchange_id)
        self._deferred.pop(key, None)
        if key not in self._moved_in:
            self._moved_in[key] = _Note(msg.mate, msg.holder, 0.0, self.now, d)
        self.send(d, Traded(msg.exchange_id, msg.holder, self._moved_in[key].rate, msg.mate, self.state()))

    # ------------------------------------------------------------------ z
    def took_over(self, b: str, d: str, eid: int, h: str, moved: float) -> None:
        if eid >= 0:
            self._prune()
            self._taken[(d, eid)] = _Note(b, h, moved, self.now, d, gen=self._gen.get(d, 0))

    # ------------------------------------------------------------------ d
    def exchange_applied(self, eid: int, p: _Pending, moved: float) -> None:
        self._prune()
        gen = self._gen.get(p.partner, 0)
        self._traded_out[eid] = _Note(p.mate, p.offer.holder, moved, self.now, p.partner, gen=gen)

    def checking(self, eid: int) -> bool:
        return eid in self._checking

    def on_mate_gone(self, node: str) -> bool:
        """Our stage mate b left: tell each partner c what b traded of its flow with us, ask the
        partners of the exchanges still waiting for b, and stop waiting for b's hand-overs."""
        self.mate_left(node)
        self.orphan_hand_offs(node)
        self._prune()
        notes = sorted(self._traded_out.items())
        told = [(e, n) for e, n in notes if n.mate == node and n.other in self.prev]
        for eid, note in told:
            self.send(note.other, Traded(eid, note.holder, note.rate, node, self.state(), edge_gen=note.gen))
        waiting = sorted(e for e, p in self._pending.items() if p.mate == node)
        for eid in waiting:
            p = self._pending[eid]
            if not p.partner:  # a hand-over: z tells us if it took the flow over (a late answer)
                self.give_up(eid)
            elif p.partner in self.prev:
                self._checking[eid] = p
                self.send(p.partner, TradeCheck(eid, p.offer.holder, node))
        return bool(told or waiting)

    def _heard_from_c(self, c: str, msg: Traded) -> None:
        """What b moved of c's flow off c -> d for exchange `exchange_id` (c's note or answer)."""
        eid = msg.exchange_id
        if eid in self._traded_out or c == self._fenced_src:
            return  # (settled, or from before we wrote c off: c -> d was dropped, b settles a's side)
        if eid in self._checking:
            self.settle_check(eid, msg.rate)
            return
        p = self._pending.get(eid) or self._expired.get(eid)
        if p is not None and p.partner == c and p.mate == msg.mate:
            self._checking[eid] = p
            self.settle_check(eid, msg.rate)

    def b_said(self, eid: int, moved: float) -> None:
        self._b_said[eid] = moved

    def _partner_left(self, eid: int) -> None:
        """c left (or we wrote it off) before answering our check: c's side went with it, and b,
        which may be alive (only its record lapsed), settles a's: with what it answered already,
        or later as a late answer (`give_up` keeps the trade for it). Settling as "nothing moved"
        left a -> b out of step when b had moved a's flow (chaos harness: 1 of 100 runs, with a
        cancel and its answer going to and fro for ever)."""
        p = self._checking.pop(eid)
        said = self._b_said.pop(eid, None)
        self.give_up(eid)
        if said is not None and self._expired.pop(eid, None) is not None:
            self.late_exchange(eid, p, min(max(said, 0.0), p.rate))

    def settle_check(self, eid: int, rate: float) -> None:
        """The trade moved what c heard from b: c -> d, a -> d and a's side of a -> b follow it,
        as if b had answered (a b that left was written off by a with a -> b; a keeps its own
        side where it did so since the ask)."""
        p = self._checking.pop(eid)
        self._b_said.pop(eid, None)
        h, c = p.offer.holder, p.partner
        rate = min(max(rate, 0.0), p.rate)
        self._traded_out[eid] = _Note(p.mate, h, rate, self.now, c, gen=self._gen.get(c, 0))
        if self._pending.pop(eid, None) is not None:
            self._finish(h, p, rate)  # (c's flow is no longer held aside)
            return
        self._expired.pop(eid, None)  # (let go when we stopped waiting for b: a heard nothing so far)
        if rate > EPS:
            self.late_exchange(eid, p, rate)

    def ask_onward(self, msg: ExchangeDone) -> bool:
        """b dropped the hand-off of our hand-over (it wrote z off) and answered that nothing
        moved; a live z may have taken the flow over onto d -> z all the same, before it saw b's
        write-off, even after seeing ours. So we keep waiting, and ask z (`TradeCheck`) once it is
        our next hop (again); z's answer settles it, or a window without z (it is gone: the edge
        with it). Without this, 1 of 260 runs of the false-departure harness with loss ended with
        d -> z off by the hand-over's rate."""
        p, z = self._pending.get(msg.exchange_id), msg.onward
        if p is None or p.partner or msg.moved > EPS or z is None:
            return False
        eid = msg.exchange_id
        self._asking_z[eid] = z
        if z in self.next:
            self.send(z, TradeCheck(eid, p.offer.holder, p.mate))
        self.env.set_timer(self.id, self._window(), f"onward:{eid}")
        return True

    def notify(self, event: NeighbourGone | NeighbourJoined, now: float) -> None:
        super().notify(event, now)
        if isinstance(event, NeighbourJoined):  # ask a z found again (see `ask_onward`)
            for eid, z in sorted(self._asking_z.items()):
                p = self._pending.get(eid) or self._expired.get(eid)
                if z == event.node and p is not None:
                    self.send(z, TradeCheck(eid, p.offer.holder, p.mate))
            for eid, (z, h, mate, _) in sorted(self._gone_z.items()):
                if z == event.node:
                    self.send(z, TradeCheck(eid, h, mate))

    def onward_timeout(self, eid: int) -> None:
        """A window passed since we asked z: settle as nothing moved if z is not our next hop."""
        z = self._asking_z.get(eid)
        if z is None:
            return
        if z in self.next:  # (asked: z answers, or leaves our view)
            self.env.set_timer(self.id, self._window(), f"onward:{eid}")
            return
        p = self._pending.get(eid) or self._expired.get(eid)
        if p is not None:
            self._gone_z[eid] = (z, p.offer.holder, p.mate, p.rate)
            while len(self._gone_z) > GONE_Z_KEPT:
                del self._gone_z[next(iter(self._gone_z))]
        self._settle_onward(eid, z, 0.0)

    def _late_from_z(self, z: str, msg: Traded) -> None:
        """z, out of our view when we settled its hand-over as nothing moved, came back and says it
        took `rate` over onto d -> z (it saw b's hand-off before our write-off reached it, or
        after, on the edge's next generation): we count it too, and our deficit withdraws it.
        Without this, 1 of 130 runs of the false-departure harness with loss ended with d -> z off
        by the hand-over's rate (seed 37)."""
        gone = self._gone_z.get(msg.exchange_id)
        if gone is None or gone[0] != z:
            return
        del self._gone_z[msg.exchange_id]
        _, h, _, cap = gone
        if msg.rate > EPS and z in self.next and self.same_edge(z, msg.edge_gen) and h in self.out:
            self.out[h][z] = self.out[h].get(z, 0.0) + min(msg.rate, cap)
            self.flows_moved()
            self._worst_cache.clear()

    def _checked_as_z(self, d: str, msg: TradeCheck) -> None:
        """As z: tell d what we took over for its hand-over (0 if nothing), on the edge as it is
        now; a hand-off for it that comes later is refused (`hand_off_settled`)."""
        self._prune()
        key, gen = (d, msg.exchange_id), self._gen.get(d, 0)
        note = self._taken.setdefault(key, _Note(msg.mate, msg.holder, 0.0, self.now, d, gen=gen))
        rate = note.rate if note.gen == gen else 0.0
        self.send(d, Traded(msg.exchange_id, msg.holder, rate, msg.mate, self.state(), True, edge_gen=gen))

    def hand_off_settled(self, d: str, eid: int) -> bool:
        return eid >= 0 and (d, eid) in self._taken

    def _settle_onward(self, eid: int, z: str, rate: float) -> None:
        """b kept a's flow (it dropped the hand-off), so the hand-over moved nothing for a; but z
        counts `rate` more on d -> z, and so do we from now on (a deficit we then withdraw)."""
        del self._asking_z[eid]
        late = eid not in self._pending  # (we gave up on b meanwhile: the reservation is released)
        p = (self._expired if late else self._pending).pop(eid, None)
        if p is None:
            return
        h = p.offer.holder
        self.finish_hand_over(h, p, 0.0, None, late=late)
        if rate > EPS and z in self.next:
            self.out[h][z] = self.out[h].get(z, 0.0) + min(rate, p.rate)
            self.flows_moved()
            self._worst_cache.clear()

    def _heard_from_z(self, z: str, msg: Traded) -> None:
        """z took `rate` of b's flow over as ours, and b's answer never reached us: a late answer."""
        eid = msg.exchange_id
        if self._asking_z.get(eid) == z:
            same_edge = self.same_edge(z, msg.edge_gen)  # (else z -> d was dropped since)
            self._settle_onward(eid, z, msg.rate if same_edge else 0.0)
            return
        late = eid not in self._pending
        p = (self._expired if late else self._pending).get(eid)
        if p is None or p.partner or p.mate != msg.mate:
            return
        del (self._expired if late else self._pending)[eid]
        # (z's generation with us when it took the flow over: if we wrote z off since, d -> z was
        # dropped on both sides, this flow with it; false departures with 5% loss, 1 of 800 runs)
        rate = min(max(msg.rate, 0.0), p.rate)
        self.finish_hand_over(msg.holder, p, rate, z, late=late, onward_gen=msg.edge_gen)


__all__ = ["TradeNotes"]
