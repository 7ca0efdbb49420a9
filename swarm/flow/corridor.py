"""Corridors: flow on a dear route moves, several stages at once, onto stage peers with room.

Exchanges and hand-overs change one stage at a time, and each must pay on its own. Where the cheap
way round is a run of peers in one region over several stages (an idle London corridor beside a
route through Singapore), the first hand-over onto it makes the path dearer (London -> Singapore)
and is refused, so the corridor is never reached. Offline, greedy corridor moves with exact costs
along the worst path took whole-range misses such as 12 x 24 (seed 2, instance 15) from 1.237x the
min-cost flow's max path to 1.055x; the protocol's probes, which judge with local figures, take it to
1.159x, and the whole range's mean max / opt from 1.003 / 0.996 / 1.011 to 0.996 / 0.994 / 0.998
(seeds 0 / 1 / 2), for 9% more messages (docs/routing.md: "Corridors").

Roles and messages (best effort, they move no flow by themselves):
- The origin a (calm, exchanges done) sends a `Corridor` probe down its most expensive route onwards:
  its hop b1, then each old node b_j forwards it to its own most expensive hop b_j+1.
- The probe carries the cheapest `lanes`: chains x1..xj of peers with spare capacity for the flow,
  one per stage, ending beside the addressee, ranked by the dearest path each can make (its edges
  and then the old route on, or a lane peer's own route on: `cheapest_lanes`). Each b_j extends
  them by its next stage (it sees their published spare capacity) and judges closing a lane into
  b_j+1: the lane's edges against the old edges a -> b1 -> ... -> b_j+1. The worst routes before a
  and after b_j+1 are the same for both, so the saving is the edges' alone.
- The last node passes the best plan (a `CorridorPlan`) back up the old nodes to a.
- a carries it out as a chain of hand-overs, each with a planned next hop (`HandOver.onward`, b judges
  nothing): x1 takes a's flow over from b1 and runs it on to b2, then asks x2 to take it over from
  b2 and run it on to b3, and so on. Every step is an ordinary hand-over, so churn in the middle
  of a chain leaves a valid flow; the chain just stops there.
"""

from __future__ import annotations

import dataclasses

from swarm.flow.ask_budget import CORRIDOR_REFUNDS, corridor_budget
from swarm.flow.handover import HandOvers
from swarm.flow.messages import Corridor, CorridorPlan, Lane, Offer, SwapOption
from swarm.flow.news import EPS
from swarm.flow.swap_asks import GAIN_S

CORRIDORS = True  # (probes a peer may start: `ask_budget.corridor_budget`)
MAX_LENGTH = 10  # stages a corridor may span
LANES = 6  # cheapest lanes a probe carries on
# A lane peer needs spare capacity for this share of the flow so far (the flow the corridor can move
# is the least along the old route, known only at the end; a plan needs room for all of it).
MIN_ROOM = 0.25


def cheapest_lanes(lanes: list[Lane], rest: float, keep: int) -> tuple[Lane, ...]:
    """The `keep` cheapest of `lanes` (all one stage long), the cheapest one per end peer.

    A lane is judged by the dearest path it can make: its own edges and then the old route on from
    this stage (`rest`, the same for every lane), or a lane peer's own route on (`worst`). Judged by
    its edges alone (against `worst`, a whole path), a lane of idle peers beat any lane through busy
    ones: on seed 1 instance 1 of the whole range (8 x 6) the lane that closed the corridor past the
    swarm's dearest hop (s4p3 -> s5p5 -> s6p8, 1.99 s so far, 2.80 s through its own routes) fell
    out of a probe's six behind idle lanes of 2.36-2.78 s that would have cost 3.4 s in all
    (docs/routing.md: "Corridor lanes judged by whole paths")."""

    def key(lane: Lane) -> float:
        return max(lane.cost + rest, lane.worst)

    best: dict[str, Lane] = {}
    for lane in lanes:
        end = lane.nodes[-1]
        if end not in best or key(lane) < key(best[end]):
            best[end] = lane
    return tuple(sorted(best.values(), key=lambda lane: (key(lane), lane.nodes))[:keep])


