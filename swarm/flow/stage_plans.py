"""Stage plans: where no layer plan pays, the planner re-plans its whole stage, which peers carry
how much and from whom to whom, and has the plan carried out by hand-overs and exchanges.

A layer plan keeps every peer's throughput. Offline, seed 2 instance 14 of the whole-range sweep
(12 x 19) stayed at 1.103x the min-cost flow's max path under layer plans, and re-solving one stage
at a time with its throughputs free took it to 0.994 (`stage_assignment.plan_stage`; docs/routing.md:
"Stage plans").

Roles and messages (advisory; only hand-overs and exchanges move flow, with their usual guarantees):
- The layer planner (swarm/flow/layer_plans.py) found nothing to do. It learnt its stage mates from
  its senders' answers (their next hops) and asks each of them with `LayerAsk(stage=True)`; each
  answers `LayerInfo` with its next hops (rate, cost, worst route onwards) and `room`, what it may
  carry of the holder's flow (its flow plus its spare capacity).
- After PLAN_WAIT retry periods (or once all answered) it solves the stage (`plan_stage`), taken
  when the stage's worst path gets cheaper by over GAIN_S. Answers that disagree (flow in flight)
  make the plan infeasible, and then nothing is done.
- The moves (`stage_moves.moves_for`) are hand-overs and trades in both layers, chosen one at a
  time so that no path through the stage gets dearer on the way, and sent in waves PLAN_WAIT
  retry periods apart (at most STAGE_WAVES). A hand-over goes to its sender a as a
  `LayerSwap(onward=z)`: a asks d to take its flow on b over and run it on to z, as a one-step
  corridor (b judges nothing; d needs the spare). Trades go as a layer plan's: to senders of the
  stage before for the in-layer, to mates (or the planner itself) for the out-layer. Where only
  part of the plan can be reached that way, that part is made if it pays on its own.

Not at the first or last stage (a holder is on one side) and, like layer plans, only where walks run.
"""

from __future__ import annotations

from dataclasses import dataclass

from swarm.flow.layer_plans import PLAN_WAIT, LayerPlans, _Plan
from swarm.flow.messages import LayerAsk, LayerInfo, LayerSwap
from swarm.flow.news import EPS
from swarm.flow.stage_assignment import plan_stage, stage_bottleneck
from swarm.flow.stage_moves import moves_for
from swarm.flow.swap_asks import GAIN_S

STAGE_PLANS = True
STAGE_WAVES = 12  # a plan that takes more waves of moves is not made


Flows = dict[tuple[str, str], float]


@dataclass
class _Figures:
    """What the planner heard: flows in and out of its stage, edge costs and path figures."""

    flows_in: Flows
    flows_out: Flows
    arrival: dict[str, float]
    cost_in: Flows
    cost_out: Flows
    onward: dict[str, float]
    room: dict[str, float]


