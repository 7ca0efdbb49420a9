"""Rotations: three peers of a stage pass their senders round, when no trade of two pays.

On a holder's walk, a asks its next hop's mate d to take its flow on b over (a critical exchange).
d trades a's flow for one of its senders c only when c -> b keeps the worst path cheaper; often
every c is dear to b. A third mate e may have a sender g near b, and c may be near e. Then
a -> d, c -> e and g -> b replace a -> b, c -> d and g -> e: three edges leave, three come, and
nobody's throughput changes. Neither exchange alone pays (c -> b is dear; c -> e, g -> d makes no
path cheaper). Offline, from the protocol's own converged routes, greedy exact moves of up to six
edges took whole-range misses within 5% of the min-cost flow's max path only with such rotations:
seed 0 instance 8 (8 x 6, the second message timing) 1.092 -> 1.000 (exchanges and hand-overs alone
1.086), seed 1 instance 0 (6 x 21, the third timing) 1.088 -> 1.047 (alone: no move at all), seed 2
instance 21 (15 x 26, the second timing) 1.074 -> 1.046 (alone 1.054); docs/routing.md, "Rotations".

The roles, all existing trades but two advisory messages and a flag:
- a, GO_WAIT retry periods after a worst-path ask for its flow on b was refused, with no ask open
  and that flow still on b, asks the refused mate d it would gain most by once more, marked
  `Offer.rotate_go`. (Sent at once with d's refusal, a rotation often went ahead after another mate
  had already taken a's flow over: its first exchange then made the swarm's worst path dearer for
  nothing.)
- d, refusing that ask too (no partner's path through b pays, no spare capacity for a hand-over),
  asks up to ROTATE_PARTNERS of its senders c for a rotation (`RotateAsk`, with a's route so far,
  b and b's worst route onwards).
- c asks up to ROTATE_MATES mates e of d whose route onwards is cheaper than a's path through b for
  an exchange of its flow on d, marked with the rotation (`Offer.rotate_*`).
- e judges the exchange with the trade after it (`trade_rules.rotate_rise`): the paths c -> e,
  a -> d and g -> b against c -> d, g -> e and a -> b; the exchange alone may not make the worst of
  them dearer. It makes the exchange as any other: d, as the exchange's b, takes g's flow in place
  of c's.
- d, seeing c's flow leave, tells a (`RotateHint`), and a asks d again; d now trades a's flow for
  g's by the usual rule.
Each step settles like the trade it is when a party leaves half-way; if a's ask does not follow,
the exchange stays (it was judged for the rotation, so the swarm is a little worse until a later
trade). d starts at most ROTATIONS rotation asks; c's, a's go and a's asks spend their walk budget.
"""

from __future__ import annotations

from swarm.flow.messages import Exchange, Offer, Reply, RotateAsk, RotateHint, SwapOption
from swarm.flow.news import EPS
from swarm.flow.onward_swaps import OnwardSwaps
from swarm.flow.swap_asks import GAIN_S
from swarm.flow.walks import walks_here

ROTATIONS = 8  # rotation asks a peer (as d) may send (again after churn near it)
ROTATE_PARTNERS = 4  # senders c asked per refused worst-path ask (whole range within 5%: 2 -> 256, 4 -> 257)
ROTATE_MATES = 8  # mates e each c asks for the exchange
GO_WAIT = 2.0  # retry periods after a refused worst-path ask before a's go


