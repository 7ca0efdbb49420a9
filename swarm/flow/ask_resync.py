"""The asking side of trades: an initiator a remembers its asks until they are settled.

a asks d, a stage mate of its next hop b, to take over a's flow on a -> b (an exchange or a
hand-over: swarm/flow/exchange.py, swarm/flow/handover.py). b, the receiving end of a -> b, moves
a's flow off that edge, and d tells a (`Reply`, or `Moved` when d had stopped waiting). If d leaves
after b moved the flow and before a heard, a still counts that flow on a -> b and b does not, and
nobody else would ever tell a. So a remembers its asks until d answers them (or, where d stopped
waiting for b, for a while); when the mate it asked leaves, a asks each hop it offered there
(`Resync`), and b answers what it moved for those asks (`Resynced`, b's side: swarm/flow/resync.py).
b is the receiving end of a -> b, so a takes b's word for the edge, less what d's answers already
settled, and pushes what it gets back elsewhere.

Stage peers and data holders both ask (a holder hands its first hops over:
swarm/flow/holder_hand_overs.py), so this side lives apart from the stage roles.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from swarm.flow.agent import Sender
from swarm.flow.messages import Body, Cancel, Moved, Offer, Reply, Resync, Resynced, SwapOption
from swarm.flow.news import EPS

ANSWER_WAIT = 8.0  # retry periods before d tells a "nothing so far" (it still waits for b: `expire_exchange`)
RESYNC_KEEP = 4 * ANSWER_WAIT  # retry periods an ask (at a) and a move (at b) are remembered


@dataclass
class _Ask:
    """An exchange ask this node (as a) sent to `mate`, offering it its flow on `hops`."""

    mate: str
    holder: str
    hops: tuple[str, ...]
    at: float
    applied: dict[str, float] = field(default_factory=dict)  # hop -> flow the mate's answers moved
    gens: dict[str, int] = field(default_factory=dict)  # hop -> our edge generation with it then
    resynced: bool = False  # settled by a hop's `Resynced`: a late answer of the mate moves no more


class AskResyncs(Sender):
    """Asks remembered (as a), and the flow moves they bring (`Moved`), settled once each."""

    def init_ask_resyncs(self) -> None:
        self._asks: dict[int, _Ask] = {}

    def dispatch_sender(self, src: str, body: Body) -> bool:
        """`Resynced` settles a sender's edge (a -> b): it goes before the stage roles' handlers."""
        if isinstance(body, Resynced):
            self.on_resynced(src, body)
            return True
        return super().dispatch_sender(src, body)

    def send_trade_ask(
        self,
        h: str,
        d: str,
        b: str,
        options: tuple[SwapOption, ...],
        label: int,
        bid: float,
        critical: bool,
        plan: tuple[str, str, float] | None = None,
        rotate: tuple[str, float, str, float, float] | None = None,
        go: bool = False,
        late: bool = False,
        partner: str | None = None,
        room: tuple[float, float] | None = None,
    ) -> int:
        """Ask d to take our flow on one of the `options`' hops (b the best of them) over, by an
        exchange or a hand-over; the ask is remembered until it is settled. `plan`: an onward swap's
        (sender, taker, sender's arrival), see swarm/flow/onward_swaps.py; `rotate`: a rotation's
        (sender, its arrival, its hop, that hop's worst route onwards, its rate), see
        swarm/flow/rotations.py; `go`: `Offer.rotate_go`; `late`: `Offer.late`; `partner`:
        `Offer.layer_partner` (swarm/flow/layer_plans.py); `room`: `Offer.room_bound` and
        `Offer.room_rise` (swarm/flow/room_chains.py). Returns the ask's id."""
        rate = max(o.rate for o in options)
        oid = self.add_offer(h, d, rate, b)
        self._old_gen[oid] = {o.hop: o.gen for o in options}
        self.asked(oid, d, h, tuple(o.hop for o in options))
        worst_b = next((o.worst for o in options if o.hop == b), self.worst_of(h, b))
        ask = Offer(
            h,
            rate,
            oid,
            label,
            b,
            bid=bid,
            state=self.state(),
            swap_worst=worst_b,
            swap_options=options,
            critical=critical,
            late=late,
            rotate_go=go,
            layer_partner=partner,
            room_bound=room[0] if room else None,
            room_rise=room[1] if room else 0.0,
        )
        if plan is not None:
            ask = dataclasses.replace(ask, plan_sender=plan[0], plan_taker=plan[1], plan_arrival=plan[2])
        if rotate is not None:
            sender, arrival, hop, worst, rate = rotate
            ask = dataclasses.replace(
                ask,
                rotate_sender=sender,
                rotate_arrival=arrival,
                rotate_hop=hop,
                rotate_worst=worst,
                rotate_rate=rate,
            )
        self.send(d, ask)
        if critical and plan is None and rotate is None and not go:
            self.worst_ask_sent(oid, h, b, d, late)
        return oid

    def worst_ask_sent(self, oid: int, h: str, b: str, d: str, late: bool) -> None:
        """A plain worst-path ask went out (swarm/flow/rotations.py remembers it for the go)."""

    def _kept_since(self) -> float:
        return self.now - RESYNC_KEEP * self.env.retry_s

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
        self._apply_moved(src, msg)

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

    def _apply_moved(self, src: str, msg: Moved) -> None:
        """A trade between two of our next hops moved some of our flow from `old` to `src` (as c of
        an exchange, or as a whose ask d answered late)."""
        self.observe(msg.state)
        h = msg.holder
        # the edge to `old` moves unless one of us wrote the other off since the trade (`Moved.old_gen`)
        old_moves = msg.old in self.next and self.same_edge(msg.old, msg.old_gen)
        if src not in self.next or h not in self.out or src == self._fenced_src:
            # not ours to send to (or from before we wrote src off and found it again): withdraw it
            if h in self.out and old_moves:  # it left `old` all the same
                self.out[h][msg.old] = self.out[h].get(msg.old, 0.0) - msg.rate
                self.flows_moved()
                self._worst_cache.clear()
            if src != self._fenced_src:  # (a stale one: src dropped that flow when it saw us write it off)
                self.send(src, Cancel(h, msg.rate, self._new_id()), reliable=False)
            return
        self.out[h][src] = self.out[h].get(src, 0.0) + msg.rate
        self.flows_moved()
        if old_moves:  # (unless we already wrote that hop off; may dip below zero
            # while our offer to it is unanswered: its reply adds what it accepted)
            self.out[h][msg.old] = self.out[h].get(msg.old, 0.0) - msg.rate
            self.flows_moved()
        self._worst_cache.clear()


__all__ = ["AskResyncs", "ANSWER_WAIT", "RESYNC_KEEP"]
