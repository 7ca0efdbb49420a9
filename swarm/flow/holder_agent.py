"""A data holder in the routing protocol: the source and the sink of its own microbatches.

As a source it pushes its demand into stage 0 with the fixed label `stages + 1` (push-relabel's
source height: a stage-0 peer that can still reach a sink has a lower label). As a sink it takes
back everything of its own commodity that the last stage sends it. It also watches what comes home:
flow it sent that stays stuck in the swarm starts a relabel epoch (push-relabel's global relabel,
done as a wave of news; see `Node.observe`).
"""

from __future__ import annotations

from swarm.flow import bids, conversions
from swarm.flow.agent import EPS, Env, Sender
from swarm.flow.holder_ceiling import HolderCeiling
from swarm.flow.holder_hand_overs import HolderHandOvers
from swarm.flow.messages import Body, Cancel, CancelDone, Moved, Offer, Reply, State
from swarm.flow.node import Node
from swarm.flow.ramp import HolderRamp

# A relabel epoch (see `HolderAgent.timer`) starts when, for STALL_WAIT retry periods, nothing more
# came home and more than STUCK_SHARE of what we send is stuck in the swarm. An epoch costs a wave of
# news over every edge: worth it for a drain, not for the last few microbatches of a big swarm.
STALL_WAIT = 2.0
STUCK_SHARE = 0.1
# Not when several holders share limited links (multi-commodity, where the protocol is not exact
# anyway): re-routing one holder's flow there can displace the others' for good. Measured on the
# simulator's llama-1.5b geo swarm (4 holders): the first convergence reached 94.3 instead of 97.6
# microbatches/s (exact maximum 98.0) when holders started epochs.
EPOCHS_WITH_SHARED_LINKS = False
STALL_EPOCHS = 3  # epochs in a row while nothing moves at all (then wait for something to move)
# Flow that has not come home yet may still be on its way: until the first of it comes home, the
# stall check starts no epoch for FIRST_TRIP retry periods per hop (stages + 1 hops; an offer's round
# trip takes at most half a retry period). Before, deep swarms started epochs while their first flow
# was still moving down the stages: at 1,000 x 16 with four holders (seed 2) three holders started
# one at 1.44 s with nothing home yet (the first came home at 1.41-1.50 s), and the three waves of
# news took the run from 405,681 to 821,183 messages, to the same flow. Only the first trip: flow
# re-sent after churn follows routes that were home before.
FIRST_TRIP = 1.0


