"""Discrete-event simulator of a training swarm: the same routing (swarm/flow) and fault rules
(swarm/recovery) as the live peers, at a scale one machine cannot host. Pure: no clocks, no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from swarm.sim.metrics import SimResult, ratios
from swarm.sim.routers import ROUTERS, make_router
from swarm.sim.scenario import Scenario, ScenarioError, builtin_names, resolve_scenario
from swarm.sim.simulator import Progress, Simulation


def simulate(
    scenario: Scenario, router: str, seed: int | None = None, progress: Progress | None = None
) -> SimResult:
    """Run one router on one scenario; `seed` overrides the scenario's. `progress` hears how far
    the run is (see `Progress`)."""
    if seed is not None:
        scenario = scenario.with_(seed=seed)
    return Simulation(scenario, make_router(router, scenario.seed), progress).run()


def compare(
    scenario: Scenario,
    routers: Iterable[str] = ROUTERS,
    seed: int | None = None,
    progress: Callable[[str], Progress] | None = None,
) -> dict[str, SimResult]:
    """Run several routers on the same scenario (same peers, same crash and join times);
    `progress(router)` gives each run its progress callback."""
    return {name: simulate(scenario, name, seed, progress(name) if progress else None) for name in routers}


__all__ = [
    "ROUTERS",
    "Progress",
    "Scenario",
    "ScenarioError",
    "SimResult",
    "Simulation",
    "builtin_names",
    "compare",
    "ratios",
    "resolve_scenario",
    "simulate",
]
