"""The ring all-reduce option: exact step cost, and the region order a geo-aware ring would pick."""

from __future__ import annotations

import itertools

import pytest

from swarm.flow.instance import geo_matrix
from swarm.sim.allreduce import best_region_ring, ring_allreduce_s, step_times
from swarm.sim.scenario import GEO10
from swarm.sim.state import Node


def test_ring_cost_is_2_n_minus_1_steps_of_the_slowest_hop() -> None:
    link = geo_matrix().link
    nodes = [Node(f"p{i}", 0, r, "T4", 1.0, 0.5) for i, r in enumerate(["Iowa", "Iowa", "Germany"])]
    cross = link("Iowa", "Germany")
    expected = 2 * 2 * (1e9 / 3 / cross.bandwidth_bytes_s + cross.latency_s)
    assert ring_allreduce_s(nodes, 1e9, link) == pytest.approx(expected)
    for i, n in enumerate(nodes):
        n.carried, n.last_bwd = {i}, float(i)
    assert step_times("ring", nodes, 1e9, link, now=5.0) == pytest.approx(
        {n.id: 2.0 + expected for n in nodes}
    )
    assert ring_allreduce_s(nodes[:1], 1e9, link) == 0.0


def bottleneck(order: list[str]) -> float:
    link = geo_matrix().link
    return min(
        min(link(a, b).bandwidth_bytes_s, link(b, a).bandwidth_bytes_s)
        for a, b in zip(order, order[1:] + order[:1])
    )


def test_best_ring_is_the_exact_bottleneck_tour() -> None:
    regions = ["Belgium", "Iowa", "Japan", "LA", "Singapore", "London", "Oregon"]
    best = best_region_ring(regions, geo_matrix().link)
    assert sorted(best) == sorted(regions)
    brute = max(bottleneck([regions[0], *rest]) for rest in itertools.permutations(regions[1:]))
    assert bottleneck(best) == brute


def test_best_ring_beats_the_alphabetical_one_on_ten_regions() -> None:
    assert bottleneck(best_region_ring(GEO10, geo_matrix().link)) > bottleneck(sorted(GEO10))
