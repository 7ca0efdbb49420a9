"""Straggler down-weighting (pure): slow hops keep a trickle of new work, normal hops keep theirs."""

from __future__ import annotations

from swarm.routing.dispatch import pick_next
from swarm.routing.stragglers import MIN_WEIGHT, down_weight, observe, straggler_factors
from swarm.routing.table import NextHops


def test_a_hop_far_slower_than_its_mates_is_down_weighted() -> None:
    factors = straggler_factors({"a": 0.010, "b": 0.012, "c": 0.200})
    assert factors["a"] == factors["b"] == 1.0
    assert MIN_WEIGHT <= factors["c"] < 0.01 + MIN_WEIGHT


def test_mild_differences_are_not_stragglers() -> None:
    assert set(straggler_factors({"a": 0.010, "b": 0.020, "c": 0.015}).values()) == {1.0}


def test_one_hop_alone_is_never_a_straggler() -> None:
    assert straggler_factors({"a": 5.0}) == {"a": 1.0}


def test_unobserved_hops_keep_their_rate() -> None:
    rates = down_weight({"a": 2.0, "b": 2.0, "c": 1.0}, {"a": 0.01, "b": 0.5})
    assert rates["c"] == 1.0 and rates["a"] == 2.0  # two observations: the median is their mean


def test_straggler_gets_a_small_share_of_dispatched_microbatches() -> None:
    hops = NextHops()
    hops.set_stage_peers(1, {"fast1": 5.0, "fast2": 5.0, "slow": 5.0})
    for _ in range(5):
        hops.observe("fast1", 0.002, {"service_s": 0.01})
        hops.observe("fast2", 0.002, {"service_s": 0.01})
        hops.observe("slow", 0.002, {"service_s": 0.2})
    chosen = [hops.choose("h", 1) for _ in range(300)]
    assert chosen.count("slow") <= 6  # weight ~1% of its mates', never zero
    assert chosen.count("slow") >= 1 and abs(chosen.count("fast1") - chosen.count("fast2")) <= 1


def test_a_recovered_peer_earns_its_share_back() -> None:
    t = observe(None, 1.0)
    for _ in range(20):
        t = observe(t, 0.01)
    assert straggler_factors({"a": 0.01, "b": 0.01, "c": t})["c"] == 1.0


def test_bogus_service_times_in_replies_are_ignored() -> None:
    hops = NextHops()
    hops.observe("a", 0.01, {"service_s": "lots"})
    hops.observe("b", 0.01, {"service_s": -3})
    assert hops.hop_time == {"a": 0.01, "b": 0.01}
    assert pick_next({"a": 1.0}, {}) == "a"
