"""Worst-path walks: once its flows are calm, a holder sends a token down the most expensive used
path of its microbatches, and every peer on it asks its next stage for trades that make that path
cheaper, whatever the four edges cost.

Exchanges (swarm/flow/exchange.py) are asked by every calm peer for its own reasons, and the asked
peer weighs the path it saves against the edges it makes dearer (`WORST_PATH_PRICE`), since most
trades are not on the swarm's worst path and the mean path counts too. On the worst path the
objective is that path alone (GWTF: among maximum flows, the cheapest most expensive path), but no
peer knows it is on it. The holder does, roughly: its stage-0 peers publish their worst routes on.
Offline, from the protocol's own converged routes, greedy exchanges on the worst path with exact
costs (`swarm/flow/polish_bound.py`) took 6 of 13 whole-range misses within 5% of the min-cost
flow's max path with the price, 8 without it (docs/routing.md: "Worst-path walks").

Roles and messages (best effort, a walk moves no flow by itself):
- The holder, its own flows unchanged for WALK_WAIT retry periods, sends a `Walk` to the stage-0
  peer with its most expensive route onwards, at most WALKS times, waiting as long again after each;
  they come back when a neighbour of the holder comes or goes or its demand changes.
- A peer that gets a walk picks its own most expensive hop b onwards and asks up to WALK_ASKS stage
  mates d of b whose route onwards is cheaper for a trade (`Offer.critical`), then passes the walk
  on to b. The asked d takes a trade when the most expensive path through the four edges gets
  cheaper by more than GAIN_S, even if the edges cost more.
- Walk after walk, a peer asks those mates in turn (`in_turn`): the ones it has not yet asked
  about b first. The cheapest routes onwards are not the trades that pay (d also needs a partner
  whose new path through b stays cheap), and the same four asks on every walk got the same four
  refusals. On the whole range (4-16 x 3-30, seeds 0 / 1 / 2) max path within 5% of the min-cost
  flow's went from 77 to 80 of 90 with turns and walks at peers with up to 48 next hops (was 31,
  `ask_budget.WIDE_WALK_HOPS`).
- A walk after which the holder's worst route onwards got cheaper is given back (WALK_REFUNDS in
  all), so walks go on while they pay: 81 of 90. A wide swarm's worst path can take many small
  steps: seed 0 instance 19 (15 x 30) went on paying after the 8 refunds there were at first, and
  offline greedy exchanges with exact figures take it from 1.057 to 0.965 in 190 steps; with 64 it
  ends at 1.041 (docs/routing.md: "More refunds for walks that pay").
- With each walk the holder asks stage-0 mates of its dearest first hop for hand-overs of its own
  flow (`walk_asks`, swarm/flow/holder_hand_overs.py): no peer trades a holder's flow. 87 of 90.
- Once those walks are spent, LATE_WALKS more go, marked `Walk.late`. A walk that pays nothing can
  come before one that does: each peer asks its mates in turn, and a wide stage takes several walks
  to ask each once. A late walk's trades may make their edges dearer by at most CRITICAL_PRICE
  (swarm/flow/exchange.py) times what the worst path saves: unbounded, the long series bought a few
  ms of worst path with far dearer detours, and a mean path went past 1.10 of the min-cost flow's
  (docs/routing.md: "Late walks").
- Each walk names a stage in turn (`Walk.plan_stage`): on a late walk, the peer of that stage on it
  re-plans its in-layer exactly (swarm/flow/layer_plans.py).
- After a change near the holder (a neighbour came or went, or its demand changed), UNPAID_RUN
  walks of one kind in a row that made its worst route onwards no cheaper end that kind: the early
  ones (the late ones follow) or the late ones (the series). Its first series is whole. On the
  churn table's 16 x 48 row (four holders) nothing got cheaper after 285 of 654 rounds of
  re-convergence: 24 late walks that paid nothing, a wave and its walks. With the rule it is quiet
  after 1.72x the first convergence's rounds (2.02x), the table's quiet rounds fall 14% with one
  holder and 8% with four, and the routes after churn move within the noise (docs/routing.md,
  "Walks after churn stop when they stop paying").
"""

