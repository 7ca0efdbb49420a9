"""Resyncs: an ask whose mate left half-way leaves no edge out of step.

In an exchange or a hand-over the initiator a asks d, a stage mate of its next hop b. b, the
receiving end of a -> b, moves a's flow off that edge, and d tells a (`Reply`, or `Moved` when d
had stopped waiting). If d leaves after b moved the flow and before a heard, a still counts that
flow on a -> b and b does not, and nobody else would ever tell a. So a remembers its asks until d
answers them (or, where d stopped waiting for b, for a while); when the mate it asked leaves, a
asks each hop it offered there (`Resync`), and b answers what it moved for those asks
(`Resynced`). b is the receiving end of a -> b, so a takes b's word for the edge, less what d's
answers already settled, and pushes what it gets back elsewhere.

(When b leaves instead, a writes a -> b off with it; what c and d, or d and z, may then disagree
on is settled by swarm/flow/trade_notes.py.)
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from swarm.flow.corridor import Corridors
from swarm.flow.exchange import ANSWER_WAIT
from swarm.flow.messages import AskMoved, Body, Moved, Reply, Resync, Resynced
from swarm.flow.news import EPS

RESYNC_KEEP = 4 * ANSWER_WAIT  # retry periods an ask (at a) and a move (at b) are remembered


@dataclass
class _Ask:
    """An exchange ask this peer (as a) sent to `mate`, offering it its flow on `hops`."""

    mate: str
    holder: str
    hops: tuple[str, ...]
    at: float
    applied: dict[str, float] = field(default_factory=dict)  # hop -> flow the mate's answers moved
    gens: dict[str, int] = field(default_factory=dict)  # hop -> our edge generation with it then
    resynced: bool = False  # settled by a hop's `Resynced`: a late answer of the mate moves no more


class Resyncs(Corridors):
    """Asks remembered (as a) and moves remembered (as b), to settle asks whose mate left."""

    def init_resyncs(self) -> None:
        self._asks: dict[int, _Ask] = {}
        self._gave: list[tuple[float, str, str, int, str, float]] = []  # (when, d, a, ask, holder, rate)
        self._left_mates: dict[str, float] = {}  # stage mates that left -> when (see `gave`)
        self._closed: dict[tuple[str, str, int], float] = {}  # (d, a, ask) settled by a Resync -> when

    def dispatch_sender(self, src: str, body: Body) -> bool:
        """Both messages settle a sender's edge (a -> b): they go before the stage roles' handlers."""
        if isinstance(body, Resync):
            self.on_resync(src, body)
        elif isinstance(body, Resynced):
            self.on_resynced(src, body)
        else:
            return super().dispatch_sender(src, body)
        return True

    def _kept_since(self) -> float:
        return self.now - RESYNC_KEEP * self.env.retry_s

    # ------------------------------------------------------------------ a
    def asked(self, oid: int, d: str, h: str, hops: tuple[str, ...]) -> None:
        since = self._kept_since()
        for old in [k for k, ask in self._asks.items() if ask.at < since]:
            del self._asks[old]
        self._asks[oid] = _Ask(d, h, hops, self.now, gens={x: self._gen.get(x, 0) for x in hops})

    def on_reply(self, src: str, msg: Reply) -> None:
        if not msg.waiting and msg.offer_id in self.offers:
            ask = self._asks.pop(msg.offer_id, None)  # settled: d answered with what b moved (or refused)
            hop, oid = msg.swapped or "", msg.offer_id
            if ask is not None and ask.resynced and msg.exchanged > EPS and self._moves_old(oid, hop):
                # b already told us what it moved (`Resynced`: it thought d gone, but d answers too):
                # the old edge moves once, so what b's word took off it is added back here first
                back = min(ask.applied.get(hop, 0.0), msg.exchanged)
                self.out[ask.holder][hop] = self.out[ask.holder].get(hop, 0.0) + back
        super().on_reply(src, msg)

    def _moves_old(self, oid: int, hop: str) -> bool:
        """Whether d's reply to offer `oid` takes its traded rate off our edge to `hop` (as
        `Sender.on_reply` does: unless one of us wrote the other off since)."""
        return hop in self.next and self.same_edge(hop, self._old_gen.get(oid, {}).get(hop, -1))

    def on_moved(self, src: str, msg: Moved) -> None:
        ask = self._asks.get(msg.ask) if msg.ask >= 0 else None
        reset = ask is not None and ask.gens.get(msg.old, 0) != self._gen.get(msg.old, 0)
        if ask is not None and (ask.resynced or reset):
            # the hop's word settled the old edge, or one of us wrote the other off since (the edge
            # was dropped on both sides): only src's side moves
            msg = dataclasses.replace(msg, old="")
        elif ask is not None and msg.holder in self.out and msg.old in self.next:
            ask.applied[msg.old] = ask.applied.get(msg.old, 0.0) + msg.rate
        super().on_moved(src, msg)

    def forget_target(self, node: str) -> None:
        since = self._kept_since()
        open_asks = sorted(oid for oid, ask in self._asks.items() if ask.mate == node and ask.at >= since)
        super().forget_target(node)
        by_hop: dict[str, list[int]] = {}
        for oid in open_asks:
            for hop in self._asks[oid].hops:
                if hop in self.next:
                    by_hop.setdefault(hop, []).append(oid)
        for hop, oids in sorted(by_hop.items()):
            self.send(hop, Resync(node, tuple(oids)))

    def on_resynced(self, src: str, msg: Resynced) -> None:
        self.observe(msg.state)
        for m in msg.moved:
            ask = self._asks.get(m.ask)
            if ask is None or ask.mate != msg.gone or src not in self.next or m.holder not in self.out:
                continue
            if ask.gens.get(src, 0) != self._gen.get(src, 0):
                continue  # one of us wrote the other off since the ask: that edge was dropped
            done = ask.applied.get(src, 0.0)
            ask.applied[src] = max(done, m.rate)
            ask.resynced = True
            if m.rate - done > EPS:
                self.out[m.holder][src] = self.out[m.holder].get(src, 0.0) - (m.rate - done)
                self.flows_moved()
                self._worst_cache.clear()

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


__all__ = ["Resyncs", "RESYNC_KEEP"]
