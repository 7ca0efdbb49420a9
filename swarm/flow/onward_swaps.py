"""Onward swaps: a hand-over that pays only once a sender at the next stage moves aside.

A hand-over (swarm/flow/handover.py) moves a's flow a -> b -> z to b's mate d, and d runs it on to
z: only z's sender changes. Sometimes d is near a but far from z, and near z', a full mate of z
fed by c. Then neither trade pays alone: the hand-over makes the path dearer (a -> d -> z), and an
exchange of b's flow on z for c's on z' (b -> z', c -> z) makes the edges dearer. Together they do
pay: a -> d -> z' and c -> z replace a -> b -> z and c -> z'. Offline, on the whole range's seed 0
instance 8 (8 x 6) this six-edge move takes the max path from 1.087 to 1.002 of the min-cost flow's,
where the hand-over alone gives 1.169 and the exchange alone 1.098 (docs/routing.md, "Onward swaps").

The roles, all of them existing trades:
- b, refused d's hand-over (no z pays) for a worst-path ask (`HandOver.critical`: a asked on a
  holder's walk), asks a mate z' of its hop z that would be cheaper for d for an exchange of b's
  flow on z, marked with the plan (`Offer.plan_sender` a, `plan_taker` d). Only on walks: tried on
  every refused hand-over, the plans were judged on the figures of a swarm still converging, and
  the whole range fell from 87 to 78 of 90 within 5%.
- z' judges the exchange with the hand-over after it (`trade_rules.plan_rise`): the paths
  a -> d -> z' and c -> z against b's through z and c -> z'. It makes the exchange as any other.
- b, told that the exchange was made, tells a (`OnwardHint`), and a asks d for the hand-over of
  its flow on b, which now runs on to z'. b judges that hand-over as any other.
Each step settles like the trade it is when a party leaves half-way. If the hand-over does not
follow (d filled up meanwhile), the exchange stays: it was judged for the pair, so the swarm is
left a little worse until a later trade. Peers make at most ONWARD_SWAPS such asks (again after
churn near them), and a asks for at most its walk budget on hints.
"""

from __future__ import annotations

from swarm.flow.messages import HandOver, OnwardHint, Reply, SwapOption
from swarm.flow.news import EPS
from swarm.flow.refresh_waves import PeerWaves
from swarm.flow.swap_asks import GAIN_S
from swarm.flow.walks import WALK_ASKS

ONWARD_SWAPS = 8  # onward-swap asks a peer (as b) may make (again after churn near it)


class OnwardSwaps(PeerWaves):
    """b's side (the ask with its plan, the hint) and a's side (the hint) of onward swaps."""

    def init_onward_swaps(self) -> None:
        self.onward_swaps = ONWARD_SWAPS
        self._plans: dict[int, tuple[str, str, str]] = {}  # our ask -> (holder, sender a, taker d)

    def reset_exchanges(self) -> None:
        super().reset_exchanges()
        self.onward_swaps = ONWARD_SWAPS

    # ------------------------------------------------------------------ b
    def hand_over_refused(self, h: str, a: str, d: str, msg: HandOver, rate: float) -> None:
        """Ask up to WALK_ASKS mates z' of our hops z, where a -> d -> z' would be cheaper than
        a -> us -> z, to trade our flow on z for one of their senders (judged with the hand-over)."""
        if not msg.critical or self.onward_swaps <= 0 or a in self.holders or self.last:
            return  # (only on walks: plans judged on the figures of a swarm still converging misled)
        if self.offers or self.cancels:
            return
        try:
            ab, ad = self.env.cost(a, self.id), self.env.cost(a, d)
        except Exception:  # noqa: BLE001 - a or d left the instance
            return
        plans: list[tuple[float, str, str]] = []
        for z, r in self.out[h].items():
            if r <= EPS or z in self.holders:
                continue
            there = ab + self.link(z) + self.worst_of(h, z)
            for y in self.targets(h):
                if y == z or y in self.holders:
                    continue
                try:
                    here = ad + self.env.cost(d, y) + self.worst_of(h, y)
                except Exception:  # noqa: BLE001 - y left the instance
                    continue
                if here < there - GAIN_S:
                    plans.append((here - there, z, y))
        plans.sort()
        self._plans = {oid: plan for oid, plan in self._plans.items() if oid in self.offers}  # (unanswered)
        for _, z, y in plans[: min(WALK_ASKS, self.onward_swaps)]:
            self.onward_swaps -= 1
            option = SwapOption(z, min(rate, self.out[h][z]), self.worst_of(h, z), self._gen.get(z, 0))
            bid = self.fresh_arrival(h) + self.link(y)
            oid = self.send_trade_ask(
                h, y, z, (option,), self.label(h), bid, critical=True, plan=(a, d, msg.arrival)
            )
            self._plans[oid] = (h, a, d)

    def on_reply(self, src: str, msg: Reply) -> None:
        plan = self._plans.pop(msg.offer_id, None)
        super().on_reply(src, msg)
        if plan is not None and msg.exchanged > EPS:
            h, a, d = plan
            if a in self.prev and self.movable(h, a) > EPS:
                self.send(a, OnwardHint(h, d), reliable=False)

    # ------------------------------------------------------------------ a
    def on_onward_hint(self, src: str, body: OnwardHint) -> None:
        """Our next hop src made room for our flow to move to its mate `taker`: ask for it."""
        h, d = body.holder, body.taker
        if h not in self.holders or src not in self.next or d not in self.next or d == src:
            return
        if self.out[h].get(src, 0.0) <= EPS or self.walk_asks_left <= 0 or self.offers or self.cancels:
            return
        self.walk_asks_left -= 1  # (hints spend the walk budget: a flood of them gets no more)
        self.ask_trade(h, d, src, [src], critical=True)


__all__ = ["OnwardSwaps", "ONWARD_SWAPS"]
