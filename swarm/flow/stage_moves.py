"""The moves that carry out a stage plan, in waves, with the stage no dearer on the way.

Pure decision code for stage plans (swarm/flow/stage_plans.py). A plan changes which peers b of a
stage carry how much (`stage_assignment.plan_stage`); the protocol moves flow only by hand-overs
(a -> b -> z becomes a -> d -> z: b's and d's throughputs change) and exchanges (a -> b, c -> d
become a -> d, c -> b, in either layer around the stage). Hand-overs first and exchanges after
would reach the plan, but on seed 2 instance 14 of the whole-range sweep the flows between them
made the stage 12% dearer, and a plan that stops half-way (a refusal, flow that moved meanwhile)
leaves it so: one such plan took seed 2 instance 21 (+ 5000) from 1.04 to 1.24 times the min-cost
flow's max path.

So the moves are chosen one at a time, each the one that brings the flows nearest the plan among
those that keep every path through the stage within `limit` (the stage's dearest path now), and
then grouped into waves: a move goes in the wave after the last move that touched one of its
peers. Where no safe move is left, the moves found so far are the plan (the caller takes them if
they pay on their own).

With several holders (swarm/flow/shared_stage.py) every stage peer is one mid per holder, keyed
(peer, holder), and `space` gives each peer's room shared by its mids: a hand-over then needs the
taker's spare, and where a full peer must take one holder's flow while giving another's away the
move is a pair of hand-overs made together ("pair": a -> b -> z of holder h becomes a -> d -> z
and c -> d -> w of holder g becomes c -> b -> w, both peers' throughputs kept). The protocol has
no such move (an experiment with it was not kept: docs/routing.md, "Stage plans over several
holders"); `swarm bench flow-sweep --shared-plan-bound` uses it to tell how far plans could go.
"""

from __future__ import annotations

from collections.abc import Mapping

EPS = 1e-9
Edge = tuple[str, str]
# ("hand", a, b, d, z, rate) | ("in", a, b, c, d, rate) | ("out", a, b, c, d, rate); a swap as in
# `layer_assignment.Swap`: a's flow on b moves to d, c's on d to b
Move = tuple[str, str, str, str, str, float]


class _Flows:
    """The flows in and out of the stage as moves change them."""

    def __init__(
        self, flows_in: Mapping[Edge, float], flows_out: Mapping[Edge, float], dear, space=None
    ) -> None:
        self.into = {e: r for e, r in flows_in.items() if r > EPS}
        self.out = {e: r for e, r in flows_out.items() if r > EPS}
        self.dear = dear
        self.space = space  # {peer: room} with several holders' mids (peer, holder); else None

    def add(self, layer: dict[Edge, float], e: Edge, rate: float) -> None:
        layer[e] = layer.get(e, 0.0) + rate
        if layer[e] <= EPS:
            del layer[e]

    def index(self) -> None:
        """Edges by peer, for the next round of candidates."""
        self.into_of: dict[str, list[tuple[Edge, float]]] = {}
        self.from_of: dict[str, list[tuple[Edge, float]]] = {}
        self.out_of: dict[str, list[tuple[Edge, float]]] = {}
        self.onto_of: dict[str, list[tuple[Edge, float]]] = {}
        for e, r in self.into.items():
            self.into_of.setdefault(e[1], []).append((e, r))
            self.from_of.setdefault(e[0], []).append((e, r))
        for e, r in self.out.items():
            self.out_of.setdefault(e[0], []).append((e, r))
            self.onto_of.setdefault(e[1], []).append((e, r))
        self.carried: dict = {}
        if self.space is not None:  # (per peer: its mids' in-flows together)
            for (peer, _), r in _carried(self.into).items():
                self.carried[peer] = self.carried.get(peer, 0.0) + r

    def spare(self, mid) -> float:  # noqa: ANN001 - a mid (peer, holder)
        return self.space.get(mid[0], 0.0) - self.carried.get(mid[0], 0.0)

    def worst(self, b: str, drop_in=(), add_in=(), drop_out=(), add_out=()) -> float:
        """b's dearest path through the stage, with edges (fully) dropped or added."""
        ins = [self.dear[e] for e, _ in self.into_of.get(b, ()) if e not in drop_in]
        outs = [self.dear[e] for e, _ in self.out_of.get(b, ()) if e not in drop_out]
        ins += [self.dear[e] for e in add_in]
        outs += [self.dear[e] for e in add_out]
        return max(ins, default=0.0) + max(outs, default=0.0) if ins and outs else 0.0


