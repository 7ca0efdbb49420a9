"""Who is in the swarm: the initial peers, the holders, and the stream of joins and crashes.

Everything random here comes from streams seeded by the scenario seed and consumed in an order that
does not depend on the router, so every router faces the same peers, the same crash times and the
same join times (only where a joiner goes depends on the router's view of the flow).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from swarm.sim.hardware import ModelSpec, gpu
from swarm.sim.scenario import Scenario


@dataclass(frozen=True)
class Machine:
    """A volunteer before it picks a stage: its GPU, region, arrival and death times."""

    id: str
    gpu: str
    region: str
    arrives_s: float
    dies_s: float  # math.inf: never crashes
    stage: int | None = None  # fixed by an explicit peer list


def eligible_stages(model: ModelSpec, layers: list[int], gpu_name: str) -> list[int]:
    """Stages whose blocks, optimizer state and one microbatch's stash fit in the GPU's memory."""
    g = gpu(gpu_name)
    return [s for s, n in enumerate(layers) if model.stage_slots(n, g) >= 1]


def least_capacity_stage(capacity: list[float], eligible: list[int]) -> int:
    """The stage a peer joins when no routing is known yet: the one with the least capacity
    (SWARM's rebalancing rule, and GWTF's bottleneck rule when every peer carries its capacity)."""
    return min(eligible, key=lambda s: (capacity[s], s))


class Churn:
    """Initial machines and a lazily generated, router-independent stream of joining machines."""

    def __init__(self, scenario: Scenario) -> None:
        self.scenario = scenario
        self._pick = random.Random(f"{scenario.seed}/machines")
        self._life = random.Random(f"{scenario.seed}/lifetimes")
        self._join = random.Random(f"{scenario.seed}/joins")
        names = [g for g, _ in scenario.gpu_mix]
        self._gpus, self._weights = names, [w for _, w in scenario.gpu_mix]
        self._joined = 0
        self._next_join_s = self._gap(0.0)

    def _lifetime(self) -> float:
        rate = self.scenario.failure_rate_h
        return self._life.expovariate(rate / 3600.0) if rate > 0 else math.inf

    def _gap(self, now: float) -> float:
        rate = self.scenario.join_rate_h * self.scenario.peer_count / 3600.0
        return now + self._join.expovariate(rate) if rate > 0 else math.inf

    def initial(self) -> list[Machine]:
        """The swarm at t=0: explicit peers as listed, or `count` machines spread round-robin over
        the regions with GPUs drawn from the mix."""
        sc = self.scenario
        if sc.explicit_peers:
            return [
                Machine(f"p{i:04d}", e.gpu, e.region, 0.0, self._lifetime(), e.stage)
                for i, e in enumerate(sc.explicit_peers)
            ]
        out = []
        for i in range(sc.peer_count):
            name = self._pick.choices(self._gpus, self._weights)[0]
            out.append(Machine(f"p{i:04d}", name, sc.regions[i % len(sc.regions)], 0.0, self._lifetime()))
        return out

    def next_join_s(self) -> float:
        return self._next_join_s

    def pop_join(self) -> Machine:
        """The machine arriving at `next_join_s()`; schedules the one after it."""
        at = self._next_join_s
        name = self._join.choices(self._gpus, self._weights)[0]
        region = self._join.choice(self.scenario.regions)
        machine = Machine(f"j{self._joined:04d}", name, region, at, at + self._lifetime())
        self._joined += 1
        self._next_join_s = self._gap(at)
        return machine