class StagePlans(LayerPlans):
    """The planner, mate and sender roles of a stage peer in stage plans."""

    def from_mate(self, body) -> bool:  # noqa: ANN001 - a `Body`
        """A stage plan's ask and answer, and its out-layer trades, come from stage mates."""
        if isinstance(body, LayerAsk):
            return body.stage or super().from_mate(body)
        if isinstance(body, LayerInfo):
            return body.room >= 0.0 or super().from_mate(body)
        return isinstance(body, LayerSwap) or super().from_mate(body)

    # ------------------------------------------------------------------ planner
    def start_stage_round(self, p: _Plan) -> bool:
        h = p.holder
        if not STAGE_PLANS or self.last or any(v in self.holders for v in self.prev) or h not in self.out:
            return False
        mates = {x.hop for info in p.infos.values() for x in info.hops} - {*self.holders, self.id}
        mates = {b for b in mates if self.mate_known(b)}
        if not mates or len(p.infos) < len(p.asked):
            return False  # (a sender that did not answer: its flows would be missing from the plan)
        p.mates, p.stage_solved = mates, False
        p.mate_infos[self.id] = self._onward_info(h, p.plan)
        for b in sorted(mates):
            self.send(b, LayerAsk(h, p.plan, stage=True), reliable=False)
        self.env.set_timer(self.id, PLAN_WAIT * self.env.retry_s, f"layer:{p.plan}")
        return True

    def solve_stage(self, p: _Plan) -> None:
        p.stage_solved = True
        h = p.holder
        room = {b: info.room for b, info in p.mate_infos.items() if info.room >= 0.0}
        flows_in: dict[tuple[str, str], float] = {}
        cost_in: dict[tuple[str, str], float] = {}
        arrival: dict[str, float] = {}
        for a, info in p.infos.items():
            arrival[a] = info.arrival
            for x in info.hops:
                cost_in[(a, x.hop)] = x.cost
                if x.rate > EPS:
                    flows_in[(a, x.hop)] = x.rate
        flows_out: dict[tuple[str, str], float] = {}
        cost_out: dict[tuple[str, str], float] = {}
        onward: dict[str, float] = {}
        for b, info in p.mate_infos.items():
            for x in info.hops:
                cost_out[(b, x.hop)] = x.cost
                if x.rate > EPS:  # (fresh from a sender of that hop, as in layer plans)
                    flows_out[(b, x.hop)] = x.rate
                    onward[x.hop] = max(onward.get(x.hop, 0.0), x.onward)
        cost_out = {e: c for e, c in cost_out.items() if e[1] in onward}
        figures = _Figures(flows_in, flows_out, arrival, cost_in, cost_out, onward, room)
        top = None
        for keep in (False, True):  # cheapest flows first; those that move least if they are unsafe
            found = plan_stage(
                flows_in, flows_out, arrival, cost_in, cost_out, onward, room, GAIN_S, keep, top
            )
            waves = self._waves(h, figures, found[1], found[2]) if found is not None else None
            if waves:
                p.waves = waves
                self._send_wave(p)
                return
            if found is None:
                break
            top = found[0]
        self._plan = None

    def _waves(self, h: str, f: _Figures, new_in: Flows, new_out: Flows) -> list[list[tuple[str, LayerSwap]]]:
        """The plan as waves of asks (`stage_moves.moves_for`: hand-overs and trades in both
        layers, the stage no dearer on the way); none if that takes more than MAX_WAVES waves, or
        if the moves it finds (all of the plan, or the part that is safe) do not pay."""
        dear = {(a, b): f.arrival[a] + c for (a, b), c in f.cost_in.items()}
        dear.update({(b, c): k + f.onward[c] for (b, c), k in f.cost_out.items()})
        now = stage_bottleneck(f.flows_in, f.flows_out, dear, dear)
        waves, end_in, end_out = moves_for(f.flows_in, f.flows_out, new_in, new_out, dear, now)
        end = stage_bottleneck(end_in, end_out, dear, dear)
        if not waves or len(waves) > STAGE_WAVES or end >= now - GAIN_S:
            return []  # (too long to go through, or the part that is safe does not pay)
        asks: list[list[tuple[str, LayerSwap]]] = []
        for wave in waves:
            asks.append([])
            for kind, a, b, c, d, rate in wave:
                if kind == "hand":  # (a, b, d, z): a asks d to take its flow on b over, on to z
                    asks[-1].append((a, LayerSwap(h, b, c, "", rate, onward=d)))
                else:
                    asks[-1].append((a, self.swap_ask(h, (a, b, c, d, rate))))
        return asks

    # ------------------------------------------------------------------ mate
    def _onward_info(self, h: str, plan: int) -> LayerInfo:
        return self.layer_info(h, plan, room=self.supply(h) + self.spare())

    def stage_info(self, src: str, msg: LayerAsk) -> None:
        h = msg.holder
        if h not in self.holders or h not in self.out or self.last or src == self.id:
            return
        if not self.mate_known(src):
            return
        self.send(src, self._onward_info(h, msg.plan), reliable=False)

    # ------------------------------------------------------------------ sender
    def stage_hand_over(self, h: str, msg: LayerSwap) -> None:
        """Ask `msg.to` to take our flow on `msg.hop` over and run it on to `msg.onward`."""
        b, d, z = msg.hop, msg.to, msg.onward
        if z is None or b == d or d not in self.next or b not in self.next or z in (b, d):
            return
        rate = min(msg.rate, self.out[h].get(b, 0.0))
        pushing = any(old is None for _, _, _, old in self.offers.values())
        if rate <= EPS or pushing:
            return
        self.corridor_step(h, d, b, rate, (), (z,))  # (a corridor of one step: no taker after d)


__all__ = ["StagePlans", "STAGE_PLANS"]
