"""Hand-overs of a holder's own first hops, asked on its worst-path walks.

A holder sends its microbatches into stage 0 by push-relabel and, once its flow is at the maximum,
its first hops never move again: no stage peer trades a holder's flow (the holder is the only
sender of its commodity into stage 0, so there is no partner to trade with), and a holder's direct
moves are kept for repairs after churn. When the worst path starts with a dear first hop h -> b,
the fix is a hand-over (swarm/flow/handover.py) with the holder as a: a stage-0 mate d of b with
spare capacity takes part of h's flow on b over and runs it on to one of b's next hops z, so z's
in-flow only changes sender and nothing ripples past the four nodes.

Offline, with exact path costs from the protocol's converged routes, such hand-overs took two of
the whole-range misses (seed 1, instances 1 and 6: 8 x 6 and 15 x 17) from 1.074 / 1.056 to
1.040 / 1.014 of the min-cost flow's worst path.

The holder asks as a peer on a walk does (`WorstWalks.on_walk`): up to WALK_ASKS stage-0 peers with
spare capacity and a cheaper worst route onwards than b's, in turn, each time it sends a walk (so
at most WALKS plus refunds times). b judges the hand-over by the paths through its edges, as for
any peer; a mate that leaves half-way is settled by the asks remembered (`AskResyncs`).
"""

from __future__ import annotations

from swarm.flow.ask_resync import AskResyncs
from swarm.flow.messages import RoomAsk, RotateAsk, RotateHint, SwapOption
from swarm.flow.news import EPS
from swarm.flow.refresh_waves import HolderWaves
from swarm.flow.room_chains import ROOM_ASKS, ROOM_CHAINS, ROOM_MATES
from swarm.flow.swap_asks import GAIN_S
from swarm.flow.walks import WALK_ASKS, in_turn, walks_here

HOLDER_HAND_OVERS = True  # (False: the holder's first hops stay as push-relabel left them)


class HolderHandOvers(AskResyncs, HolderWaves):
    """The holder as the initiator a of hand-overs of its own flow (a part of `HolderAgent`)."""

    def init_holder_hand_overs(self) -> None:
        self.init_ask_resyncs()
        self._hand_over_asked: set[tuple[str, str, str]] = set()  # (us, b, d) asked on earlier walks
        self.room_asks_left = ROOM_ASKS  # hand-over asks for stage-0 peers' room asks (room_chains.py)

    def renew_walks(self) -> None:
        super().renew_walks()
        self._hand_over_asked.clear()
        self.room_asks_left = ROOM_ASKS

    def walk_asks(self, b: str, there: float) -> None:
        """Ask stage-0 mates d of b with spare capacity and a cheaper route onwards than b's
        (`there`, link included) to take our flow on b over."""
        h = self.id
        rate_b = self.out[h].get(b, 0.0)
        if not HOLDER_HAND_OVERS or not self.improve or rate_b <= EPS or self.offers or self.cancels:
            return
        cheaper = sorted(
            (here, d)
            for d in self.next
            if d != b
            and (self.target_spare(h, d) > EPS or self._makes_room(d))
            # (an idle d takes it whatever its label; a full one may make room, room_chains.py)
            and (here := self.link(d) + self.worst_of(h, d)) < there - GAIN_S
        )
        worst_b, gen_b = self.worst_of(h, b), self._gen.get(b, 0)
        for d in in_turn(self._hand_over_asked, h, b, [d for _, d in cheaper])[:WALK_ASKS]:
            self._hand_over_asked.add((h, b, d))
            spare = self.target_spare(h, d)
            option = SwapOption(b, min(rate_b, spare) if spare > EPS else rate_b, worst_b, gen_b)
            # (an ask capped at d's spare, since d takes it as a hand-over; from the holder, arrival 0)
            self.send_trade_ask(h, d, b, (option,), self.src_label, self.link(d), critical=True)

    def _makes_room(self, d: str) -> bool:
        """Whether a full stage-0 peer d carries other holders' flow it may move to make room."""
        st = self.views.get(d)
        # (only where peers take part in walks: a wider stage 0 asks for no room, as d would not)
        if not ROOM_CHAINS or not walks_here(self) or st is None:
            return False  # (walks_here: not with link limits, where there are no hand-overs)
        return any(g != self.id for g in st.worst)

    def on_rotation(self, src: str, body: RotateAsk | RotateHint) -> None:
        """A stage-0 peer made room for our flow on its mate `hop` (room_chains.py): ask it again."""
        h, b = self.id, body.hop
        if not isinstance(body, RotateHint) or body.holder != h or src not in self.next or b not in self.next:
            return
        rate_b = self.out[h].get(b, 0.0)
        if rate_b <= EPS or self.cancels or any(o[0] == h and o[3] == b for o in self.offers.values()):
            return
        option = SwapOption(b, rate_b, self.worst_of(h, b), self._gen.get(b, 0))
        self.send_trade_ask(h, src, b, (option,), self.src_label, self.link(src), critical=True)

    def on_room_ask(self, src: str, body: RoomAsk) -> None:
        """A stage-0 peer d asks us to move our flow on it to a mate with room, to take another
        holder's dearer flow (swarm/flow/room_chains.py): ask up to ROOM_MATES such mates, cheapest
        first, while the path is likely to stay under the bound (d checks it as the hand-over's b)."""
        h, d = self.id, src
        if body.holder != h or d not in self.next or not walks_here(self) or self.cancels:
            return
        if self.room_asks_left <= 0 or any(o[0] == h and o[3] == d for o in self.offers.values()):
            return
        ours, onwards = min(self.out[h].get(d, 0.0), body.rate), self.worst_of(h, d)
        mates = sorted(
            (here, m)
            for m in self.next
            if m != d and self.target_spare(h, m) > EPS and (here := self.link(m) + onwards) < body.bound
        )
        for _, m in mates[: min(ROOM_MATES, self.room_asks_left)] if ours > EPS else []:
            self.room_asks_left -= 1
            option = SwapOption(d, min(ours, self.target_spare(h, m)), onwards, self._gen.get(d, 0))
            room = (body.bound, body.rise)
            self.send_trade_ask(h, m, d, (option,), self.src_label, self.link(m), False, room=room)


__all__ = ["HolderHandOvers", "HOLDER_HAND_OVERS"]
