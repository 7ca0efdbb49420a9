"""Exchange asks: the initiator's side of an exchange (swarm/flow/exchange.py). After a calm wait,
a stage peer scans its next hops for mates d closer than a hop b it uses (or with a cheaper worst
route onwards) and asks each d, in batches and within the ask budget (swarm/flow/ask_budget.py), to
trade one of its in-flows for our flow on b.
"""

from __future__ import annotations

from swarm.flow.ask_budget import SWAP_BATCH, SWAP_REFUND, SWAP_REFUND_MAX, swap_budget
from swarm.flow.ask_resync import AskResyncs
from swarm.flow.messages import SwapOption
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
SKIP_HOPELESS = True
# Asks a mate must refuse (`SwapAsks._hopeless`) are skipped where links are limited, and at peers
# with more next hops than this. On the whole-range sweeps (peers with up to 30 next hops) skipping
# them at every peer took 300 x 16's messages down by a third, but moved which trades were made:
# under timing s seed 2 instance 21 went from 1.009 to 1.053 max / opt (89 of 90 within 5%).
WIDE_HOPELESS_HOPS = 31
# At wide peers a skipped ask takes its place in the batch (a batch of them only is followed by the
# next at once), so the asks that are sent go out in the same batches as before: at 1,000 x 16 seeds
# 0 / 1 / 2 that gave max path / opt 1.198 / 1.221 / 1.259 (1.212 / 1.182 / 1.223 before), where
# filling the batch with asks that are sent gave 1.248 / 1.234 / 1.291. Where links are limited it
# does not: the simulator's seed-0 table went from 661.9 / 662.2 / 668.4 s (geo no / low / high
# churn) to 888.4 / 826.6 / 711.0 s with it.
# At every peer, whatever its width and the links: a mate whose state tells none of the holder's flow
# (nothing to trade) and hand-overs spent refuses whatever the labels, so it is not asked. In one
# join on 8 x 16 (one holder, seed 0) 5,199 of 11,203 refused asks went to such mates, up to 423 to
# one of them: path news clears the tried set, and an idle mate's unknown route onwards reads as free
# (docs/routing.md, "Spent mates are not asked").
SKIP_SPENT = True


