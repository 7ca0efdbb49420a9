"""The exact-information exchange bound (swarm/flow/polish_bound.py): it keeps every throughput,
only ever lowers the max path, and makes the hand-checked trade of two crossed pipelines."""

from __future__ import annotations

from collections import defaultdict

import pytest

from swarm.flow import cost
from swarm.flow.bus import MessageBus
from swarm.flow.generate import random_instance
from swarm.flow.instance import HolderSpec, Instance, PeerSpec
from swarm.flow.polish_bound import polish_bound


def _throughputs(routes) -> dict[tuple[str, str], float]:
    into: dict[tuple[str, str], float] = defaultdict(float)
    for h, table in routes.items():
        for row in table.values():
            for b, rate in row.items():
                into[(h, b)] += rate
    return into


def test_crossed_pipelines_trade_their_slow_halves() -> None:
    """One region, so a path costs the sum of its peers' compute: a slow-slow and a fast-fast
    pipeline (max path ~2 s) become two mixed ones (~1 s), with and without the price."""
    peers = (
        PeerSpec("a", 0, 1.0, 1.0, "Iowa"),
        PeerSpec("c", 0, 1.0, 0.01, "Iowa"),
        PeerSpec("b", 1, 1.0, 1.0, "Iowa"),
        PeerSpec("d", 1, 1.0, 0.01, "Iowa"),
    )
    inst = Instance(2, 1024.0, (HolderSpec("h", 2.0, 0.0, "Iowa"),), peers)
    routes = {
        "h": {"h": {"a": 1.0, "c": 1.0}, "a": {"b": 1.0}, "c": {"d": 1.0}, "b": {"h": 1.0}, "d": {"h": 1.0}}
    }
    before = cost.max_path_cost(inst, routes)
    assert before == pytest.approx(2.0, abs=0.02)
    for price in (0.5, None):
        polished, steps = polish_bound(inst, routes, price)
        assert steps == 1
        assert polished["h"]["a"] == pytest.approx({"d": 1.0}) and polished["h"]["c"] == pytest.approx(
            {"b": 1.0}
        )
        assert cost.max_path_cost(inst, polished) == pytest.approx(1.01, abs=0.02)
    assert routes["h"]["a"] == {"b": 1.0}  # the input is left alone


@pytest.mark.parametrize("seed", [3, 11])
def test_polish_keeps_throughputs_and_never_raises_the_max_path(seed: int) -> None:
    inst = random_instance(5 * 6, 5, 1, seed)
    bus = MessageBus(inst, seed=seed)
    bus.run_until_quiescent()
    routes = bus.routes()
    for price in (0.5, None):
        polished, _ = polish_bound(inst, routes, price)
        assert cost.max_path_cost(inst, polished) <= cost.max_path_cost(inst, routes) + 1e-9
        assert cost.flow_value(polished) == pytest.approx(cost.flow_value(routes))
        after = _throughputs(polished)
        for key, rate in _throughputs(routes).items():
            assert after[key] == pytest.approx(rate, abs=1e-6)
