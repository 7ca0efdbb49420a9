"""The three routers on the simulator: they agree where routing cannot matter, nobody loses a
microbatch, and the oracle is not beaten beyond noise."""

from __future__ import annotations

import pytest
from conftest import small

from swarm.sim import compare, simulate

ROUTERS = ["gwtf", "oracle", "swarm"]


def homogeneous():
    return small(
        name="homog",
        peers={"count": 12, "regions": ["Iowa"], "gpus": "A100-80GB"},
        holders={"regions": ["Iowa", "Iowa"]},
        stages=3,
        training={"iterations": 4, "global_batch": 24},
    )


def test_homogeneous_no_churn_planned_routers_agree() -> None:
    results = compare(homogeneous(), ["gwtf", "oracle"])
    times = {name: r.training_time_s for name, r in results.items()}
    best, worst = min(times.values()), max(times.values())
    assert worst <= 1.25 * best, times
    oracle = results["oracle"].throughput_microbatches_s
    for name, r in results.items():
        assert r.completed == r.injected == 4 * 24
        assert r.throughput_microbatches_s <= 1.25 * oracle, (name, times)


def test_homogeneous_no_churn_oracle_is_not_beaten_by_swarm() -> None:
    """With the live peers' capacities (measured throughput) the plan spreads like SWARM does."""
    results = compare(homogeneous(), ["oracle", "swarm"])
    assert results["swarm"].throughput_microbatches_s <= 1.1 * results["oracle"].throughput_microbatches_s


@pytest.mark.parametrize("router", ROUTERS)
def test_conservation_under_churn_for_every_router(router, churny) -> None:
    res = simulate(churny, router)
    assert res.crashes > 0 and res.joins > 0
    assert res.injected == res.completed == churny.iterations * churny.global_batch
    assert res.in_flight_at_end == 0


def test_router_runs_are_deterministic(churny) -> None:
    a, b = simulate(churny, "gwtf"), simulate(churny, "gwtf")
    assert a.summary() == b.summary() and a.completion_times == b.completion_times


def test_gwtf_uses_the_protocol_bus() -> None:
    res = simulate(homogeneous(), "gwtf")
    assert res.protocol_messages > 0


@pytest.mark.parametrize("router", ["gwtf", "oracle"])
def test_planned_routes_respect_link_limits(router) -> None:
    """Geo links carry a few microbatches/s: the plan spreads over them instead of piling up."""
    from swarm.flow.cost import aggregate
    from swarm.sim.routers import make_router
    from swarm.sim.simulator import Simulation

    sc = small()
    assert sc.link_capacity  # the default: the routing knows what links carry
    sim = Simulation(sc, make_router(router, sc.seed))
    sim.router.start(sim)
    inst = sim.instance()
    assert inst is not None and inst.link_capacity
    table = aggregate(sim.router.routes(0.0))
    assert table
    for a, hops in table.items():
        for b, rate in hops.items():
            assert rate <= inst.edge_capacity(a, b) + 1e-6
    unlimited = Simulation(sc.with_(link_capacity=False), make_router(router, sc.seed))
    assert not unlimited.instance().link_capacity


def test_progress_reports_the_setup_then_the_run_without_changing_it(churny, monkeypatch) -> None:
    """A long run says how far it is (the CLI prints it); reporting changes nothing in the run."""
    import swarm.sim.simulator as simulator

    monkeypatch.setattr(simulator, "PROGRESS_EVERY", 50)  # this run has a few thousand events
    seen: list[tuple[str, float, int, int]] = []

    def report(phase, t, res, messages) -> None:
        seen.append((phase, t, res.completed, messages))

    res = simulate(churny, "gwtf", progress=report)
    assert res.summary() == simulate(churny, "gwtf").summary()
    phases = [p for p, *_ in seen]
    assert phases[0] == "routing setup" and phases[-1] == "done" and "training" in phases
    training = [(t, done, msgs) for p, t, done, msgs in seen if p != "routing setup"]
    assert all(a <= b for a, b in zip(training, training[1:]))  # time, work and messages only grow
    assert seen[-1][1:] == (res.training_time_s, res.completed, res.protocol_messages)
