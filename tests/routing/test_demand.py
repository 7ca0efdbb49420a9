"""What a data holder asks the routing for: the pure rule, and the simulator running it."""

from __future__ import annotations

import pytest

from swarm.routing.demand import ALL, HEADROOM, next_demand
from swarm.sim import Simulation, simulate
from swarm.sim.routers import make_router
from tests.sim.conftest import small


def test_all_never_changes_and_adaptive_follows_the_measured_rate() -> None:
    assert next_demand("all", ALL, 32, 10.0) is None
    assert next_demand("adaptive", ALL, 32, 10.0) == pytest.approx(HEADROOM * 3.2)
    assert next_demand("adaptive", 6.4, 34, 10.0) is None  # within the hysteresis: keep the plan
    assert next_demand("adaptive", 6.4, 64, 10.0) == pytest.approx(12.8)
    assert next_demand("adaptive", 5.0, 10**9, 1.0) == ALL  # never more than "everything"
    assert next_demand("adaptive", 5.0, 0, 10.0) is None  # an empty iteration says nothing
    with pytest.raises(ValueError, match="must be one of all, adaptive"):
        next_demand("greedy", 1.0, 1, 1.0)


def test_adaptive_holders_lower_their_demand_and_lose_nothing() -> None:
    sc = small(holder_demand="adaptive", churn={"failure_rate_per_hour": 2.0, "join_rate_per_hour": 2.0})
    for router in ("gwtf", "oracle"):
        sim = Simulation(sc, make_router(router, sc.seed))
        res = sim.run()
        assert res.iterations == sc.iterations
        assert res.completed == res.injected  # every microbatch finished under the changing plan
        assert all(d < ALL for d in sim.demand.values())  # holders asked for what they measured
    base = simulate(small(), "gwtf")
    assert base.completed == base.injected
