"""Path news: the most expensive used routes through a peer, kept fresh for its neighbours.

Exchanges judge a trade by the worst path through its four edges: a's worst route from the holder,
plus the edges, plus b's and d's worst routes on to the holder's sink. Each peer computes its two
figures from its neighbours' news and tells senders (its route onwards) and next hops (its route so
far) when they move; best effort, it moves no flow.
"""

from __future__ import annotations

from swarm.flow.agent import Sender
from swarm.flow.ask_budget import walks_allowed
from swarm.flow.messages import Paths
from swarm.flow.news import COST_REL, EPS, costs_moved

# Path news goes out when a figure moves by more than PATHS_REL of it (or COST_GRAIN_S); announcements
# wait for 5% (COST_REL). At 5% walks strayed off the worst path: on seed 1 instance 21 of the whole
# range (12 x 29) 80 of the 145 peers with flow had their own worst route wrong at the end, and a
# walk went down s8p29 where the worst path ran through s8p23. At 2% max path / opt within 5% went
# from 81 to 83 of 90 on the whole range (none lost) for 11% more messages; 1% reshuffled it instead
# (80 of 90: four gained, five lost; 18% more). Only where walks go (`walks_allowed`): with limited
# links news waits for 5% as before (the simulator's table was measured so), and at peers with over
# WIDE_WALK_HOPS next hops (1,000 x 16 seed 2 at 2%: 725,841 -> 858,995 messages, max / opt 1.223
# -> 1.253).
PATHS_REL = 0.02


class PathNews(Sender):
    """A stage peer's path figures; `PeerAgent` supplies the in-flows and the bids."""

    inflow: dict[str, dict[str, float]]
    bids: dict[str, dict[str, float]]
    last: bool

    def init_path_news(self) -> None:
        self._told_paths: dict[str, Paths] = {}  # neighbour -> the path news it last heard from us
        self._paths_sent: Paths | None = None  # the last of those (equal news shares this object)

    def fresh_worst(self, h: str) -> float | None:
        """Our most expensive used route on to h's sink, from our next hops' path news."""
        if self.last:
            return self.link(h) if self.out[h].get(h, 0.0) > EPS else None
        used = [self.link(v) + self.worst_of(h, v) for v, r in self.out[h].items() if r > EPS]
        return max(used) if used else None

    def arrival_via(self, h: str, u: str) -> float:
        """Most expensive used route from holder h to us through sender u: u's path news, else
        the path cost u bid with its last offer."""
        if u in self.holders:
            return self.link(u)
        p = self.paths.get(u)
        if p is not None and h in p.arrival:
            return p.arrival[h] + self.link(u)
        return self.bids[h].get(u, 0.0)

    def fresh_arrival(self, h: str) -> float:
        return max((self.arrival_via(h, u) for u, r in self.inflow[h].items() if r > EPS), default=0.0)

    def publish_paths(self) -> None:
        """Send our path costs to senders (when our worst route onwards moved) and to next hops we
        send to (when our worst route so far moved); best effort, like cost-only announcements."""
        if not self.improve:
            return
        arrival = {h: a for h in self.holders if (a := self.fresh_arrival(h)) > 0.0}
        worst = {h: w for h in self.holders if (w := self.fresh_worst(h)) is not None}
        body = Paths(arrival, worst)
        if body == self._paths_sent:  # what we sent last: neighbours that heard it learn nothing
            body = self._paths_sent
        senders = self.senders()
        walks = walks_allowed(self.improve, self.link_limits, len(self.next))
        if not walks:  # (holders: for walks only)
            senders = {u for u in senders if u not in self.holders}
        downstream = {v for v in self.downstream() if v not in self.holders}
        rel = PATHS_REL if walks else COST_REL  # (fine news is for walks)
        judged: dict[tuple[int, bool, bool], bool] = {}  # neighbours told at once share a body
        for node in sorted(senders | downstream):
            told = self._told_paths.get(node)
            if told is body:
                continue
            key = (id(told), node in senders, node in downstream)
            news = judged.get(key)
            if news is None:
                news = judged[key] = told is None or (
                    (key[1] and costs_moved(dict(told.worst), worst, rel))
                    or (key[2] and costs_moved(dict(told.arrival), arrival, rel))
                )
            if news:
                self._told_paths[node] = self._paths_sent = body
                self.send(node, body, reliable=False)

    def forget_paths(self, node: str) -> None:
        """A neighbour left: neither its news nor what we told it counts any more."""
        self.paths.pop(node, None)
        self._told_paths.pop(node, None)
