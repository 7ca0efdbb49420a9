"""A stage peer's push-relabel labels: per holder, the residual distance to that holder's sink.

Read from what neighbours published (their labels and spare capacity) and from our own in-flows
(the residual edges back to our senders). A part of `PeerAgent` (swarm/flow/peer.py); relabelling
runs on every message a peer handles, so the forward minima are cached (see `Node._fold`).
"""

from __future__ import annotations

from swarm.flow.messages import INF
from swarm.flow.news import EPS
from swarm.flow.stage_plans import StagePlans


class PeerLabels(StagePlans):
    """Labels of a stage peer (the in-flows and `last` are the peer's)."""

    inflow: dict[str, dict[str, float]]
    last: bool
    _labels: dict[str, int]

    def _forward_labels(self) -> dict[str, int]:
        """Per holder, the lowest label among next hops that published spare capacity over a link
        with room (cached until a next hop's fullness or labels, or the set of full links, change:
        the hot path of every relabel)."""
        cache = self._fwd_cache
        self.sync_links()  # a link that filled or freed up changes the lowest label
        if not cache:
            top = self.max_label
            if self.last:
                cache.update({h: 0 if h in self.next and self.room(h) > EPS else top for h in self.holders})
            else:
                cache.update(dict.fromkeys(self.holders, top))
                counts = self._fwd_count  # next hops at each minimum (see `Views._fold`)
                counts.update(dict.fromkeys(self.holders, 0))
                # (`room` and `dead_end` inlined: this rescan reads every next hop for every holder)
                limits, room, views, holders = self.link_limits, self.room, self.views, self.holders
                for v in self.next:
                    st = views.get(v)
                    if st is None or st.spare <= EPS or (limits and room(v) <= EPS):
                        continue
                    labels, cheapest = st.labels, st.cheapest
                    for h in holders:
                        if not limits and cheapest.get(h, INF) >= INF:
                            continue  # a dead end: not a residual route (see Node.dead_end)
                        lab = labels.get(h, top)
                        if lab < cache[h]:
                            cache[h] = lab
                            counts[h] = 1
                        elif lab == cache[h]:
                            counts[h] += 1
        return cache

    def compute_label(self, h: str) -> int:
        """Relabel: one more than the lowest label among residual neighbours (or "unreachable")."""
        return self._label_from(h, self._forward_labels()[h])

    def _label_from(self, h: str, best: int) -> int:
        """`compute_label` given the lowest forward label: residual edges back to our senders."""
        top, views, src = self.max_label, self.views, self.src_label
        for u, r in self.inflow[h].items():
            if r > EPS:
                if u in self.holders:
                    lab = src
                else:
                    st = views.get(u)
                    lab = st.labels.get(h, top) if st else top
                if lab < best:
                    best = lab
        return best + 1 if best < top else top

    def relabel(self) -> None:
        """Recompute every holder's label from the current views and in-flows (the forward minima
        are read once for all holders: with many holders this runs on every message)."""
        fwd, top, inflow = self._forward_labels(), self.max_label, self.inflow
        self._labels = {
            h: self._label_from(h, fwd[h]) if inflow[h] else (fwd[h] + 1 if fwd[h] < top else top)
            for h in self.holders
        }

    def label(self, h: str) -> int:
        return self._labels.get(h, self.max_label)


__all__ = ["PeerLabels"]