class SwapAsks(PathNews, AskResyncs):
    """The exchange initiator a: when to ask, whom, for which hops; refunds for trades made."""

    def init_swap_asks(self) -> None:
        self.init_path_news()
        self.swap_budget = -1  # set from the number of next hops at the first try
        self._refunded = 0
        self._swap_tried: set[tuple[str, str, str]] = set()
        self._tried_cleared = 0  # (the tried set only grows between clears: with its size, a version)
        self._idle_scan: tuple | None = None  # what the last scan that found no trade read
        self._calm_since = 0.0
        self._polish_armed = False

    def disturbed(self) -> None:
        """Someone changed our flows (offer, return, cancel, churn): exchanges wait for calm again."""
        self._calm_since = self.now

    def reset_exchanges(self) -> None:
        """Churn or a capacity change: the flows around us moved, every exchange may be worth a try."""
        self._swap_tried.clear()
        self._tried_cleared += 1
        self.swap_budget = -1
        self._refunded = 0

    def on_paths(self) -> None:
        """New path costs: trades tried before may pay now (the budget still bounds them)."""
        self._swap_tried.clear()
        self._tried_cleared += 1
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
        return self.calm() and self.try_swap()

    def calm(self) -> bool:
        """Whether we have been left alone for CALM_WAIT retry periods; if not, wake up then."""
        wait = self._calm_since + CALM_WAIT * self.env.retry_s - self.now
        if wait > EPS:
            if not self._polish_armed:
                self._polish_armed = True
                self.env.set_timer(self.id, wait, "polish")
            return False
        return True

    def try_swap(self) -> bool:
        """Ask next hops d, closer than a current next hop b, to trade an in-flow for ours.

        Every improving trade makes one of its two sides cheaper, so trying only next hops closer
        than the current one finds them all; each (holder, b, d) is tried once, up to SWAP_BATCH
        at a time (b never gives more than it has, so parallel asks cannot over-move).
        """
        if self.offers or self.cancels:
            return False
        scan = self._scan_inputs()
        if scan == self._idle_scan:
            return False  # nothing the scan reads changed since it last found no trade
        # Per (holder, d), the best option as (gain, h, b, d): the asks go to the first distinct d's
        # in that order, each offered its best hops, as a sort of every option would pick them. The
        # scan ran for every pair of next hops (millions per swarm at 62 next hops); it now walks
        # our hops from the farthest and from the dearest onwards, and stops where no hop can beat
        # the best found (see `_best_trade`).
        candidates: list[tuple[float, str, str, str]] = []
        tried, link, onwards = self._swap_tried, self.link, self.worst_of
        holders = self.holders
        for h in holders:
            used = [(v, link(v), link(v) + onwards(h, v)) for v, r in self.out[h].items() if r > EPS]
            if not used:
                continue
            far_first = sorted(used, key=lambda u: -u[1])
            dear_first = sorted(used, key=lambda u: -u[2])
            farthest = far_first[0][1] - EPS
            dearest = dear_first[0][2] - GAIN_S - EPS
            for d in self.targets(h):
                if d in holders:
                    continue
                here = link(d)
                here_worst = here + onwards(h, d)
                if here >= farthest and here_worst >= dearest:
                    continue  # neither closer nor cheaper onwards than any hop we use
                best = _best_trade(here, here_worst, far_first, dear_first, h, d, tried)
                if best is not None:
                    candidates.append((best[0], h, best[1], d))
        if not candidates:
            self._idle_scan = scan
            return False
        candidates.sort()
        asked: set[str] = set()
        spent = skipped = 0  # asks charged to the budget, and of them those not sent (`_hopeless`)
        for _, h, b, d in candidates:
            if len(asked) >= SWAP_BATCH or spent >= self.swap_budget:
                break
            if d in asked:
                continue
            # one ask offers d several of our hops to trade with (those worth it, best first)
            hops = [x for _, x in self._trades_with(h, d)[:WIDE_ASKS]]
            tried.update((h, x, d) for x in hops)
            hopeless = self._hopeless(h, d)
            spent += 1  # a hopeless ask is charged as if asked and refused: the trades made stay
            if hopeless and self.link_limits:
                continue  # (nor does it take a place in the batch: see WIDE_HOPELESS_HOPS)
            asked.add(d)
            if hopeless:
                skipped += 1
                continue
            self.ask_trade(h, d, b, hops)
        self.swap_budget -= spent
        if asked and skipped == len(asked):  # a batch of refusals only: the next one follows now
            return self.try_swap()
        return bool(asked)

    def _scan_inputs(self) -> tuple:
        """Everything `try_swap`'s scan for candidates reads: our flows and labels, the tried set's
        version, the budget, edge costs' version and our next hops' states and path news (held, not
        their ids, so that a freed object's id cannot come back). On 300 x 8 with 4 holders, 15.9 k of
        the 33.3 k scans that found no trade read the same inputs as the scan before them."""
        nexts, views, paths = tuple(self.next), self.views, self.paths
        return (
            nexts,
            tuple(map(views.get, nexts)),
            tuple(map(paths.get, nexts)),
            tuple(tuple(self.out[h].items()) for h in self.holders),
            tuple(self._labels.items()),
            len(self._swap_tried),
            self._tried_cleared,
            self.swap_budget,
            self._costs_forgotten,
        )

    def _hopeless(self, h: str, d: str) -> bool:
        """Whether d must refuse a trade of h's flow, as far as we know from its state.

        d trades one of its in-flows of h for ours, or takes ours over as a hand-over. It has no
        in-flow of h when its state tells no worst route onwards for h (it carries none of h's flow:
        `worst_of` reads that unknown route as free, so such a d looked like the best mate to ask),
        and it takes no hand-over where links are limited, its hand-overs are spent or it has no
        spare capacity. And it refuses when its label is over ours + 1 (a sender with a lower label
        would lower d's), unless it is idle and takes a hand-over. Only where links are limited and
        at peers with over WIDE_HOPELESS_HOPS next hops (see there), except for a d with none of h's
        flow and its hand-overs spent (SKIP_SPENT)."""
        if not SKIP_HOPELESS:
            return False
        st = self.views.get(d)
        if st is None:
            return False
        p = self.paths.get(d)
        carries = h in st.worst or (p is not None and h in p.worst)
        if SKIP_SPENT and not carries and not st.hand_overs:
            return True  # nothing of h to trade and no hand-over left: refused whatever the labels
        if not (self.link_limits or len(self.next) > WIDE_HOPELESS_HOPS):
            return False
        takes = st.hand_overs and not self.link_limits and st.spare > EPS
        if st.labels.get(h, self.max_label) > self.label(h) + 1:
            return carries or not takes
        return not carries and not takes

    def ask_trade(
        self,
        h: str,
        d: str,
        b: str,
        hops: list[str],
        critical: bool = False,
        go: bool = False,
        late: bool = False,
    ) -> bool:
        """Ask d to trade one of its in-flows for our flow on one of `hops` (b the best of them);
        False when d has no room for any of it. `go`: `Offer.rotate_go`; `late`: `Offer.late`."""
        room, onwards = self.room(d), self.worst_of
        rates = [(x, min(self.out[h].get(x, 0.0), room)) for x in hops]
        wide = tuple(SwapOption(x, r, onwards(h, x), self._gen.get(x, 0)) for x, r in rates if r > EPS)
        if not wide:
            return False
        bid = self.fresh_arrival(h) + self.link(d)
        self.send_trade_ask(h, d, b, wide, self.label(h), bid, critical, go=go, late=late)
        return True

    def _trades_with(self, h: str, d: str) -> list[tuple[float, str]]:
        """Every untried trade of our hops b for d's in-flow that pays, as (gain, b), best first.

        A trade pays if d is closer than b (the four edges may cost less) or has a cheaper worst
        route onwards (the most expensive path through them may get cheaper)."""
        link, onwards, tried = self.link, self.worst_of, self._swap_tried
        here = link(d)
        here_worst = here + onwards(h, d)
        trades = []
        for b, r in self.out[h].items():
            if r > EPS and b != d and (h, b, d) not in tried:
                gain = _gain(here, here_worst, link(b), link(b) + onwards(h, b))
                if gain < -EPS:
                    trades.append((gain, b))
        trades.sort()
        return trades

    def on_traded(self) -> None:
        """An exchange we asked for was made: asks pay here, so this peer may ask a few more."""
        refund = min(SWAP_REFUND, SWAP_REFUND_MAX - self._refunded)
        if refund > 0 and self.swap_budget >= 0:
            self._refunded += refund
            self.swap_budget += refund


