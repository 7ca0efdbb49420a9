"""Resyncs, b's side: an ask whose mate left half-way leaves no edge out of step.

In an exchange or a hand-over the initiator a asks d, a stage mate of its next hop b, and b moves
a's flow off a -> b. When d leaves before a heard, a asks b (`Resync`), and b answers what it moved
for those asks (`Resynced`). a's side, the asks it remembers and how it takes b's word, is in
swarm/flow/ask_resync.py.

(When b leaves instead, a writes a -> b off with it; what c and d, or d and z, may then disagree
on is settled by swarm/flow/trade_notes.py.)
"""

from __future__ import annotations

from swarm.flow.corridor import Corridors
from swarm.flow.messages import AskMoved, Body, Resync, Resynced


class Resyncs(Corridors):
    """Moves remembered (as b), to settle asks whose mate left (a's side: `AskResyncs`)."""

    def init_resyncs(self) -> None:
        self.init_ask_resyncs()
        self._gave: list[tuple[float, str, str, int, str, float]] = []  # (when, d, a, ask, holder, rate)
        self._left_mates: dict[str, float] = {}  # stage mates that left -> when (see `gave`)
        self._closed: dict[tuple[str, str, int], float] = {}  # (d, a, ask) settled by a Resync -> when

    def dispatch_sender(self, src: str, body: Body) -> bool:
        """`Resync` settles a sender's edge (a -> b): it goes before the stage roles' handlers."""
        if isinstance(body, Resync):
            self.on_resync(src, body)
            return True
        return super().dispatch_sender(src, body)

    # ------------------------------------------------------------------ b
    def gave(self, d: str, h: str, a: str, ask: int, rate: float) -> None:
        """Remember the move for a's `Resync`; if d already left (a hand-off z answered late), a
        may have asked already and heard nothing, so b tells a at once. A d that left only in our
        view (a lapsed record) and is a known mate again answers a itself."""
        since = self._kept_since()
        self._gave = [e for e in self._gave if e[0] >= since]
        self._left_mates = {m: t for m, t in self._left_mates.items() if t >= since}
        if d in self._left_mates and self.mate_known(d):
            del self._left_mates[d]  # (it came back: a hears from it, not from us)
        if d in self._left_mates:
            if a in self.prev:
                self.send(a, Resynced(d, (AskMoved(ask, h, rate),), self.state()))
            return
        self._gave.append((self.now, d, a, ask, h, rate))

    def mate_left(self, node: str) -> None:
        self._left_mates[node] = self.now

    def ask_closed(self, d: str, a: str, ask: int) -> bool:
        """a settled its ask to d with us (`Resync`) already: d's trade for it, should it still come
        (d was only thought gone, or its message was on its way), moves nothing."""
        return (d, a, ask) in self._closed

    def on_resync(self, src: str, msg: Resync) -> None:
        since = self._kept_since()
        self._closed = {k: t for k, t in self._closed.items() if t >= since}
        for ask in msg.asks:
            self._closed[(msg.gone, src, ask)] = self.now
        asks = set(msg.asks)
        mine, rest = [], []
        for e in self._gave:
            (mine if e[1] == msg.gone and e[2] == src and e[3] in asks else rest).append(e)
        self._gave = rest
        if mine:
            self.send(src, Resynced(msg.gone, tuple(AskMoved(e[3], e[4], e[5]) for e in mine), self.state()))


__all__ = ["Resyncs"]
