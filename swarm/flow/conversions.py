"""Holder conversions: a full stage-0 peer turns a far holder's flow into a nearer holder's.

Holders race for shared capacity (docs/routing.md, "Holders bid across holders, and conversions"). A
holder's bid displaces other holders' flow only where the full peer still reaches the bidder's sink;
when a later stage is the bottleneck, no stage-0 peer does, yet every path of the far holder there
is a path the bidder could use: microbatches return to their own holder, but the peers in between do
not care whose they are. So the full stage-0 peer takes the bidder's flow in place of the far
holder's (returned to it) and tells its next hop that this much of what it sends is now the bidder's
(`Convert`); every hop does the same down the far holder's worst path, and the last stage hands the
far holder's flow back to its sink and pushes the bidder's home. No peer's load changes, so the
maximum flow stays. A hop that no longer carries that much says so (`ConvertBack`), and push-relabel
settles the difference like any excess.

On whole-range seed 0 instance 1 under timing s + 1000 (4 x 11, four holders) the far holder h1
carried 3.36 microbatches/s against 0.18 in the min-cost flow, and no bid was ever taken.
"""

from __future__ import annotations

import math

from swarm.flow.bids import PeerBids
from swarm.flow.messages import Convert, ConvertBack, Return
from swarm.flow.node import EPS

# Off: after 20% churn on the churn table's 6 x 60 row with four holders (seed 2) the swarm did not
# go quiet within the bus's time limit (4 violations); with bids across holders alone it is quiet
# after 0.68x the initial rounds. Kept, with its tests, for that to be traced (docs/routing.md,
# "Holders bid across holders, and conversions").
CONVERSIONS = False
# The bidder's first edge must be this much cheaper than the converted holder's (seconds). Judged
# by whole paths instead (the far holder's worst path through us against the bidder's worst), or by
# either test, conversions ran away on whole-range seed 0 instance 26 (11,794 messages per peer
# against 616, max path 0.992 -> 1.106): docs/routing.md, "Holders bid across holders, and conversions".
CONVERT_MARGIN_S = 0.01


class PeerConversions(PeerBids):
    """The stage-0 peer's side (`convert_for`) and every hop's (`on_convert`, `on_convert_back`)."""

    def convert_for(self, g: str, rate: float, bid: float) -> float:
        """Holder g bids for us, full, and our labels keep its flow out: turn flow of holders whose
        first edge to us is dearer than g's into g's. Returns what g may now send us."""
        if not (CONVERSIONS and self.stage == 0 and not self.link_limits and self.improve):
            return 0.0
        got = 0.0
        dearer = [
            (self.link(h) + (self.fresh_worst(h) or 0.0), h)  # (h's worst path through us first)
            for h in self.holders
            if h != g and self.movable(h, h) > EPS and self.link(h) > bid + CONVERT_MARGIN_S
        ]
        for _, h in sorted(dearer, reverse=True):
            if got >= rate - EPS:
                break
            x = min(rate - got, self.movable(h, h))
            self.inflow[h][h] -= x
            self.send(h, Return(h, x, self.state()))
            self.convert_out(h, g, x)
            got += x
        return got

    def convert_out(self, old: str, new: str, rate: float) -> None:
        """Turn `rate` of our out-flow of `old` into `new`'s, worst path first, and tell the hops.
        The last stage leaves it to settle(): a deficit of `old` cancels at its sink, the excess of
        `new` goes to `new`'s."""
        if self.last:
            return
        hops = sorted(
            ((self.link(v) + self.worst_of(old, v), v) for v, r in self.out[old].items() if r > EPS),
            reverse=True,
        )
        for _, v in hops:
            if rate <= EPS:
                break
            z = min(rate, self.out[old][v])
            self.out[old][v] -= z
            self.out[new][v] = self.out[new].get(v, 0.0) + z
            self.send(v, Convert(old, new, z))
            rate -= z
        self.flows_moved()
        self._worst_cache.clear()

    def on_convert(self, src: str, body: Convert) -> None:
        """Our sender src says `rate` of what it sends us of `old` is `new`'s from now on."""
        old, new = body.old, body.new
        if old == new or old not in self.holders or new not in self.holders or src not in self.prev:
            return
        if not (math.isfinite(body.rate) and body.rate > 0.0):
            return
        y = min(body.rate, max(0.0, self.movable(old, src)))
        if y > EPS:
            self.inflow[old][src] -= y
            self.inflow[new][src] = self.inflow[new].get(src, 0.0) + y
            self.bids[new][src] = self.bids[old].get(src, 0.0)
            self.convert_out(old, new, y)
        if body.rate - y > EPS:
            self.send(src, ConvertBack(old, new, body.rate - y))

    def on_convert_back(self, src: str, body: ConvertBack) -> None:
        """Our next hop src could not take all of a conversion: that much is `old`'s again."""
        old, new = body.old, body.new
        if old == new or old not in self.holders or new not in self.holders or src not in self.next:
            return
        if not (math.isfinite(body.rate) and body.rate > 0.0):
            return
        r = min(body.rate, max(0.0, self.out[new].get(src, 0.0)))
        if r > EPS:
            self.out[new][src] -= r
            self.out[old][src] = self.out[old].get(src, 0.0) + r
            self.flows_moved()
            self._worst_cache.clear()


__all__ = ["PeerConversions", "CONVERSIONS"]
