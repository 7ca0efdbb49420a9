"""The exact references: hand-checked values and agreement between solvers."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.flow import cost
from swarm.flow.baseline import SwarmRouter
from swarm.flow.bottleneck import bottleneck_stage
from swarm.flow.generate import random_instance
from swarm.flow.instance import Link
from swarm.flow.reference import max_flow_value, min_cost_max_flow, min_max_path_solution
from tests.flow.conftest import explicit


def test_diamond_by_hand(diamond) -> None:
    assert max_flow_value(diamond) == pytest.approx(4.0)
    routes = min_cost_max_flow(diamond)
    # a is cheaper than b (compute 0.1 vs 0.3): fill a (2), the rest (2) through b
    assert routes["h"]["h"] == {"a": pytest.approx(2.0), "b": pytest.approx(2.0)}
    assert bottleneck_stage(diamond, routes) == 1
    sol = min_max_path_solution(diamond)
    assert sol.exact
    # any maximum flow must use b, so the most expensive used path is h-b-c-h
    expected = diamond.edge_cost("h", "b") + diamond.edge_cost("b", "c") + diamond.edge_cost("c", "h")
    assert sol.max_path_cost == pytest.approx(expected)


def test_min_max_beats_min_cost_on_its_objective() -> None:
    """Min-cost splits flow over a cheap and an expensive branch; min-max avoids the worst path."""
    slow = Link(0.5, 1e8)
    inst = explicit(
        2,
        [("a", 0, 1.0, 0.0), ("b", 0, 1.0, 0.0), ("c", 1, 1.0, 0.0), ("d", 1, 1.0, 0.0)],
        [("h", 2.0)],
        overrides={("a", "d"): slow, ("b", "c"): Link(0.0, 1e8), ("h", "a"): Link(0.0, 1e8)},
    )
    sol = min_max_path_solution(inst)
    assert sol.exact
    mc = min_cost_max_flow(inst)
    assert cost.flow_value(sol.routes) == pytest.approx(2.0)
    assert sol.max_path_cost <= cost.max_path_cost(inst, mc) + 1e-9
    assert sol.max_path_cost == pytest.approx(sol.lower_bound)


@settings(max_examples=8, deadline=None)
@given(
    stages=st.integers(1, 4),
    per_stage=st.integers(1, 3),
    holders=st.integers(1, 3),
    seed=st.integers(0, 10_000),
)
def test_lp_agrees_with_networkx(stages: int, per_stage: int, holders: int, seed: int) -> None:
    inst = random_instance(stages * per_stage, stages, holders, seed)
    best = max_flow_value(inst)
    routes = min_cost_max_flow(inst)
    assert cost.flow_value(routes) == pytest.approx(best, rel=1e-6, abs=1e-6)
    sol = min_max_path_solution(inst, time_limit=20)
    assert cost.flow_value(sol.routes) == pytest.approx(best, rel=1e-6, abs=1e-6)
    assert sol.max_path_cost <= cost.max_path_cost(inst, routes) + 1e-6
    assert sol.lower_bound <= sol.max_path_cost + 1e-6


@pytest.mark.parametrize("seed", [3, 11])
def test_large_models_take_the_single_commodity_maximum(monkeypatch, seed: int) -> None:
    """Past LP_MAX_FLOW_VARIABLES (and without link limits) the min-cost LP starts from networkx's
    maximum instead of the max-flow LP: the same flow at the same total cost."""
    from swarm.flow import reference

    inst = random_instance(24, 4, 3, seed)
    small = min_cost_max_flow(inst)
    monkeypatch.setattr(reference, "LP_MAX_FLOW_VARIABLES", 0)
    large = min_cost_max_flow(inst)
    assert cost.flow_value(large) == pytest.approx(cost.flow_value(small), rel=1e-6)
    assert cost.flow_value(large) == pytest.approx(max_flow_value(inst), rel=1e-6)
    assert cost.total_cost(inst, large) == pytest.approx(cost.total_cost(inst, small), rel=1e-6)


def test_swarm_router_prefers_fast_peers() -> None:
    router = SwarmRouter(seed=0)
    for _ in range(5):
        router.on_send("slow")
        router.on_done("slow", 2.0)
        router.on_send("fast")
        router.on_done("fast", 0.5)
    assert router.choose(["slow", "fast"]) == "fast"
    router.on_send("fast")
    router.on_send("fast")
    router.on_send("fast")
    router.on_send("fast")
    assert router.choose(["slow", "fast"]) == "slow"  # 5 x 0.5 in flight > 1 x 2.0
    router.forget("fast")
    with pytest.raises(ValueError):
        router.choose([])