def _gone(layer: Mapping[Edge, float], e: Edge, rate: float) -> tuple[Edge, ...]:
    return (e,) if layer.get(e, 0.0) - rate <= EPS else ()


def _carried(flows_in: Mapping[Edge, float]) -> dict:
    """What each stage peer (or mid) takes in."""
    into: dict = {}
    for (_, b), r in flows_in.items():
        into[b] = into.get(b, 0.0) + r
    return into


def _hand_overs(f: _Flows, new_in, new_out, limit: float):
    have, want = _carried(f.into), _carried(new_in)
    for b, hb in have.items():
        extra = hb - want.get(b, 0.0)
        if extra <= EPS:
            continue
        for d, wd in want.items():
            need = wd - have.get(d, 0.0)
            if need <= EPS or d == b:
                continue
            for (a, _), ra in f.into_of.get(b, ()):
                if (a, d) not in f.dear:
                    continue
                for (_, z), rz in f.out_of.get(b, ()):
                    if (d, z) not in f.dear:
                        continue
                    rate = min(extra, need, ra, rz)
                    if f.space is not None:
                        rate = min(rate, f.spare(d))
                    safe = f.worst(d, add_in=[(a, d)], add_out=[(d, z)]) <= limit + EPS
                    if safe and rate > EPS:
                        yield ("hand", a, b, d, z, rate)


def _pairs(f: _Flows, new_in, limit: float):
    """Pairs of hand-overs across holders between two peers B and D: B gives holder h's flow to D
    and takes holder g's flow from D, where the plan wants both and D has no spare for the first."""
    have, want = _carried(f.into), _carried(new_in)
    extra = {b: v - want.get(b, 0.0) for b, v in have.items() if v - want.get(b, 0.0) > EPS}
    need = {b: v - have.get(b, 0.0) for b, v in want.items() if v - have.get(b, 0.0) > EPS}
    for b, xb in extra.items():  # b = (B, h)
        for d, nd in need.items():  # d = (D, h)
            if d[1] != b[1] or d[0] == b[0] or f.spare(d) >= nd - EPS:
                continue
            for d2, xd in extra.items():  # d2 = (D, g), b2 = (B, g)
                b2 = (b[0], d2[1])
                if d2[0] != d[0] or d2[1] == b[1] or need.get(b2, 0.0) <= EPS:
                    continue
                room = min(xb, nd, xd, need[b2])
                yield from _pair_edges(f, b, d, d2, b2, room, limit)


def _pair_edges(f: _Flows, b, d, d2, b2, room: float, limit: float):  # noqa: ANN001 - mids
    for (a, _), ra in f.into_of.get(b, ()):
        for (_, z), rz in f.out_of.get(b, ()):
            if (a, d) not in f.dear or (d, z) not in f.dear:
                continue
            if f.worst(d, add_in=[(a, d)], add_out=[(d, z)]) > limit + EPS:
                continue
            for (c, _), rc in f.into_of.get(d2, ()):
                for (_, w), rw in f.out_of.get(d2, ()):
                    if (c, b2) not in f.dear or (b2, w) not in f.dear:
                        continue
                    if f.worst(b2, add_in=[(c, b2)], add_out=[(b2, w)]) > limit + EPS:
                        continue
                    rate = min(room, ra, rz, rc, rw)
                    if rate > EPS:
                        yield (("pair", a, b, d, z, rate), ("pair", c, d2, b2, w, rate))


def _swaps(kind: str, layer: dict[Edge, float], plan: Mapping[Edge, float], f: _Flows, limit: float):
    """Exchanges a -> b, c -> d => a -> d, c -> b that the plan wants (a -> d up, a -> b and
    c -> d down), safe for the stage peers on the stage's side of the layer."""
    for (a, d), want in plan.items():
        if want - layer.get((a, d), 0.0) <= EPS:
            continue
        senders = f.from_of if kind == "in" else f.out_of
        takers = f.into_of if kind == "in" else f.onto_of
        for (_, b), rab in senders.get(a, ()):
            if b == d or plan.get((a, b), 0.0) >= rab - EPS:
                continue
            for (c, _), rcd in takers.get(d, ()):
                if c == a or plan.get((c, d), 0.0) >= rcd - EPS or (c, b) not in f.dear:
                    continue
                up = want - layer.get((a, d), 0.0)
                rate = min(up, rab - plan.get((a, b), 0.0), rcd - plan.get((c, d), 0.0))
                ab, cd = _gone(layer, (a, b), rate), _gone(layer, (c, d), rate)
                if kind == "in":  # b and d are the stage's peers
                    one = f.worst(d, drop_in=cd, add_in=[(a, d)])
                    two = f.worst(b, drop_in=ab, add_in=[(c, b)])
                else:  # a and c are
                    one = f.worst(a, drop_out=ab, add_out=[(a, d)])
                    two = f.worst(c, drop_out=cd, add_out=[(c, b)])
                safe = max(one, two) <= limit + EPS
                if safe:
                    yield (kind, a, b, c, d, rate)