class Corridors(HandOvers):
    """A stage peer's corridor roles: origin, old node (probe and plan), and taker (a step)."""

    def init_corridors(self) -> None:
        self.corridor_budget = -1  # set at the first probe
        self._corridor_refunds = 0

    def reset_exchanges(self) -> None:
        """Churn near us: no more probes (a newcomer still starts its own). Chains run one stage
        after another: after 20% churn on 16 x 160 (seed 7), probes with a fresh budget took the
        re-convergence from 576 / 628 rounds (restored / quiet) to 699 / 747, 2.03x / 2.17x the
        initial 345 rounds, and with what was left of the budget to 680 / 694."""
        super().reset_exchanges()
        if self.corridor_budget >= 0:
            self.corridor_budget = 0
            self._corridor_refunds = CORRIDOR_REFUNDS

    # ------------------------------------------------------------------ origin
    def try_polish(self) -> bool:
        """Exchanges first; once they have nothing to ask, a corridor probe (after the same calm)."""
        if super().try_polish():
            return True
        return self._may_probe() and self.calm() and self.try_corridor()

    def _may_probe(self) -> bool:
        if not (CORRIDORS and self.improve) or self.link_limits or self.last:
            return False  # (with limited links there are no hand-overs: b cannot see d's links)
        if self.corridor_budget < 0:
            self.corridor_budget = corridor_budget(len(self.next))
        return self.corridor_budget > 0 and not self.offers and not self.cancels

    def try_corridor(self) -> bool:
        """Probe our most expensive route onwards (over every holder) for a corridor."""
        hops = [(hop, h) for h in self.holders if (hop := self._dearest_hop(h)) is not None]
        if not hops:
            return False
        (_, b), h = max(hops, key=lambda found: found[0][0])  # (ties: the first, as a scan finds it)
        rate = self.out[h][b]
        arrival = self.fresh_arrival(h)
        lanes = self._extend(h, (Lane((), arrival),), b, rate)
        if not lanes:
            return False
        self.corridor_budget -= 1
        self.send(b, Corridor(h, self.id, rate, (b,), arrival + self.link(b), lanes), reliable=False)
        return True

    def _dearest_hop(self, h: str) -> tuple[float, str] | None:
        """(cost, hop) of our most expensive route onwards for holder h (the sink at the last stage)."""
        used = [
            (self.link(v) + (0.0 if v == h else self.worst_of(h, v)), v)
            for v, r in self.out[h].items()
            if r > EPS and (v not in self.holders or (self.last and v == h))
        ]
        return max(used, key=lambda u: u[0]) if used else None

    def _extend(self, h: str, lanes: tuple[Lane, ...], old: str, rate: float) -> tuple[Lane, ...]:
        """The LANES cheapest lanes one stage on: through our next hops with spare for `rate`
        (never the old node `old` of that stage), each reached from the cheapest lane before it."""
        cost, me = self.env.cost, self.id
        found: list[Lane] = []
        for v in self.next:
            st = self.views.get(v)
            if v == old or v in self.holders or st is None or st.spare < MIN_ROOM * rate:
                continue
            onwards = self.worst_of(h, v)  # (0: v runs nothing on, or we have not heard)
            for lane in lanes:
                try:
                    c = lane.cost + cost(lane.nodes[-1] if lane.nodes else me, v)
                except Exception:  # noqa: BLE001 - a lane's peer left the instance
                    continue
                worst = max(lane.worst, c + onwards if onwards > 0.0 else 0.0)
                found.append(Lane((*lane.nodes, v), c, worst, min(lane.room, st.spare)))
        return cheapest_lanes(found, self.worst_of(h, old), LANES)

    # ------------------------------------------------------------------ old nodes
    def on_corridor(self, src: str, body: Corridor | CorridorPlan) -> None:
        if isinstance(body, CorridorPlan):
            self._on_plan(body)
        elif body.olds and body.olds[-1] == self.id and body.holder in self.inflow:
            self._on_probe(src, body)

    def _on_probe(self, src: str, msg: Corridor) -> None:
        """Judge closing each lane into our worst hop, extend the lanes past it, pass the probe on
        (or, at its end, the best plan back)."""
        h = msg.holder
        rate = min(msg.rate, self.inflow[h].get(src, 0.0))
        if rate <= EPS:
            return  # (stale: src no longer sends us that flow)
        dearest = self._dearest_hop(h)
        if dearest is None:
            return
        z = dearest[1]
        rate = min(rate, self.out[h][z])
        old, onwards = msg.old_cost + self.link(z), (0.0 if z == h else self.worst_of(h, z))
        plan, gain, plan_rate = msg.plan, msg.gain, msg.plan_rate
        plan_olds = msg.olds[: len(plan) + 1]
        for lane in msg.lanes:
            x = lane.nodes[-1] if lane.nodes else self.id
            if x == self.id or not self.mate_known(x) or len(lane.nodes) != len(msg.olds):
                continue  # (a lane ends beside us, one peer per stage: anything else is malformed)
            try:
                new = max(lane.cost + self.env.cost(x, z) + onwards, lane.worst)
            except Exception:  # noqa: BLE001 - the lane's peer left the instance
                continue
            saving = old + onwards - new
            if lane.room >= rate - EPS and saving > max(gain, GAIN_S):
                plan, gain, plan_rate, plan_olds = lane.nodes, saving, rate, (*msg.olds, z)
        olds = (*msg.olds, z)
        onward = z != h and len(olds) <= MAX_LENGTH
        ok = tuple(lane for lane in msg.lanes if len(lane.nodes) == len(msg.olds))
        lanes = self._extend(h, ok, z, rate) if onward else ()
        if lanes:  # the best plan so far rides along (its olds are a prefix of the probe's)
            probe = Corridor(h, msg.origin, rate, olds, old, lanes, plan, gain, plan_rate)
            self.send(z, probe, reliable=False)
        elif plan:
            self._pass_back(CorridorPlan(h, msg.origin, plan_rate, plan, plan_olds, gain), msg.olds[:-1])

    def _pass_back(self, plan: CorridorPlan, back: tuple[str, ...]) -> None:
        """Send the plan one old node further back (`back` ends with the next; then the origin)."""
        nxt = back[-1] if back else plan.origin
        if nxt in self.prev:
            self.send(nxt, dataclasses.replace(plan, back=back), reliable=False)

    def _on_plan(self, msg: CorridorPlan) -> None:
        """Pass a plan back towards its origin, or (as the origin) start its first step."""
        if msg.origin != self.id:
            if msg.back and msg.back[-1] == self.id:
                self._pass_back(msg, msg.back[:-1])
            return
        h = msg.holder
        if h not in self.out or not msg.takers or len(msg.olds) != len(msg.takers) + 1:
            return
        b, x = msg.olds[0], msg.takers[0]
        rate = min(msg.rate, self.out[h].get(b, 0.0))
        pushing = any(old is None for _, _, _, old in self.offers.values())
        if rate <= EPS or x not in self.next or pushing or self.cancels:
            return  # (the flow moved meanwhile, or our flow is moving: the plan is stale)
        # (trade asks in flight may name b too: b never hands over more than it has)
        if self._corridor_refunds < CORRIDOR_REFUNDS:
            self._corridor_refunds += 1
            self.corridor_budget += 1
        self.disturbed()  # no exchange or probe of ours until the chain has run (it passes
        # through states where undoing its first steps pays)
        self.corridor_step(h, x, b, rate, msg.takers[1:], msg.olds[1:])

    # ------------------------------------------------------------------ taker
    def corridor_step(
        self, h: str, taker: str, b: str, rate: float, rest: tuple[str, ...], olds: tuple[str, ...]
    ) -> None:
        """Ask `taker` to take `rate` of our flow on b over and run it on to olds[0]; `rest`: the
        takers after it (each asks the next once its own step is done)."""
        oid = self.add_offer(h, taker, rate, b)
        self.asked(oid, taker, h, (b,))
        worst_b = self.worst_of(h, b)
        option = SwapOption(b, rate, worst_b, self._gen.get(b, 0))
        bid = self.fresh_arrival(h) + self.link(taker)
        ask = Offer(
            h, rate, oid, self.label(h), b, bid=bid, state=self.state(), swap_worst=worst_b,
            swap_options=(option,), corridor=rest, corridor_olds=olds,
        )  # fmt: skip
        self.send(taker, ask)

    def next_corridor_step(self, h: str, offer: Offer, moved: float) -> None:
        """Our step of a corridor is done (we now run `moved` on to `offer.corridor_olds[0]`):
        ask the next taker to take it over from there."""
        b = offer.corridor_olds[0]
        rate = min(moved, self.out[h].get(b, 0.0))
        if rate > EPS and offer.corridor[0] in self.next:
            self.corridor_step(h, offer.corridor[0], b, rate, offer.corridor[1:], offer.corridor_olds[1:])


__all__ = ["CORRIDORS", "Corridors", "cheapest_lanes"]
