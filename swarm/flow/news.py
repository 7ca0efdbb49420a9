"""Announcements: which neighbour hears what about a node's state, and when.

A state change is news only for some neighbours: upstream ones (who push to us) need fullness,
labels and route costs; downstream ones only our labels, and only if they hold flow from us. Good
news is sent reliably, bad news and route costs best effort and batched (they cascade through
every stage). `Announcer` is the part of `Node` that decides this; the functions are pure.
"""

from __future__ import annotations

import math
from typing import Any

from swarm.flow.messages import INF, Announce, State

EPS = 1e-9
COST_GRAIN_S = 0.01  # route-cost changes under 10 ms are not announced
COST_REL = 0.05  # nor those under 5%
COST_HOLD = 20.0  # at most one costs-only announcement per COST_HOLD announcement periods


def summary_of(state: State) -> tuple[bool, tuple, dict[str, float]]:
    """What a neighbour knows from a state: has spare and labels (and which holders it can route,
    and the relabel epochs: news it must get), then route costs (best effort)."""
    reach = tuple(h for h, c in sorted(state.cheapest.items()) if math.isfinite(c))
    epochs = tuple(sorted(state.epochs.items()))
    return (state.spare > EPS, (tuple(sorted(state.labels.items())), reach, epochs), dict(state.cheapest))


NONE, COSTS, BAD, GOOD = 0, 1, 2, 3


def news_for(told: tuple | None, now: tuple, upstream: bool, sender: bool = True) -> int:
    """What a neighbour that last heard `told` would learn from `now` (see `Announcer._publish`)."""
    if told is None:
        return GOOD
    old_labels, old_reach, old_epochs = told[1]
    new_labels, new_reach, new_epochs = now[1]
    if old_epochs != new_epochs:
        return GOOD  # a new relabel epoch reaches every node through such news (see `observe`)
    if upstream and now[0] and not told[0]:
        return GOOD
    if old_labels != new_labels:
        before = dict(old_labels)
        if any(lab < before.get(h, lab + 1) for h, lab in new_labels):
            return GOOD
        return BAD
    if upstream:
        if old_reach != new_reach:
            return GOOD if set(new_reach) - set(old_reach) else BAD
        if told[0] != now[0]:
            return BAD
        if costs_moved(told[2], now[2]):
            return COSTS if sender or _cheaper(told[2], now[2]) else NONE
    return NONE


def _cheaper(old: dict[str, float], new: dict[str, float]) -> bool:
    """Did some route get cheaper (news for every upstream; dearer routes only concern senders)?"""
    return any(c < old.get(h, INF) for h, c in new.items())


def costs_moved(old: dict[str, float], new: dict[str, float], rel: float = COST_REL) -> bool:
    """Did a published route cost move enough to tell upstream (`rel` or COST_GRAIN_S)?"""
    if old.keys() != new.keys():
        return True
    for h, c in new.items():
        o = old[h]
        if math.isfinite(c) != math.isfinite(o):
            return True
        if math.isfinite(c) and abs(c - o) > max(COST_GRAIN_S, rel * abs(o)):
            return True
    return False


class Announcer:
    """Coalesced, per-neighbour announcements of a node's state (a part of `Node`, whose `state`
    and `send` it uses)."""

    id: str
    env: Any
    now: float
    prev: set[str]
    holders: tuple[str, ...]
    announce_s: float
    _told: dict[str, tuple]  # neighbour -> (has spare, labels, costs) it last heard from us
    _summary: tuple  # the last of those we sent (`Node.send`): equal ones are this same object
    _announce_armed: bool
    _cost_at: float

    def announce(self) -> None:
        """Publish our state, coalesced: at most one announcement per `announce_s` of virtual time."""
        if not self._announce_armed:
            self._announce_armed = True
            self.env.set_timer(self.id, self.announce_s, "announce")

    def senders(self) -> set[str]:
        """Upstream nodes whose flow we carry: they care when our route gets dearer."""
        return set()

    def dearer_to_all(self) -> bool:
        """Whether upstream neighbours that send us nothing hear that our route got dearer."""
        return False

    def downstream(self) -> set[str]:
        """Next hops that hold flow from us: they need our labels to return flow (nobody else does)."""
        return set()

    def _publish(self) -> None:
        """Tell each neighbour what changed for it since it last heard from us.

        Upstream neighbours (who push to us) need fullness, labels and route costs; downstream ones
        only our labels, and only if they hold flow from us (offers carry our state anyway). Good
        news (spare again, a lower label, a holder reachable again) is reliable: missing it could
        leave flow unrouted. Bad news and route costs are best effort: a neighbour that missed them
        learns the truth from our reply to its next offer. Cost-only news is batched, because it
        cascades through every stage.
        """
        if not getattr(self, "ready", True):
            return  # nobody can use our state before our route costs are known (see check_ready)
        st = self.state()
        now = summary_of(st)
        if now == self._summary:  # what we told last: neighbours that heard it learn nothing new
            now = self._summary
        good: list[str] = []
        other: list[str] = []
        costs_only = True
        # every upstream neighbour hears dearer routes where `dearer_news_to_all` says so, else
        # only our senders (the others learn them from our reply to their next offer)
        senders = self.prev if self.dearer_to_all() else self.senders()
        # neighbours told in one announcement share its summary: judge each summary once
        told_by, judged = self._told, {}
        for node in sorted(self.prev):
            told = told_by.get(node)
            if told is now:
                continue
            sender = node in senders
            key = (id(told), sender)
            news = judged.get(key)
            if news is None:
                news = judged[key] = news_for(told, now, upstream=True, sender=sender)
            if news == GOOD:
                good.append(node)
            elif news:
                other.append(node)
                costs_only = costs_only and news == COSTS
        for node in sorted(self.downstream() - self.prev):
            told = told_by.get(node)
            if told is not now and node not in self.holders:
                news = news_for(told, now, upstream=False)
                if news == GOOD:
                    good.append(node)
                elif news:
                    other.append(node)
                    costs_only = False
        if not good and not other:
            return
        if not good and costs_only:
            wait = self._cost_at + COST_HOLD * self.announce_s - self.now
            if wait > EPS:  # only route costs moved: batch such news
                self._announce_armed = True
                self.env.set_timer(self.id, wait, "announce")
                return
        self._cost_at = self.now
        body = Announce(st)
        for node in good:
            self.send(node, body)
        for node in other:
            self.send(node, body, reliable=False)
