"""Layer plans: a peer on the holder's worst path re-plans, exactly, which peer of the stage before it
feeds which peer of its own stage, and has the plan carried out by exchanges.

Exchanges (swarm/flow/exchange.py) trade two edges at a time, each trade judged on its own, and they
stop where no single trade pays. Offline, from the protocol's converged routes of the runs that
missed 5% of the min-cost flow's max path, re-solving one layer at a time exactly (every throughput
kept, `layer_assignment.plan_layer`) took 5 of 13 within 5% (seed 1 instance 21: 1.052 -> 0.997):
a plan moves several flows at once, by trades that no one would make alone (docs/routing.md:
"Layer plans").

Roles and messages (all advisory; only exchanges move flow, with their usual guarantees):
- Each walk of the holder names a stage in turn (`Walk.plan_stage`). On a late walk, the peer of
  that stage on the walk plans its in-layer: it sends `LayerAsk` to every peer of the stage before
  it, LAYER_PLANS times at most (again after churn near it), one plan at a time. One layer per walk:
  planned all at once, each on figures its neighbours' plans were changing, plans made paths
  dearer; and only late walks, once the first walks' trades are made, for the same reason.
- Each answers `LayerInfo`: its worst route so far and, per next hop, its rate, the edge's cost and
  that hop's worst route onwards as it heard it (used only from the hop's senders, who hear its
  path news: other views were up to 2.5 s stale).
- After PLAN_WAIT retry periods (or once all answered) the planner solves the layer with what it has
  (`plan_layer`: taken when the layer's worst path gets cheaper by over GAIN_S, or its total cost by
  over LAYER_COST_GAIN with that path no dearer) and splits it into exchanges a -> b, c -> d =>
  a -> d, c -> b in waves (`swaps_for`: a wave moves only flow there is by then, and an edge made on
  the way keeps the layer's worst path no dearer than now). A plan of over MAX_WAVES waves is not
  made: cut short, long ones left paths dearer.
- Wave by wave, PLAN_WAIT retry periods apart, it sends each initiator a its `LayerSwap`; a asks d
  for the trade with `Offer.layer_partner` = c, and d makes exactly that trade (b and d still refuse
  one that lowers their label, and nobody moves flow that is not there any more).

Only where walks run (`walks.walks_here`: not with limited links, not at peers with very many next
hops), so the simulator's scenarios and 1,000 x 16 are as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from swarm.flow.layer_assignment import Swap, layer_bottleneck, plan_layer, swaps_for
from swarm.flow.messages import LayerAsk, LayerHop, LayerInfo, LayerSwap, SwapOption
from swarm.flow.news import EPS
from swarm.flow.room_chains import RoomChains
from swarm.flow.swap_asks import GAIN_S
from swarm.flow.walks import walks_here

LAYER_PLANS = 4  # plans a peer makes, again after churn near it
PLAN_WAIT = 2.0  # retry periods a planner waits for answers, and between the waves of its swaps
LAYER_COST_GAIN = 0.01  # a plan that keeps the layer's worst path must cut its total cost by 1%
MAX_WAVES = 6  # a plan that takes more waves of trades is not made
PLAN_LATE_ONLY = True  # plans go with late walks only (see above)


@dataclass
class _Plan:
    holder: str
    plan: int
    asked: set[str]
    infos: dict[str, LayerInfo] = field(default_factory=dict)
    waves: list[list[tuple[str, LayerSwap]]] = field(default_factory=list)  # (initiator, its ask)
    solved: bool = False
    # a stage plan (swarm/flow/stage_plans.py), when the layer plan found nothing
    mates: set[str] = field(default_factory=set)
    mate_infos: dict[str, LayerInfo] = field(default_factory=dict)
    stage_solved: bool = True  # (False while a stage plan's answers are awaited)


class LayerPlans(RoomChains):
    """The planner and initiator roles of a stage peer in layer plans."""

    def init_layer_plans(self) -> None:
        self._plans_left = LAYER_PLANS
        self._plan: _Plan | None = None
        self._plan_seq = 0

    def reset_exchanges(self) -> None:
        super().reset_exchanges()
        self._plans_left = LAYER_PLANS

    def on_walk(self, body) -> None:  # noqa: ANN001 - a `Walk`
        super().on_walk(body)
        if (body.late or not PLAN_LATE_ONLY) and body.plan_stage == self.stage:
            self.start_plan(body.holder)

    # ------------------------------------------------------------------ planner
    def start_plan(self, h: str) -> None:
        if self._plan is not None or self._plans_left <= 0 or not walks_here(self) or h not in self.holders:
            return
        senders = sorted(u for u in self.prev if u not in self.holders)
        if len(senders) < 2:
            return
        self._plans_left -= 1
        self._plan_seq += 1
        self._plan = _Plan(h, self._plan_seq, set(senders))
        for u in senders:
            self.send(u, LayerAsk(h, self._plan_seq), reliable=False)
        self.env.set_timer(self.id, PLAN_WAIT * self.env.retry_s, f"layer:{self._plan_seq}")

    def layer_timer(self, plan: int) -> None:
        p = self._plan
        if p is None or p.plan != plan:
            return
        if not p.solved:
            self._solve(p)
        elif not p.stage_solved:
            self.solve_stage(p)
        elif p.waves:
            self._send_wave(p)
        else:
            self._plan = None

    def _solve(self, p: _Plan) -> None:
        p.solved = True
        flows: dict[tuple[str, str], float] = {}
        cost: dict[tuple[str, str], float] = {}
        onward: dict[str, float] = {}
        arrival: dict[str, float] = {}
        for a, info in p.infos.items():
            arrival[a] = info.arrival
            for hop in info.hops:
                cost[(a, hop.hop)] = hop.cost
                if hop.rate > EPS:  # its senders hear a hop's path news: their figure is fresh
                    flows[(a, hop.hop)] = hop.rate
                    onward[hop.hop] = max(onward.get(hop.hop, 0.0), hop.onward)
        cost = {e: c for e, c in cost.items() if e[1] in onward}
        found = plan_layer(flows, arrival, cost, onward, GAIN_S, LAYER_COST_GAIN) if flows else None
        if found is None:
            self._no_layer_plan(p)
            return
        now = layer_bottleneck(flows, arrival, cost, onward)

        def may_use(c: str, b: str) -> bool:  # an edge a wave makes on the way must not raise the layer
            return (c, b) in cost and arrival[c] + cost[c, b] + onward[b] <= now + EPS

        waves = swaps_for(flows, found[1], may_use)
        if not waves or len(waves) > MAX_WAVES:  # (a long chain would stop half-way too often)
            self._no_layer_plan(p)
            return
        p.waves = [[(s[0], self.swap_ask(p.holder, s)) for s in wave] for wave in waves]
        self._send_wave(p)

    @staticmethod
    def swap_ask(h: str, swap: Swap) -> LayerSwap:
        a, b, c, d, rate = swap
        return LayerSwap(h, b, d, c, rate)

    def _no_layer_plan(self, p: _Plan) -> None:
        if not self.start_stage_round(p):
            self._plan = None

    def start_stage_round(self, p: _Plan) -> bool:
        """No layer plan pays: ask for a stage plan's figures (swarm/flow/stage_plans.py); True
        if asked."""
        return False

    def solve_stage(self, p: _Plan) -> None:
        """Solve and start the stage plan with what its asks brought."""
        self._plan = None

    def stage_info(self, src: str, msg: LayerAsk) -> None:
        """A stage mate plans our stage: answer with our flows onwards."""

    def _send_wave(self, p: _Plan) -> None:
        for initiator, ask in p.waves.pop(0):
            if initiator == self.id:
                self._on_swap(self.id, ask)
            else:
                self.send(initiator, ask)
        self.env.set_timer(self.id, PLAN_WAIT * self.env.retry_s, f"layer:{p.plan}")

    def _on_info(self, src: str, msg: LayerInfo) -> None:
        p = self._plan
        if p is None or msg.plan != p.plan or msg.holder != p.holder:
            return
        stage = not p.stage_solved and src in p.mates
        if not stage and (p.solved or src not in p.asked):
            return
        if (
            not math.isfinite(msg.arrival)
            or not math.isfinite(msg.room)
            or any(
                not (math.isfinite(x.rate) and math.isfinite(x.cost) and math.isfinite(x.onward))
                or x.rate < 0
                for x in msg.hops
            )
        ):
            return  # (a malformed answer leaves its sender out of the plan)
        if stage:
            p.mate_infos[src] = msg
            if p.mates <= p.mate_infos.keys():
                self.solve_stage(p)
            return
        p.infos[src] = msg
        if len(p.infos) == len(p.asked):
            self._solve(p)

    # ---------------------------------------------------------------- sender a
    def _on_ask(self, src: str, msg: LayerAsk) -> None:
        h = msg.holder
        if msg.stage:
            self.stage_info(src, msg)
            return
        if h not in self.holders or src not in self.next or self.last:
            return
        self.send(src, self.layer_info(h, msg.plan), reliable=False)

    def layer_info(self, h: str, plan: int, room: float = -1.0) -> LayerInfo:
        """Our answer to a plan: our worst route so far and every next hop's rate, cost and worst
        route onwards (`room` only for a stage plan)."""
        out = self.out[h]
        hops = tuple(
            LayerHop(v, out.get(v, 0.0), self.link(v), self.worst_of(h, v))
            for v in self.targets(h)
            if v not in self.holders
        )
        return LayerInfo(h, plan, self.fresh_arrival(h), hops, room=room)

    def _on_swap(self, src: str, msg: LayerSwap) -> None:
        h, b, d, c = msg.holder, msg.hop, msg.to, msg.partner
        # (from the planner: a peer of our next stage, or for a stage plan's out-layer our mate)
        planner = src == self.id or src in self.next or self.mate_known(src)
        if h not in self.holders or not planner or self.cancels:
            return
        if msg.onward is not None:
            self.stage_hand_over(h, msg)
            return
        if b not in self.next or d not in self.next or b == d or c in (self.id, b, d):
            return
        rate = min(msg.rate, self.out[h].get(b, 0.0)) if math.isfinite(msg.rate) else 0.0
        if rate <= EPS:
            return
        option = SwapOption(b, rate, self.worst_of(h, b), self._gen.get(b, 0))
        bid = self.fresh_arrival(h) + self.link(d)
        self.send_trade_ask(h, d, b, (option,), self.label(h), bid, critical=False, partner=c)

    def stage_hand_over(self, h: str, msg: LayerSwap) -> None:
        """A stage plan's hand-over for us to ask (swarm/flow/stage_plans.py)."""

    def on_layer(self, src: str, body: LayerAsk | LayerInfo | LayerSwap) -> None:
        if isinstance(body, LayerAsk):
            self._on_ask(src, body)
        elif isinstance(body, LayerInfo):
            self._on_info(src, body)
        else:
            self._on_swap(src, body)


__all__ = ["LayerPlans", "LAYER_PLANS", "PLAN_WAIT", "LAYER_COST_GAIN"]