def _distance(f: _Flows, new_in, new_out) -> float:
    far = 0.0
    for now, plan in ((f.into, new_in), (f.out, new_out)):
        for e in {*now, *plan}:
            far += abs(now.get(e, 0.0) - plan.get(e, 0.0))
    return far


def _changes(f: _Flows, move: Move) -> list[tuple[dict[Edge, float], Edge, float]]:
    """The edges a move changes: (layer, edge, by how much)."""
    kind, a, b, c, d, rate = move
    if kind in ("hand", "pair"):  # (a, b, d, z): a -> b -> z becomes a -> d -> z
        return [
            (f.into, (a, b), -rate),
            (f.into, (a, c), rate),
            (f.out, (b, d), -rate),
            (f.out, (c, d), rate),
        ]
    layer = f.into if kind == "in" else f.out
    return [(layer, e, v) for e, v in (((a, d), rate), ((a, b), -rate), ((c, d), -rate), ((c, b), rate))]


def _nearer(f: _Flows, move: Move, new_in, new_out) -> float:
    """How much nearer the plan a move brings the flows."""
    got = 0.0
    for layer, e, v in _changes(f, move):
        plan = (new_in if layer is f.into else new_out).get(e, 0.0)
        now = layer.get(e, 0.0)
        got += abs(now - plan) - abs(now + v - plan)
    return got


def _apply(f: _Flows, move: Move) -> None:
    for layer, e, v in _changes(f, move):
        f.add(layer, e, v)


def moves_for(
    flows_in: Mapping[Edge, float],
    flows_out: Mapping[Edge, float],
    new_in: Mapping[Edge, float],
    new_out: Mapping[Edge, float],
    dear: Mapping[Edge, float],
    limit: float,
    max_moves: int = 64,
    space: Mapping | None = None,
) -> tuple[list[list[Move]], dict[Edge, float], dict[Edge, float]]:
    """Waves of moves from the flows now towards the plan (see the module's docstring), and the
    flows once they are made. `dear` holds the dearest path through each edge a plan may use;
    `space`, with several holders' mids, each peer's shared room (a pair's halves are adjacent, in
    one wave)."""
    f = _Flows(flows_in, flows_out, dear, space)
    units: list[tuple[Move, ...]] = []
    far = _distance(f, new_in, new_out)
    for _ in range(max_moves):
        if far <= 1e-6:
            break
        best: tuple[float, tuple[Move, ...]] | None = None
        f.index()
        candidates: list[tuple[Move, ...]] = [
            *((m,) for m in _hand_overs(f, new_in, new_out, limit)),
            *((m,) for m in _swaps("in", f.into, new_in, f, limit)),
            *((m,) for m in _swaps("out", f.out, new_out, f, limit)),
            *(_pairs(f, new_in, limit) if space is not None else ()),
        ]
        for unit in candidates:
            # (per move: a pair, whose takers would go over their room until the other half lands,
            # only where no plain hand-over gets as near; its halves move different holders' edges)
            got = sum(_nearer(f, move, new_in, new_out) for move in unit) / len(unit)
            if got > 1e-7 and (best is None or got > best[0]):
                best = (got, unit)
        if best is None:
            break
        far -= best[0] * len(best[1])
        units.append(best[1])
        for move in best[1]:
            _apply(f, move)
    waves: list[list[Move]] = []
    last: dict = {}
    for unit in units:
        peers = {_peer(p, space) for move in unit for p in move[1:5]}
        wave = max((last.get(p, -1) for p in peers), default=-1) + 1
        while len(waves) <= wave:
            waves.append([])
        waves[wave].extend(unit)
        for p in peers:
            last[p] = wave
    return waves, f.into, f.out


def _peer(node, space):  # noqa: ANN001, ANN202 - a node, or a mid (peer, holder) with `space`
    return node[0] if space is not None else node


__all__ = ["moves_for", "Move"]
