"""Make-room chains across holders (`chain_bound`): the move the several-holder misses need, offline."""

from __future__ import annotations

import dataclasses

import pytest

from swarm.flow import cost
from swarm.flow.bus import MessageBus
from swarm.flow.chain_bound import chain_bound
from swarm.flow.generate import random_instance
from swarm.flow.instance import Link

from .conftest import assert_keeps_flows_and_room, explicit


def _crosswise():
    """g0's flow runs through dear x because cheap y is full of g1's flow; g1 could take m instead,
    which is dear for g0. No hand-over of one holder pays; the chain (g1: y -> m, then g0: x -> y)
    does."""
    slow, fast = Link(0.5, 1e8), Link(0.01, 1e8)
    overrides = {("g0", "x"): slow, ("g0", "m"): slow, ("g1", "m"): Link(0.05, 1e8)}
    inst = explicit(
        2,
        [("x", 0, 1.0, 0.01), ("y", 0, 1.0, 0.01), ("m", 0, 1.0, 0.01), ("z", 1, 4.0, 0.01)],
        [("g0", 1.0), ("g1", 1.0)],
        latency_s=0.01,
        overrides={**overrides, ("g1", "x"): slow, ("g0", "y"): fast, ("g1", "y"): fast},
    )
    routes = {
        "g0": {"g0": {"x": 1.0}, "x": {"z": 1.0}, "z": {"g0": 1.0}},
        "g1": {"g1": {"y": 1.0}, "y": {"z": 1.0}, "z": {"g1": 1.0}},
    }
    return inst, routes


def test_a_chain_makes_room_where_no_hand_over_of_one_holder_can() -> None:
    inst, routes = _crosswise()
    before = cost.max_path_cost(inst, routes)
    handed, steps = chain_bound(inst, routes, chains=False)
    assert steps == {"hand_overs": 0, "chains": 0}
    assert cost.max_path_cost(inst, handed) == pytest.approx(before)
    chained, steps = chain_bound(inst, routes)
    assert steps == {"hand_overs": 0, "chains": 1}
    assert chained["g0"]["g0"] == {"y": pytest.approx(1.0)}
    assert chained["g1"]["g1"] == {"m": pytest.approx(1.0)}
    assert cost.max_path_cost(inst, chained) < before - 0.4  # g0's dear 0.5 s link is gone
    assert routes["g0"]["g0"] == {"x": 1.0}  # (the input is not touched)


def test_the_bound_from_the_protocol_routes_keeps_flows_and_capacities() -> None:
    inst = random_instance(24, 4, 3, 5)
    bus = MessageBus(inst, seed=5)
    assert bus.run_until_quiescent().quiescent
    routes = bus.routes()
    for chains in (False, True):
        tables, steps = chain_bound(inst, routes, chains=chains)
        assert min(steps.values()) >= 0 and (chains or steps["chains"] == 0)
        assert cost.max_path_cost(inst, tables) <= cost.max_path_cost(inst, routes) + 1e-9
        assert_keeps_flows_and_room(inst, routes, tables)


def test_links_with_limits_are_refused() -> None:
    inst, routes = _crosswise()
    with pytest.raises(ValueError, match="without link limits"):
        chain_bound(dataclasses.replace(inst, link_capacity=True), routes)
