"""A routing node's view of its neighbours: their published states as it uses them (labels of
another relabel epoch read as "cannot reach"), the relabel epochs it adopts and passes on, and the
minima over next hops that pushes and labels read (kept without rescans, see `_fold`).

A part of `Node` (swarm/flow/node.py), which owns the state and the channel these use.
"""

from __future__ import annotations

from collections.abc import Mapping

from swarm.flow.messages import INF, Announce, State
from swarm.flow.news import EPS, Announcer


class Views(Announcer):
    """Neighbour views and relabel epochs (see the module docstring)."""

    max_label: int
    views: dict[str, State]
    _raw: dict[str, State]
    epoch: dict[str, int]
    _epochs_told: dict[str, tuple]
    link_limits: bool
    _cheap_cache: dict[str, float]
    _fwd_cache: dict[str, int]
    _fwd_count: dict[str, int]
    _worst_cache: dict[str, float | None]
    next: set[str]

    def view_label(self, node: str, holder: str) -> int:
        st = self.views.get(node)
        return st.labels.get(holder, self.max_label) if st else self.max_label

    def view_spare(self, node: str) -> float:
        st = self.views.get(node)
        return st.spare if st else 0.0

    def observe(self, state: State) -> None:
        """Take a neighbour's published state as our view of it.

        Relabel epochs: labels climb one step per exchange of news, so when a holder's flow is
        stuck (capacity left the swarm, excess must drain back) they would count up slowly through
        every cycle of the residual graph. The holder then starts a new epoch instead; a node that
        sees a newer epoch adopts it and reads every label of an older epoch as "unknown"
        (max_label), so its own label falls straight to the residual distance as neighbours'
        new-epoch labels arrive (labels only fall within an epoch: no counting up).
        """
        old = self.views.get(state.node)
        if old is not None and state.version < old.version:
            return
        self._raw[state.node] = state
        same = state.epochs == self.epoch  # (the common case: no epoch to tell or adopt, none stale)
        if not same and any(e > state.epochs.get(h, 0) for h, e in self.epoch.items()):
            self._tell_epochs(state.node)
        if not same and self._adopt(state.epochs):
            self.reread_views()
            # a next hop with room whose last word was of an older epoch hears ours now: it reads
            # as unreachable in the new epoch, so nobody would send it anything to learn it from
            # (false departures: the only peer of a last stage stuck so, and no flow at all)
            for node in sorted(self.next):
                raw = self._raw.get(node)
                behind = raw is not None and any(e > raw.epochs.get(h, 0) for h, e in self.epoch.items())
                if behind and raw.spare > EPS:
                    self._tell_epochs(node)
            return
        if not same:
            state = self._as_used(state)
        self.views[state.node] = state
        if state.node not in self.next:
            return  # only next hops' views feed the cached labels and route costs
        self._worst_cache.clear()
        if self.link_full(state.node):
            return  # the cached minima skip full links: nothing there moved
        if old is None or not self.views_fold():
            self._cheap_cache.clear()
            self._fwd_cache.clear()
            return
        self._fold(old, state)

    def _adopt(self, epochs: Mapping[str, int]) -> bool:
        """Move to newer relabel epochs of our holders; whether any moved."""
        moved = False
        for h, e in epochs.items():
            if e > self.epoch.get(h, 0) and h in self.holders:
                self.epoch[h] = e
                moved = True
        return moved

    def _tell_epochs(self, node: str) -> None:
        """`node` speaks of an older relabel epoch: send it our state, once per epoch. A newcomer
        hears no state from upstream peers that send it nothing (they only tell their own upstream
        and next hops holding their flow), and its labels of the old epoch would read as unknown
        to everyone for good: a last-stage joiner would never be given flow."""
        mine = tuple(sorted(self.epoch.items()))
        if self._epochs_told.get(node) != mine:
            self._epochs_told[node] = mine
            self.send(node, Announce(self.state()))

    def reread_views(self) -> None:
        """Our epochs moved: every view is read again from what was published, caches dropped."""
        self.views = {v: self._as_used(raw) for v, raw in self._raw.items()}
        self._cheap_cache.clear()
        self._fwd_cache.clear()
        self._worst_cache.clear()

    def _as_used(self, state: State) -> State:
        """The state with labels of another epoch than ours read as unknown (max_label)."""
        if not state.epochs and not self.epoch:
            return state
        stale = [h for h in self.holders if state.epochs.get(h, 0) != self.epoch.get(h, 0)]
        if not stale:
            return state
        labels = dict(state.labels)
        for h in stale:
            labels[h] = self.max_label
        s = state  # (not `dataclasses.replace`, whose generic copy cost 3% of a big swarm's time)
        return State(s.node, s.version, s.spare, labels, s.cheapest, s.worst, s.epochs, s.hand_overs)

    def same_epoch(self, state: State | None, h: str) -> bool:
        """Whether a message's state speaks of holder h's current epoch (labels comparable)."""
        return state is None or state.epochs.get(h, 0) == self.epoch.get(h, 0)

    def link_full(self, v: str) -> bool:
        """Whether our link to next hop v carries all it can (senders know; see `Sender.room`)."""
        return False

    def views_fold(self) -> bool:
        """Whether the caches are minima over next hops' views (see `_fold`)."""
        return True

    def dead_end(self, st: State, h: str) -> bool:
        """A next hop that published no route with spare capacity to h's sink, when links are not
        limited: flow pushed there can only come back. Every peer reaches every peer of the next
        stage over an unbounded edge, so a route through a dead end is never needed (whatever it
        would reach, we reach directly). Skipping them (pushes and labels alike) took the mean max
        path / opt over 90 sweep instances from 1.104 to 1.085 (1.083 with the move rule of
        `Sender.try_improve`), with fewer rounds. With limited links a full link can make the detour
        the only way, so they count there."""
        return not self.link_limits and st.cheapest.get(h, INF) >= INF

    def _fold(self, old: State, new: State) -> None:
        """Update the cached minima over next hops for one next hop's new view, without a rescan:
        a value that fell replaces the minimum; one that rose from the minimum drops that entry."""
        top, v = self.max_label, new.node
        was_ok, now_ok = old.spare > EPS, new.spare > EPS
        fwd = self._fwd_cache
        # how many next hops sit at each minimum, so that one rising from it needs no rescan while
        # another stays (a rescan reads every next hop; it ran on most relabels at 62 next hops)
        counts = self._fwd_count
        limits = self.link_limits  # (`dead_end` inlined: this runs on most views a peer takes)
        for h, best in fwd.items():
            was = old.labels.get(h, top) if was_ok and (limits or old.cheapest.get(h, INF) < INF) else top
            now = new.labels.get(h, top) if now_ok and (limits or new.cheapest.get(h, INF) < INF) else top
            if now < best:
                fwd[h] = now
                counts[h] = 1
            elif now == best:
                if was != best:
                    counts[h] += 1
            elif now > was and was <= best:
                if was == best < top and counts[h] > 1:
                    counts[h] -= 1  # another next hop still offers this minimum
                    continue
                fwd.clear()  # v may have been the minimum: rescan on next use
                break
        cheap = self._cheap_cache
        if cheap:
            link = self.link(v)
            for h, best in list(cheap.items()):
                was = link + old.cheapest.get(h, INF) if was_ok and old.labels.get(h, top) < top else INF
                now = link + new.cheapest.get(h, INF) if now_ok and new.labels.get(h, top) < top else INF
                if now < best:
                    cheap[h] = now
                elif now > was and was <= best:
                    del cheap[h]


__all__ = ["Views"]
