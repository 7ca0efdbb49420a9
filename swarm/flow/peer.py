"""The per-peer state machine of asynchronous push-relabel with GWTF's local improvement.

A stage peer receives flow from the previous stage (or from holders, for stage 0), and pushes it on
to the next stage (or back to its own holder, for the last stage). Flow is accounted per holder,
because microbatches return to the holder that sent them. Labels are per holder too: the residual
distance to that holder's sink, recomputed from what neighbours published ("relabel"), and kept
below the holder's own label while the sink is reachable. Excess with no admissible next hop is
returned upstream; when every next stage is full the labels rise above the holders' and the flow
drains back to the holders, which is how the maximum flow is found without any global view.
"""

from __future__ import annotations

from collections.abc import Iterable

from swarm.flow.agent import EPS, Env
from swarm.flow.ask_budget import dearer_news_to_all
from swarm.flow.conversions import PeerConversions
from swarm.flow.holder_ceiling import ceilings_apply
from swarm.flow.messages import (
    INF,
    Announce,
    Body,
    Cancel,
    CancelDone,
    Convert,
    ConvertBack,
    Exchange,
    ExchangeDone,
    HandOff,
    HandOffDone,
    HandOver,
    Moved,
    Offer,
    Reply,
    Return,
    State,
)
from swarm.flow.resync import Resyncs

REPAIR_MOVES = 2  # improvement moves (and preemptions) for a peer that lost flow to churn
# Improvement moves of a new peer's first convergence. Moves made while push-relabel is still finding
# the maximum flow are judged on routes that are about to change: on three sweeps
# (`swarm bench flow-sweep --instances 30 --seed 0/1/2`) a budget of 2 + next hops / 2 instead took
# the mean max path / opt from 1.083 to 1.131 and the messages per peer from 180 to 292, and no moves
# at all gave 1.084 at 177. Exchanges, which wait for calm, do the min-max work after that.
FIRST_MOVES = 2


# Stage peers make no direct moves (`Sender.try_improve`): a move judges only the sender's worst
# route onwards, and its flow then pushes on through the next hop's cheapest routes, rippling to the
# full bottleneck stage; exchanges and hand-overs judge the paths through every edge they change.
# On the whole-range sweep (4-16 x 3-30, seed 0, two message timings) the max path stayed within 5%
# on 19 / 15 of 30 with or without them, the mean path within 10% went 22 / 22 -> 23 / 25, and
# messages per peer 611 / 655 -> 569 / 570 (the worst instance 2,388 / 3,316 -> 1,389 / 1,198).
# With exact route figures (`Paths` news instead of the states' often empty `worst`), peers moved
# more and it got worse: 19 -> 14. Holders still move their flow to stage-0 peers with spare.
DIRECT_MOVES = False


