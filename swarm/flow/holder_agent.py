"""A data holder in the routing protocol: the source and the sink of its own microbatches.

As a source it pushes its demand into stage 0 with the fixed label `stages + 1` (push-relabel's
source height: a stage-0 peer that can still reach a sink has a lower label). As a sink it takes
back everything of its own commodity that the last stage sends it.
"""

from __future__ import annotations

from swarm.flow.agent import EPS, Env, Sender
from swarm.flow.messages import Body, Cancel, CancelDone, Offer, Reply, State


class HolderAgent(Sender):
    """Source and sink of one commodity (this holder's microbatches)."""

    def __init__(
        self,
        node_id: str,
        env: Env,
        stages: int,
        holders: list[str],
        demand: float,
        seed: int = 0,
        improve: bool = True,
    ) -> None:
        super().__init__(node_id, env, -1, stages, [node_id], seed, improve)
        self.all_holders = tuple(holders)
        self.demand = demand
        self.sink_in: dict[str, float] = {}
        self.preempts = -1  # bids for full stage-0 peers (with limited links); set at first use

    def supply(self, h: str) -> float:
        return self.demand

    def label(self, h: str) -> int:
        return self.src_label

    def state(self) -> State:
        return State(self.id, self.stamp(), 0.0, {self.id: self.src_label}, {}, {})

    def handle(self, src: str, body: Body) -> None:
        if self.dispatch_sender(src, body):
            return
        if isinstance(body, Offer):  # as the sink: everything of our own commodity comes home
            ok = body.holder == self.id and src in self.prev
            room = self.edge_cap(src, self.id) - self.sink_in.get(src, 0.0)
            accepted = max(0.0, min(body.rate, room)) if ok else 0.0
            if ok:
                self.sink_in[src] = self.sink_in.get(src, 0.0) + accepted
            self.send(src, Reply(body.offer_id, body.holder, accepted, self.state()))
        elif isinstance(body, Cancel):
            got = min(body.rate, self.sink_in.get(src, 0.0)) if body.holder == self.id else 0.0
            if got > 0:
                self.sink_in[src] -= got
            self.send(src, CancelDone(body.cancel_id, body.holder, got, self.state()))

    def forget(self, node: str) -> None:
        """A neighbour left: like a peer, only a holder that lost flow gets a few moves back."""
        h = self.id
        lost = self.out[h].get(node, 0.0) > EPS
        self.write_off(node, {h: self.sink_in.get(node, 0.0)}, {h: self.out[h].get(node, 0.0)})
        self.sink_in.pop(node, None)
        self.forget_target(node)
        self.budget = self.preempts = 2 if lost else 0

    def on_joined(self) -> None:
        self.budget = self.preempts = 0

    def set_demand(self, demand: float) -> None:
        self.demand = demand
        self.settle()

    def settle(self) -> None:
        """Push unserved demand, withdraw flow above demand, then try to improve."""
        h = self.id
        if not self.check_ready():
            return
        ex = self.excess(h)
        if ex > EPS:
            left = self.push(h)
            if left > EPS and self.link_limits:
                self._preempt(left)
        elif ex < -EPS:
            self.cancel_deficit(h)
        if not self.offers and not self.cancels:
            self.try_improve()
        self.announce()

    def _preempt(self, left: float) -> None:
        """Demand left and every stage-0 peer our links reach is full: bid for the cheapest one's
        capacity (budgeted; with limited links other holders may hold the peers we depend on)."""
        if self.preempts < 0:
            self.preempts = len(self.next)
        if self.preempts <= 0 or not self.improve:
            return
        h, mine = self.id, self.src_label
        full = [
            v
            for v in self.next
            if v in self.views
            and self.view_spare(v) <= EPS
            and self.room(v) > EPS
            and self.target_label(h, v) < mine
        ]
        if not full:
            return
        v = min(full, key=lambda v: (self.link(v), v))
        self.preempts -= 1
        rate = min(left, self.room(v))
        oid = self.add_offer(h, v, rate, None)
        self.send(v, Offer(h, rate, oid, mine, bid=self.link(v), preempt=1, state=self.state()))

    def announce(self) -> None:
        """A holder's label never changes; stage peers know it, so there is nothing to publish."""

    def served(self) -> float:
        return sum(self.out[self.id].values())