from __future__ import annotations

from swarm.flow.agent import Sender
from swarm.flow.ask_budget import walks_allowed
from swarm.flow.messages import Walk
from swarm.flow.news import EPS
from swarm.flow.swap_asks import GAIN_S
from swarm.flow.trade_notes import TradeNotes

WALKS = 8  # walks a holder sends once its flows calm down (again after churn near it)
WALK_WAIT = 20.0  # retry periods of calm at the holder before a walk (and between walks)
WALK_ASKS = 4  # trades a peer on the walk asks for at once
WALK_REFUNDS = 64  # walks given back, one each time the last one made our worst route cheaper
LATE_WALKS = 24  # late walks once those are spent (again after churn near the holder), see below
UNPAID_RUN = 8  # after a change near the holder, walks of one kind that paid nothing in a row end it
# Critical asks a peer may make in all, again after churn near it: a neighbour that sends walk after
# walk (a bug, or a volunteer that means harm) gets no more than this many asks out of us.
WALK_ASK_BUDGET = 2 * (WALKS + LATE_WALKS) * WALK_ASKS


def in_turn(asked: set[tuple[str, str, str]], h: str, b: str, mates: list[str]) -> list[str]:
    """The mates d to ask about hop b this time, in turn: those not in `asked` (asked on earlier
    walks) first, since the same asks would get the same answers; all again once each was asked."""
    fresh = [d for d in mates if (h, b, d) not in asked]
    if fresh:
        return fresh
    asked.difference_update((h, b, d) for d in mates)
    return mates


def walks_here(node: Sender) -> bool:
    """Whether this node takes part in walks (`ask_budget.walks_allowed`: not with limited links,
    not with more than WIDE_WALK_HOPS next hops)."""
    return walks_allowed(node.improve, node.link_limits, len(node.next))


class WorstWalks(TradeNotes):
    """A stage peer on a holder's worst-path walk."""

    walk_asks_left: int = WALK_ASK_BUDGET
    _walk_asked: set[tuple[str, str, str]]  # (holder, b, d) asked on earlier walks (`in_turn`)

    def init_worst_walks(self) -> None:
        self._walk_asked = set()

    def reset_exchanges(self) -> None:
        super().reset_exchanges()
        self.walk_asks_left = WALK_ASK_BUDGET
        self._walk_asked = set()

    def on_walk(self, body: Walk) -> None:
        h = body.holder
        if not walks_here(self) or h not in self.holders or self.last:
            return
        dearest = self._dearest_hop(h)
        if dearest is None:
            return
        there, b = dearest
        if not self.offers and not self.cancels:  # (our flows are on the move: no asks this time)
            top = self.label(h) + 1  # (d refuses a sender whose label is lower than its own by more)
            cheaper = sorted(
                (here, d)
                for d in self.targets(h)
                if d != b
                and d not in self.holders
                and self.view_label(d, h) <= top
                and (here := self.link(d) + self.worst_of(h, d)) < there - GAIN_S
            )
            for d in in_turn(self._walk_asked, h, b, [d for _, d in cheaper])[
                : min(WALK_ASKS, self.walk_asks_left)
            ]:
                self.walk_asks_left -= 1
                self._walk_asked.add((h, b, d))
                self.ask_trade(h, d, b, [b], critical=True, late=body.late)
        self.send(b, Walk(h, body.arrival + self.link(b), body.late, body.plan_stage), reliable=False)


