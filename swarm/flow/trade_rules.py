"""How a trade is judged: what it does to the most expensive path through the edges it changes, and
what those edges may cost for it. Pure functions of the figures a peer has (no state, no I/O), shared
by exchanges (swarm/flow/exchange.py), hand-overs, onward swaps and rotations.

Every figure is a path cost in seconds: `paths` are the worst paths through a -> b, c -> d, a -> d
and c -> b (a's route so far, the edge, and the next peer's route onwards), as d computes them from
a's bid and its own path news (swarm/flow/path_news.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from swarm.flow.messages import Offer
from swarm.flow.news import EPS

Paths4 = tuple[float, float, float, float]
Cost = Callable[[str, str], float]

# A trade that makes the worst path through its four edges cheaper may cost those edges up to this
# fraction of what it saves there. On three sweeps (`swarm bench flow-sweep --instances 30 --seed
# 0/1/2`), 0 (edges may not get dearer) gave a max path 1.083x the min-cost flow's (mean; 32 of 90
# within 5%) and a mean path within 10% on 66; 0.25: 1.066 (37), 65; 0.5: 1.059 (43), 61; 0.75: 1.067
# (41), 58; 1.0: 1.071 (36), 57. With the holder's ramp (swarm/flow/ramp.py) the first flow is near
# the min-cost flow's mean path, which leaves room to trade it for the max path: on the whole range
# (4-16 x 3-30, seeds 0 / 1 / 2, `--max-stages 16 --max-per-stage 30`) 0.5 gave 24 / 26 / 26 of 30
# within 5% (mean max / opt 0.997 / 0.992 / 0.995) and the mean path within 10% on all 90; 0.75
# gives 27 / 27 / 23 (0.981 / 0.989 / 0.992) and still all 90; 0.9 gives 26 / 25 / 24; 1.0 gives
# 26 / 27 / 26 (0.982 / 0.986 / 0.998) but one mean path at 1.101.
WORST_PATH_PRICE = 0.75
# A late walk's trade (swarm/flow/walks.py, LATE_WALKS) may cost its four edges at most this many
# times what the worst path through them saves: a long series of walks otherwise buys a few ms of
# the worst path with far dearer detours, and the mean path climbs (seed 2 instance 21 under bus
# seeds + 1000, with 32 walks all unbounded: max / opt 1.073 -> 1.049 but mean / opt 1.086 -> 1.102).
CRITICAL_PRICE = 3.0
# With limited links (the simulator's swarms: several holders share them) the price stays at 0.5,
# where the simulator's table was measured: a dearer trade for one holder's worst path moves link
# use the other holders' flows share (as walks, `ask_budget.WALKS_WITH_LINK_LIMITS`).
LINK_LIMITED_PRICE = 0.5


def edge_price(msg: Offer, price: float) -> float:
    """What an asked trade's four edges may cost per second the worst path through them saves: the
    usual price, no bound for a worst-path walk's ask, CRITICAL_PRICE for a late walk's."""
    if msg.critical:
        return CRITICAL_PRICE if msg.late else math.inf
    return price


def trade_price(link_limits: bool) -> float:
    """How much dearer a trade's four edges may get per second the worst path through them saves."""
    return LINK_LIMITED_PRICE if link_limits else WORST_PATH_PRICE


def rise(paths: Paths4, sends_here: bool, keeps_ab: bool, keeps_cd: bool) -> float:
    """How much dearer a trade makes the worst path through its four edges, counting only the edges
    that carry flow before and after it. `paths` are the worst paths through a -> b, c -> d, a -> d
    and c -> b. A partial trade leaves a -> b (or c -> d) in use, and its paths with it: judged as if
    they went, such trades counted a gain on the worst path that never came and added two edges each
    (the protocol's flows used twice the edges of the min-cost flow). Counted honestly (docs/routing.md:
    "Partial trades keep their paths"), on the whole range, seed 0, two message timings: max path
    within 5% 19 / 16 -> 21 / 19 of 30, mean max path / opt 1.041 / 1.059 -> 1.028 / 1.027, messages
    per peer 574 / 570 -> 511 / 500."""
    via_ab, via_cd, via_ad, via_cb = paths
    before = max(via_ab, via_cd, via_ad if sends_here else 0.0)
    after = max(via_ad, via_cb, via_ab if keeps_ab else 0.0, via_cd if keeps_cd else 0.0)
    return after - before


def plan_rise(
    msg: Offer, paths: Paths4, worst_d: float, keeps_ab: bool, keeps_cd: bool, cost: Cost, me: str
) -> float:
    """How much dearer an onward swap makes the worst path through its edges. The exchange moves the
    initiator's flow from b to d (`me`) and c's from d to b; the hand-over after it moves that flow on
    from the initiator to its mate y, which sends it to d. So x -> y -> d and c -> b take the place of
    the initiator's route through b and c -> d (swarm/flow/onward_swaps.py)."""
    x, y = msg.plan_sender or "", msg.plan_taker or ""
    try:
        via_y = msg.plan_arrival + cost(x, y) + cost(y, me) + worst_d
    except Exception:  # noqa: BLE001 - x or y left the instance: the plan cannot pay
        return math.inf
    via_ab, via_cd, _, via_cb = paths
    after = max(via_y, via_cb, via_ab if keeps_ab else 0.0, via_cd if keeps_cd else 0.0)
    return after - max(via_ab, via_cd)


def rotate_rise(
    msg: Offer,
    paths: Paths4,
    g: str,
    up_g: float,
    worst_b: float,
    moved: float,
    keeps_ab: bool,
    keeps_cd: bool,
    cost: Cost,
) -> float:
    """How much dearer a rotation makes the worst path through its six edges (swarm/flow/rotations.py).
    This exchange moves the initiator's flow from b to d and d's partner g's from d to b; the trade
    after it moves the rotation's sender r from its hop x to b, and g's flow from b to x. So the
    initiator -> d, r -> b and g -> x take the place of the initiator -> b, g -> d and r -> x. This
    exchange alone (the initiator -> d, g -> b) may not make the worst of those paths dearer: the
    trade after it is asked for, not promised."""
    r, x, b = msg.rotate_sender or "", msg.rotate_hop or "", msg.swap_from or ""
    try:
        via_rx = msg.rotate_arrival + cost(r, x) + msg.rotate_worst
        via_rb = msg.rotate_arrival + cost(r, b) + worst_b
        via_gx = up_g + cost(g, x) + msg.rotate_worst
    except Exception:  # noqa: BLE001 - r, x or g left the instance: the rotation cannot pay
        return math.inf
    via_ab, via_cd, via_ad, via_cb = paths
    kept = [via_ab if keeps_ab else 0.0, via_cd if keeps_cd else 0.0]
    before = max(via_ab, via_cd, via_rx)
    if max(via_ad, via_cb, *kept) > before + EPS:
        return math.inf  # (should the trade after it not follow, this one alone makes it dearer)
    kept.append(via_rx if msg.rotate_rate > moved + EPS else 0.0)
    return max(via_ad, via_rb, via_gx, *kept) - before


__all__ = [
    "CRITICAL_PRICE",
    "LINK_LIMITED_PRICE",
    "WORST_PATH_PRICE",
    "edge_price",
    "plan_rise",
    "rise",
    "rotate_rise",
    "trade_price",
]