class HolderAgent(HolderHandOvers, HolderRamp, HolderCeiling):
    """Source and sink of one commodity (this holder's microbatches)."""

    trades = False  # improvement moves go to stage-0 peers with spare only (see `Sender.trades`)

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
        self.preempts = -1  # bids for full stage-0 peers; set at first use
        self._bid_at: set[str] = set()  # stage-0 peers bid at since a neighbour last left
        self._stall_armed = False
        self._stall_mark = (-1.0, -1.0)  # (served, home) when the stall timer was armed
        self._epochs_left = STALL_EPOCHS
        self._first_out: float | None = None  # when our first flow went out (see FIRST_TRIP)
        self._came_home = False  # whether any of our flow ever came home
        self.init_walks()
        self.init_holder_hand_overs()
        self.init_ramp()
        self.init_ceiling()

    def supply(self, h: str) -> float:
        return self.capped(self.ramped())

    def label(self, h: str) -> int:
        return self.src_label

    def state(self) -> State:
        return State(self.id, self.stamp(), 0.0, {self.id: self.src_label}, {}, {}, dict(self.epoch))

    def home(self) -> float:
        """Microbatches/s of ours the last stage brings back to our sink."""
        return sum(self.sink_in.values())

    def _watch_stall(self) -> None:
        """While flow we sent does not all come home, check every STALL_WAIT retry periods whether
        anything moved meanwhile; if not, the excess is stuck in the swarm (see `timer`). After
        STALL_EPOCHS epochs in a row the check waits until something moves, so a swarm that cannot
        do better goes quiet."""
        if self.link_limits and len(self.all_holders) > 1 and not EPOCHS_WITH_SHARED_LINKS:
            return
        if not getattr(self.env, "relabel_epochs", True):
            return  # the environment keeps them off (the live swarm, see swarm/routing/live.py)
        served, home = self.served(), self.home()
        if home > EPS:
            self._came_home = True  # (for good: only the first flow's trip is waited for)
        elif self._first_out is None and served > EPS:
            self._first_out = self.now
        if served - home <= EPS:
            self._epochs_left = STALL_EPOCHS
            return
        if self._moved():
            self._epochs_left = STALL_EPOCHS
        if self._stall_armed or self._epochs_left <= 0:
            return
        self._stall_armed = True
        self._stall_mark = (served, home)
        self.env.set_timer(self.id, STALL_WAIT * self.env.retry_s, "stall")

    def _on_its_way(self) -> bool:
        """Our first flow is out and none of it came home yet, for less than its trip (FIRST_TRIP)."""
        if self._came_home or self._first_out is None or self.home() > EPS:
            return False
        return self.now - self._first_out < FIRST_TRIP * self.src_label * self.env.retry_s

    def _moved(self) -> bool:
        served, home = self._stall_mark
        return abs(self.served() - served) > EPS or abs(self.home() - home) > EPS

    def timer(self, token: str) -> None:
        """Walks, refresh waves, the ramp and the ceiling (their own modules), and the stall check."""
        handler = {
            "walk": self.on_walk_timer,
            "wave": self.on_wave_timer,
            "quiet": self.on_quiet_timer,
            "may_cap": self.on_may_cap_timer,
            "stall": self.on_stall_timer,
        }.get(token)
        if handler is not None:
            handler()
        elif token == "ramp" and self.on_ramp_timer():
            self.settle()

    def on_stall_timer(self) -> None:
        """Stall check: flow stuck and nothing more home for a while means excess sits in the swarm
        with labels counting up through residual cycles (also while it drains back, one label step
        per exchange of news). A new relabel epoch replaces that count with a fresh descent
        (`Node.observe`)."""
        self._stall_armed = False
        stuck = self.served() - self.home() > STUCK_SHARE * self.served() + EPS
        if stuck and self._on_its_way():
            return  # (the check runs again from `settle`, as after a move)
        if stuck and self.home() <= self._stall_mark[1] + EPS and self._epochs_left > 0:
            self._epochs_left -= 1
            self.start_epoch()

    def start_epoch(self) -> None:
        """Begin a new relabel epoch for our commodity and tell our neighbours (reliably)."""
        h = self.id
        self.epoch[h] = self.epoch.get(h, 0) + 1
        self.reread_views()
        Node.announce(self)

    def handle(self, src: str, body: Body) -> None:
        if self.dispatch_sender(src, body):
            return
        if isinstance(body, Moved):  # a hand-over we asked for, answered after "nothing so far"
            self.on_moved(src, body)
        elif isinstance(body, Offer):  # as the sink: everything of our own commodity comes home
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
        self.paths.pop(node, None)  # (its path news, for walks)
        self.forget_target(node)
        self.budget = self.preempts = 2 if lost else 0
        self._bid_at.clear()
        if lost:
            self.ramp_again()
        self.renew_walks()

    def drop_edges(self, node: str) -> None:
        """`node` wrote us off (see `Node._same_generation`): drop our side of our edges with it."""
        self.sink_in.pop(node, None)
        Sender.forget_target(self, node)
        self._told.pop(node, None)

    def on_joined(self) -> None:
        self.budget = self.preempts = 0
        self.renew_walks()

    def set_demand(self, demand: float) -> None:
        old, self.demand = self.demand, demand
        self.tell_room(old)
        self.renew_walks()
        self.settle()

    def settle(self) -> None:
        """Push unserved demand, withdraw flow above demand, then try to improve."""
        h = self.id
        if not self.check_ready():
            return
        ex = self.excess(h)
        pushed = False
        if ex > EPS:
            left = self.push(h)
            pushed = left < ex - EPS
            if left > EPS and (self.link_limits or (bids.CROSS_HOLDER_BIDS and len(self.all_holders) > 1)):
                self._preempt(left)
        elif ex < -EPS:
            self.cancel_deficit(h)
        if not self.offers and not self.cancels:
            self.try_improve()
        self._watch_stall()
        self.watch_refusal(pushed)
        self.arm_walk()
        self.arm_ramp()
        self.announce()

    def _preempt(self, left: float) -> None:
        """Demand left and every stage-0 peer our links reach is full: bid for the cheapest one's
        capacity (budgeted; other holders' flow that came from further away gives way, see
        `bids.CROSS_HOLDER_BIDS`, and with limited links other holders may hold the peers we depend on)."""
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
            and (self.target_label(h, v) < mine or self._converts())
        ]
        if not full:
            return
        if not self.link_limits:  # (bids across holders: each full peer once, cheapest first)
            full = [v for v in full if v not in self._bid_at] or full
        v = min(full, key=lambda v: (self.link(v), v))
        self._bid_at.add(v)
        self.preempts -= 1
        rate = min(left, self.room(v))
        oid = self.add_offer(h, v, rate, None)
        self.send(v, Offer(h, rate, oid, mine, bid=self.link(v), preempt=1, state=self.state()))

    def _converts(self) -> bool:
        """Without link limits a full stage-0 peer that does not reach our sink may still turn
        other holders' flow into ours (swarm/flow/conversions.py): bid whatever its labels."""
        return conversions.CONVERSIONS and not self.link_limits

    def announce(self) -> None:
        """A holder's label never changes; stage peers know it, so there is nothing to publish."""

    def served(self) -> float:
        return sum(self.out[self.id].values())
