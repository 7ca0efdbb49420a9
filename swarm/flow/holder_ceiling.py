"""The holder's ceiling: demand the swarm refused stays home until new capacity is announced.

Where several holders share limited links, a holder often wants more than the swarm can carry for
it. Push-relabel's source never pushes again what the swarm handed back; our holder does, whenever a
stage-0 peer's label falls below its own, because labels here are recomputed from neighbours and
so also fall when capacity appears (a join). But they fall for a moment after a crash too: the
crashed peer's downstream cancels its flow, the stage that limits the flow has room until the
displaced flow is rerouted into it, and every label upstream of that stage drops. The holders then
push their whole refused demand in, it meets the limiting stage full again, and it drains back
while labels count up through every residual cycle on the way (one step per exchange of news),
on every stage for every holder. On `swarm bench flow-events --holders 4 --link-capacity` (seed 0,
16 x 8) one such crash cost 68,108 messages, 18,909 with the holders keeping their demand out.

A crash never raises the maximum flow, so what the swarm refused before it cannot carry after it.
Once a holder has been refused for QUIET_WAIT retry periods (all it sent came home, demand is left,
and no stage-0 peer admits more), it sends at most what it carries then. Flow displaced later (a
stage-0 peer crashed, flow came back) goes in again up to that ceiling. The ceiling is lifted by
room news (`RoomNews`): a peer that joins or grows tells every holder, and so does a holder that
wants less (its share of shared links is room for the others). After room news a holder caps again
only once it has pushed, or after ROOM_WAIT retry periods per stage (the news of the new room may
take that long to reach it as labels).

Only where relabel epochs are off (several holders, limited links: see holder_agent.py) and the
environment delivers room news (`room_news`; the live swarm does not yet).
"""

from __future__ import annotations

from swarm.flow.agent import Sender
from swarm.flow.news import EPS

# Retry periods a refusal must last before the holder caps what it sends. With 4, a holder on a
# swarm losing 5% of messages capped while lost news was still being sent again: 2 of 1,800 random
# events (docs/routing.md, "Holders keep refused demand home") missed the exact maximum; with 24 none
# more than without ceilings.
QUIET_WAIT = 24.0
ROOM_WAIT = 4.0  # retry periods per stage after room news before a holder that did not push caps again


def ceilings_apply(link_limits: bool, holders: int, env: object) -> bool:
    """Whether holders cap refused demand (and peers send room news) in this environment."""
    return link_limits and holders > 1 and bool(getattr(env, "room_news", True))


class HolderCeiling(Sender):
    """The holder's side of the ceiling (a part of `HolderAgent`)."""

    demand: float
    all_holders: tuple[str, ...]

    def init_ceiling(self) -> None:
        self.ceiling: float | None = None  # what we send at most, once the swarm refused more
        self._may_cap = True  # False after room news until we pushed (or ROOM_WAIT passed)
        self._quiet_armed = False
        self._quiet_mark: tuple[float, float] | None = None
        self._may_cap_at = 0.0

    def home(self) -> float:
        raise NotImplementedError

    def served(self) -> float:
        raise NotImplementedError

    def capped(self, supply: float) -> float:
        return supply if self.ceiling is None else min(supply, self.ceiling)

    def _ceilings(self) -> bool:
        return ceilings_apply(self.link_limits, len(self.all_holders), self.env)

    def _refused(self) -> tuple[float, float] | None:
        """(served, home) while the swarm refuses more: all we sent came home, demand is left and
        no stage-0 peer admits more; else None."""
        served, home = self.served(), self.home()
        if served <= EPS or abs(served - home) > EPS or self.demand - served <= EPS:
            return None
        if self._push_options(self.id, self.src_label):
            return None
        return served, home

    def watch_refusal(self, pushed: bool) -> None:
        """After each settle: note a push since room news, and arm the refusal check."""
        if not self._ceilings():
            return
        if pushed:
            self._may_cap = True
        if self.ceiling is not None or not self._may_cap or self._quiet_armed:
            return
        mark = self._refused()
        if mark is None:
            return
        self._quiet_armed = True
        self._quiet_mark = mark
        self.env.set_timer(self.id, QUIET_WAIT * self.env.retry_s, "quiet")

    def on_quiet_timer(self) -> None:
        """Still refused, unchanged, QUIET_WAIT periods on: send no more than we carry."""
        self._quiet_armed = False
        mark = self._quiet_mark
        if mark is not None and self.ceiling is None and self._may_cap and self._refused() == mark:
            self.ceiling = mark[0]
        else:
            self.watch_refusal(False)

    def on_room_news(self) -> None:
        """New capacity somewhere: push refused demand again where labels admit it."""
        if not self._ceilings():
            return
        self.ceiling = None
        wait = ROOM_WAIT * self.stages * self.env.retry_s
        if self._may_cap:
            self.env.set_timer(self.id, wait, "may_cap")
        self._may_cap = False
        self._may_cap_at = self.now + wait  # (later news pushes the timer on, see below)
        self.settle()

    def on_may_cap_timer(self) -> None:
        if self._may_cap:
            return
        if self.now < self._may_cap_at - EPS:
            self.env.set_timer(self.id, self._may_cap_at - self.now, "may_cap")
            return
        self._may_cap = True
        self.watch_refusal(False)

    def tell_room(self, old_demand: float) -> None:
        """We want less: our share of shared links is room for the other holders."""
        if self._ceilings() and self.demand < old_demand - EPS:
            self.send_room_news(h for h in self.all_holders if h != self.id)


__all__ = ["HolderCeiling", "QUIET_WAIT", "ROOM_WAIT", "ceilings_apply"]
