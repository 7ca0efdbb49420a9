"""How a trade is judged (swarm/flow/trade_rules.py), on hand-checked figures: pure functions, no bus."""

from __future__ import annotations

import math

from swarm.flow.messages import Offer
from swarm.flow.trade_rules import (
    CRITICAL_PRICE,
    LINK_LIMITED_PRICE,
    WORST_PATH_PRICE,
    edge_price,
    plan_rise,
    rise,
    rotate_rise,
    trade_price,
)

# worst paths through a -> b, c -> d, a -> d, c -> b
PATHS = (3.0, 2.0, 2.5, 2.4)


def _ask(**kw: object) -> Offer:
    return Offer("h0", 1.0, 1, 3, **kw)  # type: ignore[arg-type]


def test_a_whole_trade_is_judged_by_the_paths_it_leaves() -> None:
    # before: a -> b (3.0) and c -> d (2.0); after: a -> d (2.5) and c -> b (2.4)
    assert math.isclose(rise(PATHS, sends_here=False, keeps_ab=False, keeps_cd=False), -0.5)


def test_a_partial_trade_keeps_the_paths_of_the_edges_it_leaves_in_use() -> None:
    # a -> b keeps some flow: its 3.0 s path stays, so the trade gains nothing on the worst path
    assert math.isclose(rise(PATHS, sends_here=False, keeps_ab=True, keeps_cd=False), 0.0)
    # c -> d keeping flow costs nothing here (2.0 is below the new worst, 2.5)
    assert math.isclose(rise(PATHS, sends_here=False, keeps_ab=False, keeps_cd=True), -0.5)


def test_an_edge_a_d_in_use_already_counts_before_the_trade() -> None:
    dear_ad = (3.0, 2.0, 3.5, 2.4)  # a -> d already carries flow on a 3.5 s path
    assert math.isclose(rise(dear_ad, sends_here=True, keeps_ab=False, keeps_cd=False), 0.0)
    assert math.isclose(rise(dear_ad, sends_here=False, keeps_ab=False, keeps_cd=False), 0.5)


def test_the_price_of_edges_depends_on_who_asks() -> None:
    assert edge_price(_ask(), 0.75) == 0.75
    assert edge_price(_ask(critical=True), 0.75) == math.inf  # a walk's ask: the path alone
    assert edge_price(_ask(critical=True, late=True), 0.75) == CRITICAL_PRICE
    assert trade_price(False) == WORST_PATH_PRICE
    assert trade_price(True) == LINK_LIMITED_PRICE


def _cost(a: str, b: str) -> float:
    table = {("x", "y"): 0.2, ("y", "d"): 0.3, ("r", "x"): 0.5, ("r", "b"): 0.1, ("g", "x"): 0.2}
    if (a, b) not in table:
        raise KeyError((a, b))  # a peer that left the instance
    return table[(a, b)]


def test_an_onward_swap_is_judged_with_the_hand_over_after_it() -> None:
    msg = _ask(plan_sender="x", plan_taker="y", plan_arrival=1.0)
    # x -> y -> d: 1.0 + 0.2 + 0.3 + d's route onwards 0.5 = 2.0; c -> b 2.4; before max(3.0, 2.0)
    assert math.isclose(plan_rise(msg, PATHS, 0.5, False, False, _cost, "d"), 2.4 - 3.0)
    gone = _ask(plan_sender="x", plan_taker="z", plan_arrival=1.0)
    assert plan_rise(gone, PATHS, 0.5, False, False, _cost, "d") == math.inf


def test_a_rotation_may_not_make_the_worst_path_dearer_on_its_own() -> None:
    rot = _ask(
        swap_from="b", rotate_sender="r", rotate_hop="x", rotate_arrival=1.0, rotate_worst=1.6,
        rotate_rate=1.0,
    )  # fmt: skip
    # before: a -> b 3.0, g -> d 2.0, r -> x 1.0 + 0.5 + 1.6 = 3.1; after: a -> d 2.5, r -> b
    # 1.0 + 0.1 + worst_b 1.0 = 2.1, g -> x up_g 1.2 + 0.2 + 1.6 = 3.0, and g -> b 2.4
    up = rotate_rise(rot, PATHS, "g", 1.2, 1.0, 1.0, False, False, _cost)
    assert math.isclose(up, 3.0 - 3.1)
    # the exchange alone (a -> d, g -> b) may not pass the worst path before the rotation
    dear = (3.0, 2.0, 3.5, 2.4)
    assert rotate_rise(rot, dear, "g", 1.2, 1.0, 1.0, False, False, _cost) == math.inf
