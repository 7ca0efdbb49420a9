"""Refresh waves: once a holder's walks are spent and have made its worst route cheaper, it has
every peer tell its upstream neighbours its exact state, the sink's side first, and then walks again
on those figures.

Announcements carry news only (swarm/flow/news.py): a route cost that moved by under 5% (or 10 ms)
is not re-sent, and no summary holds the `worst` figures, so the views a walk judges stage mates by
drift away from the truth, and a trade that pays is never asked. On seed 2 instance 11 of the whole
range a walk passed over a mate whose announced worst route was 2.783 s where it was 1.875 s
(docs/routing.md). GWTF's peers re-announce every couple of seconds; here a holder starts at most
REFRESHES waves (again after churn near it), so that a converged swarm falls quiet, and only after
walks that paid: where walks changed nothing, the figures they judged by were not what held them
back (a 4 x 3 swarm: 1,799 messages with a wave after every walk series, 667 without one).

The wave runs upstream: the holder tags an announcement to its last-stage peers; a peer that gets a
tagged announcement from a next hop waits WAVE_WAIT retry periods for its other next hops, then
sends its state, tagged, to every upstream neighbour, and its path news afresh. So each stage
announces after the stage below it, and the worst routes it announces are built from fresh ones.
When the wave reaches the holder again (from a stage-0 peer), the holder walks WAVE_WALKS more times,
and more while they pay. A wave costs about one announcement per edge.

Measured on the whole range (4-16 stages x 3-30 peers, seeds 0 / 1 / 2, bus seeds s): max path
within 5% of the min-cost flow's on 86 -> 88 of 90 for 4.4% more messages, and 251 -> 254 of 270
runs under three message timings (with two waves after every walk series and WALKS walks after
each: 89 of 90 for 9.9%); docs/routing.md, "Refresh waves".
"""

from __future__ import annotations

from swarm.flow.messages import Announce
from swarm.flow.walks import WALK_WAIT, HolderWalks, WorstWalks, walks_here

# Waves a holder starts once its walks are spent (again after churn near it). Two took the whole range
# to 89 of 90 under timing s (one: 88), but re-convergence after churn on the 16 x 48 row of the churn
# table (seed 6) from 134 to 251 rounds, 2.30x the first convergence's 109 (one wave: 192, 1.76x).
REFRESHES = 1
WAVE_WALKS = 2  # walks after a wave, more while they pay (`HolderWalks.walk_again`)
WAVE_WAIT = 0.5  # retry periods a peer waits for its other next hops' part of a wave
# Waves a peer passes on per holder (again after churn near it): a neighbour that tags announcement
# after announcement (a bug, or a volunteer that means harm) costs us no more than this many rounds.
WAVE_RELAYS = 2 * REFRESHES


class PeerWaves(WorstWalks):
    """A stage peer's part in refresh waves."""

    def init_refresh_waves(self) -> None:
        self._wave_round: dict[str, int] = {}  # holder -> the last wave we passed on
        self._wave_relays: dict[str, int] = {}  # holder -> waves we may still pass on
        self._wave_due: dict[str, int] = {}  # holder -> the wave we pass on when the timer fires
        self._wave_armed = False

    def reset_exchanges(self) -> None:
        """Churn near us: fresh relay budgets, and any wave number counts again (a forged one far
        ahead of its holder's would otherwise shut that holder's waves out for good)."""
        super().reset_exchanges()
        self._wave_relays = {}
        self._wave_round = {}

    def on_wave(self, src: str, holder: str, wave: int) -> None:
        if src not in self.next or holder not in self.holders or not walks_here(self):
            return
        if wave <= self._wave_round.get(holder, 0) or holder in self._wave_due:
            return
        left = self._wave_relays.get(holder, WAVE_RELAYS)
        if left <= 0:
            return
        self._wave_relays[holder] = left - 1
        self._wave_round[holder] = wave
        self._wave_due[holder] = wave
        if not self._wave_armed:
            self._wave_armed = True
            self.env.set_timer(self.id, WAVE_WAIT * self.env.retry_s, "wave")

    def on_wave_timer(self) -> None:
        """Our state and path news, exact, to every upstream neighbour and sender."""
        self._wave_armed = False
        due, self._wave_due = self._wave_due, {}
        self._worst_cache.clear()
        st = self.state()
        for holder, wave in sorted(due.items()):
            body = Announce(st, holder, wave)
            for node in sorted(self.prev):
                self.send(node, body, reliable=False)
        self._told_paths.clear()
        self.publish_paths()


class HolderWaves(HolderWalks):
    """The holder's side: when to start a wave, and walks again when it comes back."""

    def init_walks(self) -> None:
        super().init_walks()
        self._waves_left = REFRESHES
        self._wave = 0
        self._wave_back = True  # (no wave out)
        self._wave_armed = False
        self._wave_mark: tuple = ()

    def renew_walks(self) -> None:
        super().renew_walks()
        self._waves_left = REFRESHES
        self._wave_back = True  # (a wave lost on the way, to loss or a peer that left, is forgotten)

    def walks_spent(self) -> None:
        """Our walks are spent: once our flows stayed put for WALK_WAIT retry periods, a wave."""
        if self._wave_armed or self._waves_left <= 0 or not self._wave_back or not self._walks_paid:
            return  # (only after walks made our worst route onwards cheaper: see the module)
        self._wave_armed = True
        self._wave_mark = self._walk_key()
        self.env.set_timer(self.id, WALK_WAIT * self.env.retry_s, "wave")

    def on_wave_timer(self) -> None:
        self._wave_armed = False
        if self._walk_key() != self._wave_mark:
            self.walks_spent()
            return
        self._waves_left -= 1
        self._walks_paid = False
        self._wave += 1
        self._wave_back = False
        body = Announce(self.state(), self.id, self._wave)
        for node in sorted(self.prev):
            self.send(node, body, reliable=False)

    def on_wave(self, src: str, holder: str, wave: int) -> None:
        if holder != self.id or wave != self._wave or self._wave_back or src not in self.next:
            return
        self._wave_back = True  # (the first stage-0 peer's part; the others follow within a wait)
        self.walk_again(WAVE_WALKS)


__all__ = ["HolderWaves", "PeerWaves", "REFRESHES", "WAVE_RELAYS", "WAVE_WAIT"]
