"""Make-room chains: a full peer moves another holder's flow to a stage mate, to take a dearer one.

With several holders a peer's capacity is shared by every holder's flow, and at full stages the
mate d that would make holder h's worst path cheaper is often full of another holder g's flow.
Exchanges trade flows of one holder, hand-overs need spare room: no move of one holder's flow
takes h's flow there (docs/routing.md, "Several holders: the split is not what misses"). Offline,
greedy chains of two hand-overs (g's c -> d -> w to c -> m -> w for a mate m with spare room, then
h's a -> b -> z to a -> d -> z) took whole-range seed 0 instances 1 and 28 (4 x 11 and 11 x 5, four
holders) from 1.120 / 1.243 to 0.950 / 1.031 of the min-cost flow's max path
(`swarm bench flow-sweep --chain-bound`, swarm/flow/chain_bound.py).

The roles, all existing trades but one advisory message and a bound:
- a asks d, on h's walk, to take its flow on b over (a critical exchange ask). d refuses: no trade
  of h's flow pays and it has no spare room. If a's path through d would be cheaper than through b,
  d asks up to ROOM_PARTNERS of its senders c of other holders g (`RoomAsk`) to move their flow off
  d, as long as g's new path costs less than h's path through b (the bound: the swarm's worst path
  gets no dearer). The hand-over that follows keeps b's next hop z, so d judges a's path through
  itself on to z, the hop whose path on costs what a told of b's (`_worst_hop_of`).
- c asks up to ROOM_MATES mates m of d with spare room for a hand-over of its flow on d
  (`Offer.room_bound`). m takes no trade, only the hand-over (on a budget of its own,
  ROOM_TAKES); d, as its b, picks the next
  hop w for which g's new path is cheapest, if under the bound (`HandOvers._room_hop`).
- d, once it has handed c's flow over, holds the room for a (HOLD_WAIT) and tells it
  (`RotateHint.room`); a asks d again, at once or, with asks of its own open, a little later
  (HINT_WAIT); d now has room and takes a's flow over by the usual hand-over rule.
Each step settles like the trade it is when a party leaves half-way. If a's ask does not follow,
g's flow stays on m (its path under the bound), and the room goes to whatever comes.
"""

from __future__ import annotations

from swarm.flow.messages import Offer, RoomAsk, RotateAsk, RotateHint, SwapOption
from swarm.flow.news import EPS
from swarm.flow.rotations import Rotations
from swarm.flow.swap_asks import GAIN_S
from swarm.flow.walks import walks_here

ROOM_CHAINS = True
ROOMS = 32  # room asks a peer (as d) may send (again after churn near it)
ROOM_PARTNERS = 2  # senders c asked per refused worst-path ask
ROOM_MATES = 2  # mates m each c asks for the hand-over
# The other holder's hand-over may make its edges dearer by this many times what the first holder's
# path saves (the mean path against the worst: a make-room move costs one path to save another).
# 1 before d judged a's path by b's next hop (`_worst_hop_of`); with that, on 18 small instances x 2
# timings, 2 took 30 -> 32 of 36 runs within 5% on the max path and kept all 36 within 10% on the
# mean path (3: 31 of 36, the mean path 1.035 -> 1.039).
ROOM_PRICE = 2.0
ROOM_ASKS = 8  # hand-over asks a peer (as c) may send for room asks
# Chain hand-overs a peer (as m) may take, besides its hand-over budget: idle mates with room had
# spent theirs on other asks (whole-range seed 0 instance 1: 20 of 35 chain asks were refused so).
ROOM_TAKES = 8
# d holds the room a chain made for a's re-ask this many retry periods, so that no other flow takes
# it meanwhile (whole-range seed 0 instance 1: of 10 rooms made, one went to a's flow; another was
# gone when a asked again).
HOLD_WAIT = 2.0
# a, busy with asks of its own when the hint comes, asks again after HINT_WAIT retry periods, up to
# HINT_TRIES times (instance 1: 5 of 7 hints came while a's asks were open, and were dropped).
HINT_WAIT = 0.5
HINT_TRIES = 3
# b's worst next hop is the one whose path on costs what a told of b, within this fraction (path
# news are rounded).
HOP_MATCH = 0.02


