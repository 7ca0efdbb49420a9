"""Exchange asks: the initiator's side of an exchange (swarm/flow/exchange.py). After a calm wait,
a stage peer scans its next hops for mates d closer than a hop b it uses (or with a cheaper worst
route onwards) and asks each d, in batches and within the ask budget (swarm/flow/ask_budget.py), to
trade one of its in-flows for our flow on b.
"""

from __future__ import annotations

from swarm.flow.ask_budget import SWAP_BATCH, SWAP_REFUND, SWAP_REFUND_MAX, swap_budget
from swarm.flow.messages import Offer, SwapOption
from swarm.flow.news import EPS
from swarm.flow.path_news import PathNews

CALM_WAIT = 20.0  # retry periods a peer must go undisturbed before it starts exchanges
GAIN_S = 0.02  # an exchange must save more than this (seconds of path cost) to be made
# An exchange ask offers d up to this many of the initiator's next hops to trade with (those the
# initiator's scan found worth a try for d, best first); d picks the trade that pays most. On three
# sweeps (`swarm bench flow-sweep --instances 30 --seed 0/1/2`), 1 (one hop per ask) gave a max path
# 1.052x the min-cost flow's (mean) and a mean path within 10% of it on 61 of 90, at 217 messages per
# peer; 4 gives 1.036x and 65, at 233.
WIDE_ASKS = 4


class SwapAsks(PathNews):
    """The exchange initiator a: when to ask, whom, for which hops; refunds for trades made."""

    def init_swap_asks(self) -> None:
        self.init_path_news()
        self.swap_budget = -1  # set from the number of next hops at the first try
        self._refunded = 0
        self._swap_tried: set[tuple[str, str, str]] = set()
        self._calm_since = 0.0
        self._polish_armed = False

    def disturbed(self) -> None:
        """Someone changed our flows (offer, return, cancel, churn): exchanges wait for calm again."""
        self._calm_since = self.now

    def reset_exchanges(self) -> None:
        """Churn or a capacity change: the flows around us moved, every exchange may be worth a try."""
        self._swap_tried.clear()
        self.swap_budget = -1
        self._refunded = 0

    def on_paths(self) -> None:
        """New path costs: trades tried before may pay now (the budget still bounds them)."""
        self._swap_tried.clear()
        self.announce()  # our own path costs may have moved
        if not self.offers and not self.cancels:
            self.try_polish()

    def try_polish(self) -> bool:
        """Start an exchange once this peer has been left alone for CALM_WAIT retry periods.

        An exchange only pays when the flows around it stay put; tried while the maximum flow is
        still being found, it trades edges that pushes and returns trade again.
        """
        if self.swap_budget < 0:
            self.swap_budget = swap_budget(len(self.next))
        if not self.improve or self.swap_budget <= 0:
            return False
        wait = self._calm_since + CALM_WAIT * self.env.retry_s - self.now
        if wait > EPS:
            if not self._polish_armed:
                self._polish_armed = True
                self.env.set_timer(self.id, wait, "polish")
            return False
        return self.try_swap()

    def try_swap(self) -> bool:
        """Ask next hops d, closer than a current next hop b, to trade an in-flow for ours.

        Every improving trade makes one of its two sides cheaper, so trying only next hops closer
        than the current one finds them all; each (holder, b, d) is tried once, up to SWAP_BATCH
        at a time (b never gives more than it has, so parallel asks cannot over-move).
        """
        if self.offers or self.cancels:
            return False
        options: list[tuple[float, str, str, str]] = []
        tried, link, onwards = self._swap_tried, self.link, self.worst_of
        holders = self.holders
        for h in holders:
            used = [(v, link(v), link(v) + onwards(h, v)) for v, r in self.out[h].items() if r > EPS]
            if not used:
                continue
            farthest = max(there for _, there, _ in used) - EPS
            dearest = max(there_worst for _, _, there_worst in used) - GAIN_S - EPS
            for d in self.targets(h):
                if d in holders:
                    continue
                here = link(d)
                here_worst = here + onwards(h, d)
                if here >= farthest and here_worst >= dearest:
                    continue  # neither closer nor cheaper onwards than any hop we use
                for b, there, there_worst in used:
                    # closer (the four edges may cost less), or a cheaper worst route onwards (the
                    # most expensive path through them may get cheaper)
                    gain = here - there
                    other = here_worst - there_worst + GAIN_S
                    if other < gain:
                        gain = other
                    if gain < -EPS and b != d and (h, b, d) not in tried:
                        options.append((gain, h, b, d))
        options.sort()
        # one ask offers d several of our hops to trade with (those the scan found worth it, best first)
        hops_for: dict[tuple[str, str], list[str]] = {}
        for _, h, b, d in options:
            hops_for.setdefault((h, d), []).append(b)
        asked: set[str] = set()
        for _, h, b, d in options:
            if len(asked) >= min(SWAP_BATCH, self.swap_budget):
                break
            if d in asked:
                continue
            asked.add(d)
            hops = hops_for[(h, d)][:WIDE_ASKS]
            tried.update((h, x, d) for x in hops)
            room = self.room(d)
            rates = [(x, min(self.out[h][x], room)) for x in hops]
            wide = tuple(SwapOption(x, r, onwards(h, x), self._gen.get(x, 0)) for x, r in rates if r > EPS)
            if not wide:
                continue
            rate = max(o.rate for o in wide)
            oid = self.add_offer(h, d, rate, b)
            self._old_gen[oid] = {o.hop: self._gen.get(o.hop, 0) for o in wide}
            self.asked(oid, d, h, tuple(o.hop for o in wide))
            bid = self.fresh_arrival(h) + self.link(d)
            state, label, worst_b = self.state(), self.label(h), onwards(h, b)
            ask = Offer(h, rate, oid, label, b, bid=bid, state=state, swap_worst=worst_b, swap_options=wide)
            self.send(d, ask)
        self.swap_budget -= len(asked)
        return bool(asked)

    def on_traded(self) -> None:
        """An exchange we asked for was made: asks pay here, so this peer may ask a few more."""
        refund = min(SWAP_REFUND, SWAP_REFUND_MAX - self._refunded)
        if refund > 0 and self.swap_budget >= 0:
            self._refunded += refund
            self.swap_budget += refund


__all__ = ["SwapAsks", "CALM_WAIT", "GAIN_S", "WIDE_ASKS", "SWAP_REFUND", "SWAP_REFUND_MAX"]
