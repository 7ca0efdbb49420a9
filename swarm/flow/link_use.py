"""What a sender sends and offers over each link, for swarms whose links carry a bounded rate.

A part of `Sender` (swarm/flow/agent.py): with link limits a next hop whose link is full is neither
pushed to nor counted for labels or route costs, so the sums are kept current cheaply (recounted
only after out-flows or offers changed).
"""

from __future__ import annotations

from swarm.flow.messages import INF
from swarm.flow.node import EPS, Node


class LinkUse(Node):
    """Per next hop: the rate we send and offer over its link, and which links are full."""

    out: dict[str, dict[str, float]]
    _offered: dict[tuple[str, str], float]

    def init_link_use(self) -> None:
        self._flows_at = 0  # bumped whenever out-flows or offers change (link use, see `room`)
        self._links_at = -1
        self._link_used: dict[str, float] = {}
        self._full_links: frozenset[str] = frozenset()

    def room(self, v: str) -> float:
        """What the link to v can still take: its capacity less what we send and offer over it."""
        if not self.link_limits:
            return INF
        self.sync_links()
        return self.edge_cap(self.id, v) - self._link_used.get(v, 0.0)

    def forget_costs(self, node: str | None = None) -> None:
        super().forget_costs(node)
        self._links_at = -1  # link bounds may have changed: which links are full is summed again

    def link_full(self, v: str) -> bool:
        if not self.link_limits:
            return False
        self.sync_links()
        return v in self._full_links

    def flows_moved(self) -> None:
        """Our out-flows or offers changed: link use is summed again when next asked."""
        self._flows_at += 1

    def sync_links(self) -> None:
        """Sum what we send and offer per link; when the set of full links changes, the cached
        labels and route costs (which skip full links) are stale."""
        if not self.link_limits or self._links_at == self._flows_at:
            return
        used: dict[str, float] = {}
        for nexts in self.out.values():
            for v, r in nexts.items():
                used[v] = used.get(v, 0.0) + r
        for (_, v), r in self._offered.items():
            used[v] = used.get(v, 0.0) + r
        self._link_used, self._links_at = used, self._flows_at
        full = frozenset(v for v in self.next if self.edge_cap(self.id, v) - used.get(v, 0.0) <= EPS)
        if full != self._full_links:
            self._full_links = full
            self._fwd_cache.clear()
            self._cheap_cache.clear()


__all__ = ["LinkUse"]
