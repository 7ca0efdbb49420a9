"""The pure fault-handling rules in swarm/recovery/policy.py."""

from __future__ import annotations

import pytest

from swarm.recovery.policy import (
    DEFAULT_TIMEOUT_S,
    MIN_TIMEOUT_S,
    adaptive_timeout,
    choose_replacement,
    find_break,
    stage_must_wait,
)


def test_adaptive_timeout_follows_measured_hops() -> None:
    assert adaptive_timeout([]) == DEFAULT_TIMEOUT_S
    assert adaptive_timeout([0.01, 0.01]) == MIN_TIMEOUT_S
    assert adaptive_timeout([10.0, 10.0]) == pytest.approx(30.0)
    assert adaptive_timeout([1.0, 9.0]) == pytest.approx(max(15.0, 5.0 + 4 * 4.0))
    assert adaptive_timeout([float("nan"), 4.0]) == pytest.approx(12.0)


def test_replacement_prefers_the_plan_then_the_cheapest() -> None:
    cands = ["a", "b", "c"]
    assert choose_replacement(cands, {"a"}, {"a": 9.0, "b": 1.0, "c": 2.0}) == "c"
    assert choose_replacement(cands, set(), {"a": 2.0, "b": 1.0}, load={"a": 3}) == "b"
    cost = {"a": 3.0, "b": 1.0, "c": 2.0}.__getitem__
    assert choose_replacement(cands, {"b"}, None, cost) == "c"
    assert choose_replacement(cands, set(), {"zzz": 1.0}, cost, load={"b": 5}) == "c"
    assert choose_replacement(cands, {"a", "b", "c"}) is None


def test_dispatch_by_share_and_queue_is_proportional() -> None:
    shares, load = {"a": 3.0, "b": 1.0}, {"a": 0, "b": 0}
    for _ in range(8):
        load[choose_replacement(["a", "b"], set(), shares, load=load)] += 1
    assert load == {"a": 6, "b": 2}


def test_find_break_and_stage_wait() -> None:
    alive = {"x", "z"}.__contains__
    assert find_break(["x", "y", "z"], alive) == 1
    assert find_break(["x", "z"], alive) is None
    assert find_break([], alive) is None
    assert stage_must_wait([]) and not stage_must_wait(["p"])
