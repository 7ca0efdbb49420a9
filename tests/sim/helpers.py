"""Test-only router: least-loaded live hop via the recovery policy (no plan). Exercises the engine
without swarm/flow's routers."""

from __future__ import annotations

from swarm.recovery.policy import choose_replacement
from swarm.sim.population import least_capacity_stage


class LeastLoaded:
    name = "least-loaded"

    def start(self, sim) -> None:
        self.sim = sim

    def next_hop(self, holder, node, stage, candidates, now):
        return choose_replacement(candidates, frozenset(), None, None, self.sim.load)

    def on_sent(self, node, hop, now): ...
    def on_done(self, node, hop, seconds, now): ...
    def on_crash(self, peer, now): ...
    def on_timeout(self, node, peer, now): ...
    def on_join(self, peer, now): ...

    def join_stage(self, eligible, now):
        return least_capacity_stage(self.sim.stage_capacity(), eligible)

    def routes(self, now):
        return None

    def messages(self):
        return 0
