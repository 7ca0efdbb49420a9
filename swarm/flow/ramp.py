"""The holder's ramp: its demand goes into the swarm in RAMP_STEPS steps, not all at once.

Push-relabel sends a holder's whole demand at once, and every peer pushes what it gets to the next
hop with the cheapest route onwards that has spare capacity. Such a route runs through a few cheap
peers with little room, and every stage-0 peer's cheapest route is the same one: what it cannot take
is pushed on, hop by hop, to the next cheapest peer from wherever it got stuck (a local detour), and
the first flow settles on the slow peers near the holder. Sent in steps, with route costs told in
between, each step follows the cheapest routes that are still free, as successive shortest paths do.

Measured offline on the whole-range sweep's 12 x 24 instance (seed 2, instance 15; successive
steps routed hop by hop with exact route costs): one step gives a mean path 1.265x the min-cost
flow's, 4 steps 1.047x, 64 steps 1.033x. The protocol's first flow there went from 1.243x to 1.056x
with 4 steps, once peers tell every upstream neighbour when their routes get dearer (`news.py`),
and the converged routes from max path / mean path 1.154x / 1.204x to 1.037x / 1.031x.

A step goes in when the last one came home, or when nothing came home for RAMP_WAIT retry periods
(the swarm carries less than the demand: the rest then goes in step by step and push-relabel hands
back what finds no route, as before). Not with limited links, as walks (`ask_budget.py`).
"""

from __future__ import annotations

from swarm.flow.agent import Sender
from swarm.flow.news import EPS

RAMP_STEPS = 8  # steps a holder's demand goes into the swarm in
RAMP_WAIT = 5.0  # retry periods between checks whether the last step came home
RAMP_WITH_LINK_LIMITS = False


class HolderRamp(Sender):
    """The holder's side of the ramp (a part of `HolderAgent`): how much of its demand it sends now."""

    demand: float

    def init_ramp(self) -> None:
        self._ramp_cap = 0.0 if self.ramps() else float("inf")
        self._ramp_armed = False
        self._ramp_home = -1.0

    def ramps(self) -> bool:
        return self.improve and (RAMP_WITH_LINK_LIMITS or not self.link_limits)

    def home(self) -> float:
        raise NotImplementedError

    def ramped(self) -> float:
        """What we send now: the demand, up to the steps let in so far."""
        if self._ramp_cap <= 0.0:  # the first step goes in at once
            self._ramp_cap = self.demand / RAMP_STEPS
        return min(self.demand, self._ramp_cap)

    def arm_ramp(self) -> None:
        if self._ramp_armed or self._ramp_cap >= self.demand - EPS:
            return
        self._ramp_armed = True
        self._ramp_home = self.home()
        self.env.set_timer(self.id, RAMP_WAIT * self.env.retry_s, "ramp")

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


__all__ = ["HolderRamp", "RAMP_STEPS", "RAMP_WAIT", "RAMP_WITH_LINK_LIMITS"]