class PeerAgent(PeerConversions):
    """One stage server's routing state: in-flows, out-flows, labels and the replies it owes."""

    def __init__(
        self,
        node_id: str,
        env: Env,
        stage: int,
        stages: int,
        holders: Iterable[str],
        capacity: float,
        seed: int = 0,
        improve: bool = True,
    ) -> None:
        super().__init__(node_id, env, stage, stages, holders, seed, improve)
        self.capacity = capacity
        self.inflow: dict[str, dict[str, float]] = {h: {} for h in self.holders}
        self.last = stage == stages - 1
        self._labels: dict[str, int] = {}
        self.bids: dict[str, dict[str, float]] = {h: {} for h in self.holders}
        self.preempts = 4
        self._refunds = 0  # bids refunded so far (at most BID_REFUNDS)
        self._preempt_offers: set[int] = set()  # our bids in flight (see `on_reply`)
        self._labels_fresh = False  # labels were just recomputed by on_offer
        self._returned = False  # settle() handed flow back upstream
        self.init_exchanges()
        self.init_hand_overs()
        self.init_corridors()
        self.init_resyncs()
        self.init_trade_notes()
        self.init_worst_walks()
        self.init_refresh_waves()
        self.init_onward_swaps()
        self.init_rotations()
        self.init_layer_plans()

    # ---------------------------------------------------------- accounting
    def carried(self) -> float:
        return sum(map(sum, map(dict.values, self.inflow.values())))  # (no generator: a hot path)

    def spare(self) -> float:
        return max(0.0, self.capacity - self.carried() - self.reserved)

    def in_room(self, u: str) -> float:
        """What the link from sender u can still bring us (inf unless links are limited)."""
        if not self.link_limits:
            return INF
        carried = sum(self.inflow[h].get(u, 0.0) for h in self.holders)
        return self.edge_cap(u, self.id) - carried - self.incoming_exchanges(u)

    def supply(self, h: str) -> float:
        return sum(self.inflow[h].values())

    def dearer_to_all(self) -> bool:
        return dearer_news_to_all(self.link_limits, len(self.prev))

    def senders(self) -> set[str]:
        return {u for flows in self.inflow.values() for u, r in flows.items() if r > EPS}

    def is_holder(self, node: str) -> bool:
        return node in self.holders

    def targets(self, h: str) -> list[str]:
        if self.last:
            return [h] if h in self.next else []
        return sorted(self.next)

    def target_spare(self, h: str, v: str) -> float:
        return self.room(h) if self.last else super().target_spare(h, v)

    def target_label(self, h: str, v: str) -> int:
        return 0 if self.last else super().target_label(h, v)

    def target_cheapest(self, h: str, v: str) -> float:
        return self.link(v) if self.last else super().target_cheapest(h, v)

    def target_worst(self, h: str, v: str) -> float:
        return self.link(v) if self.last else super().target_worst(h, v)

    def views_fold(self) -> bool:
        return not self.last  # the last stage's next hops are holders: their views do not count

    def _push_options(self, h: str, mine: int) -> list[tuple[float, str, float]]:
        if self.last:  # the holder's sink takes everything of its own (its link allowing), at label 0
            room = self.room(h) if h in self.next else 0.0
            return [(self.link(h), h, room)] if room > EPS and mine > 0 else []
        return super()._push_options(h, mine)

    def _cheapest_over_targets(self, h: str) -> float:
        if self.last:  # the holder's sink always takes its own microbatches back (link allowing)
            return self.link(h) if h in self.next and self.room(h) > EPS else INF
        return super()._cheapest_over_targets(h)

    def upstream_label(self, u: str, h: str) -> int:
        return self.src_label if self.is_holder(u) else self.view_label(u, h)

    def state(self) -> State:
        holders = self.holders
        if self.ready:  # `cheapest` of every holder, with the link sums synced once
            self.sync_links()
            cache = self._cheap_cache
            for h in holders:
                if h not in cache:
                    cache[h] = self._cheapest_over_targets(h)
            cheapest = {h: cache[h] for h in holders}
        else:
            cheapest = dict.fromkeys(holders, INF)
        out = self.out  # no out-flow of h: no used route to tell (`worst` is None)
        worst = {h: w for h in holders if out[h] and (w := self.worst(h)) is not None}
        labels, epochs = dict(self._labels), dict(self.epoch)
        takes = self.hand_overs != 0 and not self.link_limits  # (-1: not counted yet, see handover.py)
        # capacity held for a hand-over we wait on (`reserved`) is published as spare: `spare()`
        # keeps it from other senders, and told as fullness it flapped the stage above's labels
        # (tests/flow/test_reserved_spare.py; docs/routing.md, "Held capacity is not news")
        spare = max(0.0, self.capacity - self.carried())
        return State(self.id, self.stamp(), spare, labels, cheapest, worst, epochs, takes)

    # ------------------------------------------------------------ handlers
    def handle(self, src: str, body: Body) -> None:
        if isinstance(body, (Offer, Cancel, Return)) and getattr(body, "swap_from", None) is None:
            self.disturbed()  # our throughput may change: exchanges wait for calm
        if self.dispatch_sender(src, body):
            return
        if isinstance(body, Offer):
            self.on_offer(src, body)
        elif isinstance(body, Cancel):
            h = body.holder
            got = min(body.rate, self.movable(h, src)) if h in self.inflow else 0.0
            if got > 0:
                self.inflow[h][src] -= got
            else:
                got = 0.0
            self.send(src, CancelDone(body.cancel_id, h, got, self.state()))
        elif isinstance(body, Exchange):
            self.on_exchange(src, body)
        elif isinstance(body, ExchangeDone):
            self.on_exchange_done(src, body)
        elif isinstance(body, Moved):
            self.on_moved(src, body)
        elif isinstance(body, HandOver):
            self.on_hand_over(src, body)
        elif isinstance(body, HandOff):
            self.on_hand_off(src, body)
        elif isinstance(body, HandOffDone):
            self.on_hand_off_done(src, body)
        elif isinstance(body, Convert):
            self.on_convert(src, body)
        elif isinstance(body, ConvertBack):
            self.on_convert_back(src, body)

    def on_offer(self, src: str, msg: Offer) -> None:
        """Accept up to spare capacity if we are below the sender; otherwise reject with our state."""
        h = msg.holder
        if msg.state is not None:
            self.observe(msg.state)
        accepted = 0.0
        # a sender still in an older relabel epoch gets our state (and the epoch) and offers again
        current = self.same_epoch(msg.state, h)
        if msg.swap_from is not None:  # an exchange only: no new flow, so labels do not matter
            if not (current and src in self.prev and h in self.inflow and self.start_exchange(src, msg)):
                self.send(src, Reply(msg.offer_id, h, 0.0, self.state()))
            return  # on a trade b answers first, and the reply goes out with its outcome
        elif current and src in self.prev and h in self.inflow and self.compute_label(h) < msg.label:
            room = max(0.0, self.in_room(src))
            accepted = min(msg.rate, self.spare(), room)
            if msg.preempt and msg.bid is not None and accepted < min(msg.rate, room) - EPS:
                accepted += self._evict(src, h, min(msg.rate, room) - accepted, msg.bid, msg.label)
        elif current and msg.preempt and msg.bid is not None and src == h and h in self.inflow:
            # (our labels keep h's flow out: other holders' flow here may become h's instead)
            accepted = self.convert_for(h, msg.rate, msg.bid)
        if accepted > EPS:
            self.inflow[h][src] = self.inflow[h].get(src, 0.0) + accepted
            if msg.bid is not None:
                self.bids[h][src] = msg.bid
        else:
            accepted = 0.0
        self.relabel()
        self._labels_fresh = True  # settle() follows at once: no need to relabel again
        self.send(src, Reply(msg.offer_id, h, accepted, self.state()))

    def timer(self, token: str) -> None:
        """The calm wait before exchanges ended (settle() follows and tries them), or a stage mate
        did not answer an exchange in time."""
        if token == "polish":
            self._polish_armed = False
        elif token.startswith("exchange:"):
            self.expire_exchange(int(token.split(":", 1)[1]))
        elif token == "wave":
            self.on_wave_timer()
        elif token.startswith("onward:"):
            self.onward_timeout(int(token.split(":", 1)[1]))
        elif token == "rotate_go":
            self.on_go_timer()
        elif token.startswith("layer:"):
            self.layer_timer(int(token.split(":", 1)[1]))
        elif token.startswith("room_"):
            self.room_timer(token)

    def forget(self, node: str) -> None:
        """A neighbour left: its flow vanishes. Only a peer that lost flow re-plans, with a few moves
        (REPAIR_MOVES); the others keep their routes and drop what is left of their improvement
        budget, so that a churn event costs a bounded repair, not a second optimisation."""
        inflow = {h: self.inflow[h].get(node, 0.0) for h in self.holders}
        out = {h: self.out[h].get(node, 0.0) for h in self.holders}
        lost = any(r > EPS for r in (*inflow.values(), *out.values()))
        self.write_off(node, inflow, out)
        for h in self.holders:
            self.inflow[h].pop(node, None)
            self.bids[h].pop(node, None)
        self.forget_target(node)
        self.drop_hand_offs(node)
        self.forget_paths(node)
        self.budget = self.preempts = REPAIR_MOVES if lost else 0
        if lost:
            self.reset_exchanges()
        self.disturbed()

    def drop_edges(self, node: str) -> None:
        """`node` wrote us off (we are alive after all): drop our side of our edges with it, as it
        did, and re-plan like a peer that lost flow. Trade notes stay: node did not leave."""
        lost = any(max(self.inflow[h].get(node, 0.0), self.out[h].get(node, 0.0)) > EPS for h in self.holders)
        for h in self.holders:
            self.inflow[h].pop(node, None)
            self.bids[h].pop(node, None)
        # as a: asks to node that b may have acted on are settled with b (`Resync`); no trade notes
        # (swarm/flow/trade_notes.py), which are for a b that left: node did not
        Resyncs.forget_target(self, node)
        self.drop_hand_offs(node)
        self.drop_initiator(node)
        self._told.pop(node, None)  # it dropped what it knew of us too
        if lost:
            self.budget = max(self.budget, REPAIR_MOVES)
            self.reset_exchanges()
        self.disturbed()

    def on_joined(self) -> None:
        """A newcomer announces itself; peers with excess push to it, nobody re-plans for it."""
        self.budget = self.preempts = 0
        self.reset_exchanges()
        self.disturbed()

    def base_budget(self) -> int:
        return 2 + len(self.next) // 2

    def set_capacity(self, capacity: float) -> None:
        grew, self.capacity = capacity > self.capacity + EPS, capacity
        if grew:
            self.tell_room()
        self.reset_exchanges()
        self.budget = max(self.budget, self.base_budget())
        self.settle()

    def tell_room(self) -> None:
        """We joined or grew: holders that capped their refused demand may push it again
        (swarm/flow/holder_ceiling.py; only where that applies)."""
        if ceilings_apply(self.link_limits, len(self.holders), self.env):
            self.send_room_news(self.holders)

    # ---------------------------------------------------------------- core
    def settle(self) -> None:
        """Relabel, then push / return / cancel until every holder's excess is handled, then improve.

        Labels depend only on views and in-flows, so they are recomputed at the end only if flow was
        handed back upstream here.
        """
        if not self._labels_fresh:
            self.relabel()
        self._labels_fresh = self._returned = False
        over = self.carried() - self.capacity
        if over > EPS:  # capacity dropped: hand the most expensive in-flows back
            self._return_most_expensive(over)
        busy = False
        ready = self.check_ready()
        inflow, out, offered = self.inflow, self.out, self._offered_h
        for h in self.holders if ready else ():
            if not inflow[h] and not out[h] and not offered.get(h):
                continue  # none of h's flow here: no excess (most holders, with many of them)
            ex = self.excess(h)
            if ex > EPS:
                left = self.push(h)
                if left > EPS:
                    if self._preempt(h, left):
                        busy = True
                    else:
                        left = self._return(h, left)
                    busy = busy or left > EPS
            elif ex < -EPS:
                self.cancel_deficit(h)
        if not busy and not self.offers and not self.cancels:
            (DIRECT_MOVES and self.try_improve()) or self.try_polish()
        if self._returned:
            self.relabel()
        self.announce()

    def _return(self, h: str, amount: float) -> float:
        """Return flow to upstreams below us (most expensive edge first); returns what is left."""
        mine = self.label(h)
        ups = [u for u in self.inflow[h] if self.movable(h, u) > EPS and self.upstream_label(u, h) < mine]
        ups.sort(key=lambda u: (-self.env.cost(u, self.id), u))
        return self._give_back([(h, u) for u in ups], amount)

    def _return_most_expensive(self, amount: float) -> None:
        cost = self.env.cost
        flows = [
            (cost(u, self.id), h, u) for h, f in self.inflow.items() for u in f if self.movable(h, u) > EPS
        ]
        self._give_back([(h, u) for _, h, u in sorted(flows, reverse=True)], amount)

    def _give_back(self, edges: list[tuple[str, str]], amount: float) -> float:
        """Hand `amount` back over the in-edges (holder, sender) in order; returns what is left."""
        for h, u in edges:
            if amount <= EPS:
                break
            rate = min(amount, self.movable(h, u))
            self.inflow[h][u] -= rate
            amount -= rate
            self._returned = True
            self.send(u, Return(h, rate, self.state()))
        return amount


__all__ = ["PeerAgent", "Announce"]