def _gain(here: float, here_worst: float, there: float, there_worst: float) -> float:
    """What trading our hop b (`there`, `there_worst`) for d (`here`, `here_worst`) gains:
    negative pays (the lower of the two ways it may pay, see `SwapAsks._trades_with`)."""
    gain = here - there
    other = here_worst - there_worst + GAIN_S
    return other if other < gain else gain


Hop = tuple[str, float, float]  # (next hop, edge cost to it, edge cost + its worst route onwards)


def _best_trade(
    here: float,
    here_worst: float,
    far_first: list[Hop],
    dear_first: list[Hop],
    h: str,
    d: str,
    tried: set[tuple[str, str, str]],
) -> tuple[float, str] | None:
    """The least (gain, b) over our untried hops b != d whose trade for d pays, or None.

    A hop's gain is the lower of (here - there) and (here_worst - there_worst + GAIN_S), so the best
    is at the head of our hops ordered by `there` or by `there_worst`, descending: each walk stops at
    the first hop whose own term cannot pay or cannot beat the best found, and the two walks together
    see every hop that could be the best (ties broken by name, as a sort of all options would)."""
    best: tuple[float, str] | None = None
    for hops, index in ((far_first, 1), (dear_first, 2)):
        for hop in hops:
            term = here - hop[1] if index == 1 else here_worst - hop[2] + GAIN_S
            if term >= -EPS or (best is not None and term > best[0]):
                break
            b = hop[0]
            if b == d or (h, b, d) in tried:
                continue
            found = (_gain(here, here_worst, hop[1], hop[2]), b)
            if best is None or found < best:
                best = found
    return best


__all__ = ["SwapAsks", "CALM_WAIT", "GAIN_S", "WIDE_ASKS", "SWAP_REFUND", "SWAP_REFUND_MAX"]