class Rotations(OnwardSwaps):
    """d's side (the ask, the hint), c's side (the exchange asks) and a's side (the go, the hint)."""

    def init_rotations(self) -> None:
        self.rotations_left = ROTATIONS
        self._rotating: dict[tuple[str, str], tuple[str, str]] = {}  # (holder, c) -> (a, b)
        self._worst_asks: dict[int, tuple[str, str, str, bool]] = {}  # open worst-path asks (h, b, d, late)
        self._refused: list[tuple[str, str, str, bool]] = []  # those refused since the last go
        self._go_armed = False

    def reset_exchanges(self) -> None:
        super().reset_exchanges()
        self.rotations_left = ROTATIONS
        self._rotating = {}

    # ------------------------------------------------------------------ d
    def ask_rotations(self, a: str, msg: Offer, up_a: float, ups: list[tuple[str, float, float]]) -> bool:
        h = msg.holder
        if not msg.rotate_go or self.rotations_left <= 0 or a in self.holders or not walks_here(self):
            return False
        if msg.swap_options:
            b, worst_b, rate = msg.swap_options[0].hop, msg.swap_options[0].worst, msg.swap_options[0].rate
        else:  # (`Exchanger.start_exchange` reads such an ask as its one hop `swap_from`)
            b, worst_b, rate = msg.swap_from or "", msg.swap_worst or 0.0, msg.rate
        try:
            via_ab = up_a + self.env.cost(a, b) + worst_b
            via_ad = up_a + self.env.cost(a, self.id) + (self.fresh_worst(h) or 0.0)
        except Exception:  # noqa: BLE001 - a or b left the instance
            return False
        if via_ad >= via_ab - GAIN_S:
            return False  # (a's flow here would not make its path cheaper)
        partners = sorted(ups, key=lambda u: -self.movable(h, u[0]))
        for c, _, _ in partners[: min(ROTATE_PARTNERS, self.rotations_left)]:
            self.rotations_left -= 1
            self._rotating[(h, c)] = (a, b)
            self.send(c, RotateAsk(h, a, up_a, b, worst_b, rate), reliable=False)
        return False

    def on_exchange(self, src: str, msg: Exchange) -> None:
        """As the exchange's b: when the exchange moved c's flow off us for a rotation we asked c
        for, tell a to ask us again."""
        h, c = msg.holder, msg.sender
        had = self.inflow.get(h, {}).get(c, 0.0)
        super().on_exchange(src, msg)
        plan = self._rotating.get((h, c))
        if plan is None or self.inflow.get(h, {}).get(c, 0.0) >= had - EPS:
            return
        del self._rotating[(h, c)]
        a, b = plan
        if a in self.prev:
            self.send(a, RotateHint(h, b), reliable=False)

    # ------------------------------------------------------------------ a
    def worst_ask_sent(self, oid: int, h: str, b: str, d: str, late: bool) -> None:
        """Remember a plain worst-path ask until it is answered (`late`: asked on a late walk, and
        so is the go after it)."""
        if walks_here(self):
            self._worst_asks = {o: ask for o, ask in self._worst_asks.items() if o in self.offers}
            self._worst_asks[oid] = (h, b, d, late)

    def on_reply(self, src: str, msg: Reply) -> None:
        ask = None if msg.waiting else self._worst_asks.pop(msg.offer_id, None)
        super().on_reply(src, msg)
        if ask is not None and msg.accepted <= EPS:
            self._refused.append(ask)
            if not self._go_armed:  # (an onward swap's hint may be on its way: it goes first)
                self._go_armed = True
                self.env.set_timer(self.id, GO_WAIT * self.env.retry_s, "rotate_go")

    def on_go_timer(self) -> None:
        """Every worst-path ask refused a while ago and none open: ask the best of those mates once
        more, marked `rotate_go`, for a flow still on its hop."""
        self._go_armed = False
        refused, self._refused = self._refused, []
        if self.offers or self.cancels or self.walk_asks_left <= 0:
            return
        options = [
            (self.link(d) + self.worst_of(h, d), h, b, d, late)
            for h, b, d, late in refused
            if h in self.holders and b in self.next and d in self.next and self.out[h].get(b, 0.0) > EPS
        ]
        if options:
            _, h, b, d, late = min(options)
            self.walk_asks_left -= 1
            self.ask_trade(h, d, b, [b], critical=True, go=True, late=late)

    # ------------------------------------------------------------------ c and a
    def on_rotation(self, src: str, body: RotateAsk | RotateHint) -> None:
        h = body.holder
        if h not in self.holders or src not in self.next or not walks_here(self):
            return
        if self.offers or self.cancels or self.walk_asks_left <= 0:
            return  # (our flows are on the move; a flood of asks or hints gets no more)
        if isinstance(body, RotateHint):
            b = body.hop
            if b in self.next and b != src and self.out[h].get(b, 0.0) > EPS:
                self.walk_asks_left -= 1
                self.ask_trade(h, src, b, [b], critical=True)
            return
        self._ask_for_rotation(src, body)

    def _ask_for_rotation(self, d: str, body: RotateAsk) -> None:
        """As c: ask mates e of d that are cheaper than the rotation's old path for an exchange of
        our flow on d, judged with the trade after it."""
        h = body.holder
        ours = self.out[h].get(d, 0.0)
        if ours <= EPS or self.last:
            return
        try:
            old = body.arrival + self.env.cost(body.sender, body.hop) + body.worst
        except Exception:  # noqa: BLE001 - the rotation's sender or hop left the instance
            return
        arrival, top = self.fresh_arrival(h), self.label(h) + 1
        mates = sorted(
            (here, e)
            for e in self.targets(h)
            if e not in (d, body.hop)
            and e not in self.holders
            and self.view_label(e, h) <= top
            and (here := arrival + self.link(e) + self.worst_of(h, e)) < old - GAIN_S
        )
        plan = (body.sender, body.arrival, body.hop, body.worst, body.rate)
        for _, e in mates[: min(ROTATE_MATES, self.walk_asks_left)]:
            rate = min(ours, body.rate, self.room(e))
            if rate <= EPS:
                continue
            self.walk_asks_left -= 1
            option = SwapOption(d, rate, self.worst_of(h, d), self._gen.get(d, 0))
            bid = arrival + self.link(e)
            self.send_trade_ask(h, e, d, (option,), self.label(h), bid, critical=True, rotate=plan)


__all__ = ["Rotations", "ROTATIONS", "ROTATE_PARTNERS", "ROTATE_MATES", "GO_WAIT"]