class HolderWalks(Sender):
    """The holder's side: when to send a walk, and to which stage-0 peer (a part of `HolderAgent`)."""

    sink_in: dict[str, float]

    def init_walks(self) -> None:
        self._walks_left = WALKS
        self._walk_armed = False
        self._walk_mark: tuple = ()
        self._walk_worst = float("inf")  # our worst route onwards when we sent the last walk
        self._walks_paid = False  # a walk made our worst route onwards cheaper (since the last wave)
        self._walk_refunds = WALK_REFUNDS
        self._late_left = LATE_WALKS  # late walks still to come in this series
        self._late = False  # the walks we send now are late ones
        self._walks_sent = 0  # (each walk names the stage that plans its in-layer, in turn)
        self._unpaid = 0  # walks of this kind in a row that made our worst route no cheaper
        self._renewed = False  # this series came with a change near us (`renew_walks`)

    def _walk_key(self) -> tuple:
        return tuple(sorted(self.out[self.id].items())), tuple(sorted(self.sink_in.items()))

    def arm_walk(self) -> None:
        """Check again in WALK_WAIT retry periods whether our flows stayed put (then walk)."""
        if self._walk_armed or not walks_here(self):
            return
        if self._walks_left <= 0 and self._late_left > 0:
            self._walks_left, self._late_left, self._late = self._late_left, 0, True
            self._unpaid = 0
        if self._walks_left <= 0:
            self.walks_spent()
            return
        self._walk_armed = True
        self._walk_mark = self._walk_key()
        self.env.set_timer(self.id, WALK_WAIT * self.env.retry_s, "walk")

    def renew_walks(self) -> None:
        """A neighbour came or went, or our demand changed: the routes re-plan, walks may pay
        again. (Only such events renew them, never our flows moving: with limited links a trade
        can move a holder's flows, and walks would then renew themselves.)"""
        self._walks_left = WALKS
        self._walk_worst = float("inf")
        self._walk_refunds = WALK_REFUNDS
        self._late_left, self._late = LATE_WALKS, False
        self._unpaid = 0
        self._renewed = True

    def walks_spent(self) -> None:
        """Our walks are spent and our flows calm (swarm/flow/refresh_waves.py takes it on)."""

    def walk_again(self, walks: int) -> None:
        """`walks` more walks on fresh figures (a refresh wave came back), given back while they pay:
        the worst route they are judged against is the one the last walk left."""
        self._walks_left = walks
        self._walk_refunds = WALK_REFUNDS
        self._late = False
        self._unpaid = 0
        self.arm_walk()

    def walk_asks(self, b: str, there: float) -> None:
        """A walk leaves through stage-0 peer b, our dearest route onwards (`there`): the holder's
        own asks go with it (swarm/flow/holder_hand_overs.py)."""

    def _count_unpaid(self, paid: bool) -> None:
        """After a change near us, UNPAID_RUN walks in a row that paid nothing end this kind of walk
        (the early ones: the late ones follow; the late ones: the series)."""
        if self._walk_worst == float("inf"):
            return  # (the first walk of a series has nothing to be judged against)
        self._unpaid = 0 if paid else self._unpaid + 1
        if self._renewed and self._unpaid >= UNPAID_RUN:
            self._walks_left = 0

    def on_walk_timer(self) -> None:
        self._walk_armed = False
        if self._walk_key() == self._walk_mark:
            h = self.id
            self._walks_left -= 1  # (also when we send nothing: a timer must not wake us for ever)
            used = [(self.link(v) + self.worst_of(h, v), v) for v, r in self.out[h].items() if r > EPS]
            if used:
                worst, v = max(used)
                paid = worst < self._walk_worst - GAIN_S and self._walk_worst < float("inf")
                self._walks_paid = self._walks_paid or paid
                self._count_unpaid(paid)
                if paid and self._walk_refunds > 0:
                    self._walk_refunds -= 1  # the last walk paid: this one is on the house
                    self._walks_left += 1
                self._walk_worst = worst
                self.walk_asks(v, worst)
                self._walks_sent += 1
                plan_stage = 1 + self._walks_sent % max(1, self.stages - 1)
                self.send(v, Walk(h, self.link(v), self._late, plan_stage), reliable=False)
        self.arm_walk()


__all__ = [
    "HolderWalks",
    "WorstWalks",
    "in_turn",
    "WALKS",
    "WALK_ASKS",
    "WALK_ASK_BUDGET",
    "WALK_WAIT",
    "walks_here",
]