class RoomChains(Rotations):
    """d's side (the room ask, the hint to a) and c's side (the hand-over asks)."""

    def init_rotations(self) -> None:
        super().init_rotations()
        self.rooms_left = ROOMS
        self.room_asks_left = ROOM_ASKS
        self.room_takes_left = ROOM_TAKES
        self._rooming: dict[tuple[str, str], tuple[str, str, str]] = {}  # (g, c) -> (h, a, b)
        self._holds: dict[tuple[str, str], float] = {}  # (h, a) -> room held for a's re-ask
        self._hold_timers: dict[int, tuple[str, str]] = {}
        self._hints: dict[tuple[str, str], tuple[str, int]] = {}  # (h, d) -> (b, tries left)
        self._hint_armed = False

    def reset_exchanges(self) -> None:
        super().reset_exchanges()
        self.rooms_left, self.room_asks_left, self.room_takes_left = ROOMS, ROOM_ASKS, ROOM_TAKES
        self._rooming = {}
        for key in list(self._holds):
            self._release_hold(key)
        self._hints = {}

    # ------------------------------------------------------------------ d
    def start_exchange(self, a: str, msg: Offer) -> bool:
        self._release_hold((msg.holder, a))  # (a asks again: the room is its to take)
        if super().start_exchange(a, msg):
            return True
        self._ask_room(a, msg)
        return False

    def _ask_room(self, a: str, msg: Offer) -> None:
        """a's worst-path ask found no trade and no room here: ask senders of other holders to
        move their flow on us to our mates, if a's flow here would make its path cheaper."""
        h = msg.holder
        plain = msg.rotate_hop is None and msg.plan_taker is None and msg.layer_partner is None
        if not (ROOM_CHAINS and msg.critical and plain and msg.room_bound is None and not msg.corridor_olds):
            return
        if self.rooms_left <= 0 or self.spare() > EPS or not walks_here(self):  # (walks: no link limits)
            return
        if msg.swap_options:
            b, worst_b = msg.swap_options[0].hop, msg.swap_options[0].worst
            rate = min(msg.rate, msg.swap_options[0].rate)
        else:
            b, worst_b, rate = msg.swap_from or "", msg.swap_worst or 0.0, msg.rate
        try:
            ab, ad = self.env.cost(a, b), self.env.cost(a, self.id)
        except Exception:  # noqa: BLE001 - a or b left the instance
            return
        up_a = (msg.bid - ad) if msg.bid is not None else 0.0
        bound = up_a + ab + worst_b - GAIN_S  # (h's path through b, which the move is to undo)
        own = self.fresh_worst(h) if self.supply(h) > EPS else None
        z = self._worst_hop_of(h, b, worst_b)
        if z is not None:  # (the hand-over keeps b's next hop: a's path through us, as b judges it)
            onwards = max(own or 0.0, self.env.cost(self.id, z) + (0.0 if z == h else self.worst_of(h, z)))
        else:
            onwards = worst_b if own is None else own
        saves = bound - (up_a + ad + onwards)
        if saves <= 0:
            return  # (a's flow here would hardly make its path cheaper)
        partners = sorted(
            (-self.movable(g, c), g, c)
            for g in self.holders
            if g != h and g in self.inflow
            for c in self.inflow[g]
            if (c == g or c not in self.holders) and self.movable(g, c) > EPS  # (a holder sends its own)
        )
        for neg, g, c in partners[: min(ROOM_PARTNERS, self.rooms_left)]:
            self.rooms_left -= 1
            self._rooming[(g, c)] = (h, a, b)
            self.send(c, RoomAsk(g, min(rate, -neg), bound, ROOM_PRICE * saves), reliable=False)

    def _worst_hop_of(self, h: str, b: str, worst_b: float) -> str | None:
        """The next hop of b's worst path on for h, told by its cost (b's costs to our next stage
        are known, and so are its peers' paths on): None if no hop of ours matches it."""
        best: tuple[float, str] | None = None
        for z in self.next:
            sink = self.last and z == h
            if z in self.holders and not sink:
                continue
            try:
                gap = abs(self.env.cost(b, z) + (0.0 if sink else self.worst_of(h, z)) - worst_b)
            except Exception:  # noqa: BLE001 - b or z left the instance
                continue
            if best is None or gap < best[0]:
                best = (gap, z)
        return best[1] if best is not None and best[0] <= HOP_MATCH * max(worst_b, EPS) else None

    def gave(self, d: str, h: str, a: str, ask: int, rate: float) -> None:
        """As the hand-over's b: when it moved c's flow off us for a room ask, tell a to ask again."""
        super().gave(d, h, a, ask, rate)
        plan = self._rooming.pop((h, a), None)
        if plan is not None and rate > EPS and plan[1] in self.prev:
            key = (plan[0], plan[1])
            held = min(rate, self.spare())
            if held > EPS:
                self.reserved += held
                self._holds[key] = self._holds.get(key, 0.0) + held
                tid = self._new_id()
                self._hold_timers[tid] = key
                self.env.set_timer(self.id, HOLD_WAIT * self.env.retry_s, f"room_hold:{tid}")
            self.send(plan[1], RotateHint(plan[0], plan[2], room=True), reliable=False)

    def _release_hold(self, key: tuple[str, str]) -> None:
        held = self._holds.pop(key, 0.0)
        if held > 0.0:
            self.reserved = max(0.0, self.reserved - held)

    def room_timer(self, token: str) -> None:
        """A hold ran out (a did not ask again in time), or a's deferred hints are due."""
        if token == "room_hint":
            self._hint_armed = False
            hints, self._hints = self._hints, {}
            for (h, d), (b, tries) in hints.items():
                self._take_hint(d, h, b, tries)
            return
        key = self._hold_timers.pop(int(token.split(":", 1)[1]), None)
        if key is not None and not any(k == key for k in self._hold_timers.values()):
            self._release_hold(key)

    # ------------------------------------------------------------------ m
    def take_room(self) -> bool:
        if self.room_takes_left <= 0:
            return False
        self.room_takes_left -= 1
        return True

    # ------------------------------------------------------------------ a
    def on_rotation(self, src: str, body: RotateAsk | RotateHint) -> None:
        if isinstance(body, RotateHint) and body.room:
            self._take_hint(src, body.holder, body.hop, HINT_TRIES)
            return
        super().on_rotation(src, body)

    def _take_hint(self, d: str, h: str, b: str, tries: int) -> None:
        """d made room for our flow of h on b and holds it: ask d again, or, while asks of ours are
        open, a little later (a rotation's hint goes at once or not at all)."""
        if (self.offers or self.cancels) and tries > 0 and h in self.holders and d in self.next:
            self._hints[(h, d)] = (b, tries - 1)
            if not self._hint_armed:
                self._hint_armed = True
                self.env.set_timer(self.id, HINT_WAIT * self.env.retry_s, "room_hint")
            return
        super().on_rotation(d, RotateHint(h, b))

    # ------------------------------------------------------------------ c
    def on_room_ask(self, src: str, body: RoomAsk) -> None:
        """As c: ask mates of d with spare room to take our flow on d over, where the path is
        likely to stay under the bound (d, as the hand-over's b, checks it exactly)."""
        g, d = body.holder, src
        if g not in self.holders or d not in self.next or self.last or not walks_here(self):
            return
        if self.cancels or self.room_asks_left <= 0:
            return
        if any(o[0] == g and o[3] == d for o in self.offers.values()):
            return  # (our flow on d is on the move already)
        ours = min(self.out[g].get(d, 0.0), body.rate)
        if ours <= EPS:
            return
        arrival, top, onwards = self.fresh_arrival(g), self.label(g) + 1, self.worst_of(g, d)
        mates = []
        for m in self.targets(g):
            st = self.views.get(m)
            if m == d or m in self.holders or st is None or st.spare <= EPS:
                continue
            here = arrival + self.link(m) + onwards  # (the flow keeps d's next hop)
            idle = g not in st.worst  # (an idle m takes a hand-over whatever the labels)
            if (idle or self.view_label(m, g) <= top) and here < body.bound:
                mates.append((here, m, st.spare))
        for _, m, spare in sorted(mates)[: min(ROOM_MATES, self.room_asks_left)]:
            self.room_asks_left -= 1
            rate = min(ours, spare)
            option = SwapOption(d, rate, onwards, self._gen.get(d, 0))
            self.send_trade_ask(
                g, m, d, (option,), self.label(g), arrival + self.link(m), False, room=(body.bound, body.rise)
            )


__all__ = ["RoomChains", "ROOM_CHAINS", "ROOMS", "ROOM_PARTNERS", "ROOM_MATES", "ROOM_ASKS"]
