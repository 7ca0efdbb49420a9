"""Bids for a full next hop's capacity (preemption), the full peer's side of them, and sender swaps.

A part of `PeerAgent` (swarm/flow/peer.py): a peer whose excess finds no next hop with spare bids
for a full one (`Offer.preempt`, its path cost so far as the bid); the full peer hands back in-flows
that paid clearly more, and with limited links also in-flows whose sender can route elsewhere.
"""

from __future__ import annotations

from swarm.flow.labels import PeerLabels
from swarm.flow.messages import INF, Offer, Reply, Return
from swarm.flow.node import EPS

# With limited links, bids that moved flow are refunded this many times per peer (see `on_reply`).
# Link-limited sweep (`swarm bench flow-sweep --instances 30 --link-capacity --activation-mb 10`):
# messages per peer 360 without swaps, 405 with swaps and no refunds, 400 with 8, 450 unbounded;
# 8 is enough for 6 x 6 seed 224 to reach the exact maximum.
BID_REFUNDS = 8
PREEMPT_MARGIN_S = 0.001  # a bid must beat an in-flow's path cost by this much to displace it
# Without link limits too, a holder's bid at a full stage-0 peer displaces other holders' flow that
# came from further away (first-leg cost against first-leg cost), not only its own dearer in-flows.
# Holders race for shared capacity, and the far one that got there first kept it: whole-range seed
# 0 instance 28 (11 x 5, four holders) ended at 1.213 of the min-cost flow's max path with far
# holder h3 carrying 1.50 microbatches/s against 0.07 in the optimum (1.050 with such bids).
# docs/routing.md, "Holders bid across holders, and conversions".
CROSS_HOLDER_BIDS = True


class PeerBids(PeerLabels):
    """Preemption of a stage peer (the bids, budgets and in-flows are the peer's)."""

    bids: dict[str, dict[str, float]]
    preempts: int
    last: bool
    _refunds: int
    _preempt_offers: set[int]

    def arrival(self, h: str) -> float:
        bids = self.bids[h]
        return max((bids.get(u, 0.0) for u, r in self.inflow[h].items() if r > EPS), default=0.0)

    def _swappable(
        self, sender: str, h: str, label: int, taken: set[tuple[str, str]]
    ) -> list[tuple[int, float, str, str]]:
        """With limited links, in-flows of holder h whose sender is at least two labels below the
        bidder: that sender has a residual route that does not pass here (we are full, so it cannot
        push to us), so letting the bidder's flow in and handing theirs back is an augmenting path
        through our in-side (bidder -> us -> that sender -> its route). Whole-peer labels cannot see
        such a path: 6 stages x 6 peers, seed 224, stopped at 0.930 of the maximum for lack of it.
        Labels fall along it, so flow cannot circle; these go first (max flow before cost)."""
        if not self.link_limits:
            return []
        return [
            (1, -lab, h, u)
            for u in self.inflow[h]
            if u != sender
            and (h, u) not in taken
            and self.movable(h, u) > EPS
            and (lab := self.upstream_label(u, h)) + 1 < label
        ]

    def _evict(self, sender: str, h: str, rate: float, bid: float, label: int) -> float:
        """Preemption at a full peer: return in-flows whose path so far costs clearly more than `bid`
        (and, with limited links, first those whose sender can route elsewhere: `_swappable`).

        The displaced upstream gets its flow back and pushes it elsewhere or returns it, so the
        capacity of a full peer goes to the cheapest paths (an auction where the bid is the path cost
        so far; all flows through this peer share the same continuation).
        """
        got = 0.0
        # with limited links a holder may depend on a few peers its links reach, so flows of other
        # holders bid too (their senders push elsewhere or return it; each eviction needs a cheaper bid)
        kinds = self.holders if self.link_limits or self._holder_bid(sender, h) else (h,)
        worse = [
            (0, self.bids[g].get(u, 0.0), g, u)
            for g in kinds
            for u in self.inflow[g]
            if (u, g) != (sender, h)
            and self.movable(g, u) > EPS
            and self.bids[g].get(u, 0.0) > bid + PREEMPT_MARGIN_S
        ]
        worse += self._swappable(sender, h, label, {(g, u) for _, _, g, u in worse})
        for _, _, g, u in sorted(worse, reverse=True):
            if got >= rate - EPS:
                break
            moved = min(rate - got, self.movable(g, u))
            self.inflow[g][u] -= moved
            got += moved
            self.send(u, Return(g, moved, self.state()))
        return got

    def _holder_bid(self, sender: str, h: str) -> bool:
        """A holder's own bid at stage 0: it may displace other holders' flow (CROSS_HOLDER_BIDS)."""
        return CROSS_HOLDER_BIDS and self.stage == 0 and sender == h

    def _preempt(self, h: str, left: float) -> bool:
        """Excess and no next hop with spare: bid for a full next hop's capacity (budgeted)."""
        if self.last or self.preempts <= 0 or not self.improve:
            return False
        mine = self.label(h)
        full = [
            v
            for v in self.next
            if self.view_spare(v) <= EPS
            and self.target_label(h, v) < mine
            and v in self.views
            and self.room(v) > EPS
        ]
        if not full:
            return False
        v = min(full, key=lambda v: (self.link(v) + self.views[v].cheapest.get(h, INF), v))
        self.preempts -= 1
        left = min(left, self.room(v))
        oid = self.add_offer(h, v, left, None)
        if self.link_limits:
            self._preempt_offers.add(oid)
        bid = self.arrival(h) + self.link(v)
        self.send(v, Offer(h, left, oid, mine, bid=bid, preempt=1, state=self.state()))
        return True

    def on_reply(self, src: str, msg: Reply) -> None:
        """With limited links a bid that moved flow is refunded (up to BID_REFUNDS times): a full
        peer's swap of senders may be the only augmenting path left (see `_swappable`), and the
        budget of 4 stopped 6 x 6 seed 224 at 0.980 of the maximum."""
        if msg.offer_id in self._preempt_offers:
            self._preempt_offers.discard(msg.offer_id)
            if msg.accepted > EPS and self._refunds < BID_REFUNDS:
                self._refunds += 1
                self.preempts += 1
        super().on_reply(src, msg)


__all__ = ["PeerBids"]
