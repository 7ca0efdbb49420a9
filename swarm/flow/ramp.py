"""The holder's ramp: its demand goes into the swarm in RAMP_STEPS steps, not all at once.

Push-relabel sends a holder's whole demand at once, and every peer pushes what it gets to the next
hop with the cheapest route onwards that has spare capacity. That route runs through a few cheap
peers with little room, and every stage-0 peer's cheapest route is the same one: what it cannot
take is pushed on, hop by hop, to the next cheapest peer from wherever it got stuck (a local detour),
so the first flow settles on slow peers near the holder, and no exchange or hand-over of four edges
undoes that later. Sent in steps, with route costs told in between, each step follows the cheapest
routes still free, as successive shortest paths do.

Measured on the whole-range sweep's 12 x 24 instance (seed 2, instance 15; docs/routing.md: "The holder's
ramp"): steps routed hop by hop with exact route costs give a first flow with a mean path 1.265x
the min-cost flow's in one step, 1.047x in 4, 1.033x in 64. The protocol's first flow got there only
once peers tell every upstream neighbour when their routes get dearer (`news.py`,
`ask_budget.dearer_news_to_all`): 1.243x -> 1.056x with 4 steps. On the whole range (4-16 x 3-30,
seeds 0 / 1 / 2) 8 steps checked every 5 retry periods took the converged mean path within 10% of
the optimum's from 29 / 29 / 24 to 30 / 30 / 30 of 30 (4 steps, 20 periods apart: seed 2 30, max
path within 5% 21 of 30, against 26 with 8 steps; 16 steps did no better).

Flow lost to churn at the holder goes in again the same way (`ramp_again`, RAMP_AFTER_LOSS).

A step goes in when the last one came home, or when nothing more came home since the last check
(the swarm carries less than the demand: the rest then goes in step by step and push-relabel hands
back what finds no route, as before). Not with limited links, nor for a holder with more than
WIDE_RAMP_HOPS stage-0 peers or fewer than NARROW_RAMP_HOPS (`ramps`).
"""

from __future__ import annotations

from swarm.flow.agent import Sender
from swarm.flow.news import EPS

RAMP_STEPS = 8  # steps a holder's demand goes into the swarm in
RAMP_WAIT = 5.0  # retry periods between checks whether the last step came home (10: 74 of 90, not 77)
RAMP_WITH_LINK_LIMITS = False
# Holders with more stage-0 peers than this send all their demand at once. At 1,000 x 16 (62 of them,
# seed 2) the ramp took the run from 692,060 messages in 527 rounds to 1,710,130 in 987 (58.0 s),
# max / opt 1.259 -> 1.337; the whole-range sweeps' holders have up to 39, and the four with 33-39
# do better ramped (seed 2 instance 19: mean path 1.128x the optimum's at once, 1.076x ramped).
WIDE_RAMP_HOPS = 48
# Nor do holders with fewer than this: every step takes the same few first hops, and a step cannot
# take back what one before it routed. On 17 random instances with 3 peers per stage (6, 10 and 16
# stages, seeds 50-57) max path / opt within 5% on 14 ramped, 17 at once (mean 1.014 -> 1.000, half
# the rounds); the churn table's 16 x 48 went from 1.089 to 1.000. With 4 or 6 no difference showed.
NARROW_RAMP_HOPS = 4
# Flow a holder loses to churn (a stage-0 peer that carried it left) goes in again in steps too, from
# what still flows: sent at once, it took the first routes with room, detours that with several
# holders no later move undoes. On the churn table's ten rows with 4 holders (`swarm bench flow
# --random ... --holders 4 --churn 0.2`) the mean path after churn within 10% of the min-cost
# flow's went from 4 to 6 rows and the max path within 5% from 5 to 7 (4 x 120: 1.076 / 1.132 ->
# 1.026 / 1.061; 8 x 160 got worse, 1.129 / 1.181 -> 1.149 / 1.212); with one holder the rows where
# the holder lost flow re-converged in 0.38-0.77x the initial rounds (0.60-0.87x at once).
RAMP_AFTER_LOSS = True


class HolderRamp(Sender):
    """The holder's side of the ramp (a part of `HolderAgent`): how much of its demand it sends now."""

    demand: float

    def init_ramp(self) -> None:
        self._ramp_cap = 0.0  # (set at the first push, when our stage-0 peers are known)
        self._ramp_armed = False
        self._ramp_home = -1.0

    def ramps(self) -> bool:
        """Not with limited links, nor for a holder with more than WIDE_RAMP_HOPS stage-0 peers or
        fewer than NARROW_RAMP_HOPS."""
        wide = len(self.next) > WIDE_RAMP_HOPS
        narrow = len(self.next) < NARROW_RAMP_HOPS
        return self.improve and (RAMP_WITH_LINK_LIMITS or not self.link_limits) and not wide and not narrow

    def home(self) -> float:
        raise NotImplementedError

    def ramped(self) -> float:
        """What we send now: the demand, up to the steps let in so far."""
        if self._ramp_cap <= 0.0:  # the first step goes in at once (all of it without a ramp)
            first = self.demand / RAMP_STEPS if self.ramps() else float("inf")
            if not self.ready:  # (our stage-0 peers may not be known yet: decide at the first push)
                return min(self.demand, first)
            self._ramp_cap = first
        return min(self.demand, self._ramp_cap)

    def arm_ramp(self) -> None:
        if self._ramp_armed or self._ramp_cap >= self.demand - EPS:
            return
        self._ramp_armed = True
        self._ramp_home = self.home()
        self.env.set_timer(self.id, RAMP_WAIT * self.env.retry_s, "ramp")

    def ramp_again(self) -> None:
        """We lost flow to churn: send it again in steps too (see RAMP_AFTER_LOSS)."""
        if RAMP_AFTER_LOSS and self.ramps() and self._ramp_cap > 0.0:
            self._ramp_cap = min(self._ramp_cap, self.served() + self.demand / RAMP_STEPS)

    def served(self) -> float:
        raise NotImplementedError

    def on_ramp_timer(self) -> bool:
        """Let the next step in if the last came home or nothing more came home since the last
        check; returns whether we did (the caller pushes it)."""
        self._ramp_armed = False
        home = self.home()
        cap = self.ramped()
        if cap >= self.demand - EPS:
            return False
        if home >= cap - EPS or home <= self._ramp_home + EPS:
            self._ramp_cap = cap + self.demand / RAMP_STEPS
            return True
        self.arm_ramp()
        return False


__all__ = [
    "HolderRamp",
    "NARROW_RAMP_HOPS",
    "RAMP_STEPS",
    "RAMP_WAIT",
    "RAMP_WITH_LINK_LIMITS",
    "WIDE_RAMP_HOPS",
]
