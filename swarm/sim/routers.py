"""The three routers the simulator compares, as thin adapters over swarm/flow (no routing here).

- `gwtf`: swarm/flow's push-relabel `MessageBus`, one state machine per node, advanced in simulated
  time with `run_until`; messages take the one-way latency of the link they cross. After a crash or a
  join the bus is told, and the routes change only as fast as its messages converge again.
- `swarm`: one `SwarmRouter` per sending node (SWARM's stochastic wiring): no plan, no link costs.
- `oracle`: `min_max_path_flow` re-solved on the live swarm after every crash and join, with zero
  protocol delay: the upper bound.

Route-based routers turn per-holder rates into next hops with `choose_replacement`, the live peer's
rule: among planned live hops, the most share per queued microbatch (so dispatch follows the rates,
weighted by the queue each hop has); without a usable plan, the cheapest live hop.
"""

from __future__ import annotations

import random
import zlib
from typing import TYPE_CHECKING

from swarm.flow.bottleneck import bottleneck_stage
from swarm.flow.cost import HolderRoutes
from swarm.flow.instance import InstanceError, PeerSpec
from swarm.recovery.policy import choose_replacement
from swarm.sim.population import least_capacity_stage

if TYPE_CHECKING:
    from swarm.sim.simulator import Simulation

ROUTERS = ("gwtf", "swarm", "oracle")
NO_DEAD: frozenset[str] = frozenset()


class _Planned:
    """Common part of the route-based routers: dispatch by the plan, joins to the bottleneck."""

    name = "planned"

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.sim: Simulation | None = None
        self._routes: HolderRoutes = {}

    def start(self, sim: Simulation) -> None:
        self.sim = sim

    def current_routes(self, now: float) -> HolderRoutes:
        return self._routes

    def next_hop(self, holder: str, node: str, stage: int, candidates: list[str], now: float) -> str:
        sim = self.sim
        assert sim is not None
        shares = self.current_routes(now).get(holder, {}).get(node)
        inst = sim.instance()
        cost = (lambda c: inst.edge_cost(node, c)) if inst is not None else None
        choice = choose_replacement(candidates, NO_DEAD, shares, cost, sim.load)
        assert choice is not None  # candidates are live and non-empty
        return choice

    def on_sent(self, node: str, hop: str, now: float) -> None:
        pass

    def on_done(self, node: str, hop: str, seconds: float, now: float) -> None:
        pass

    def on_timeout(self, node: str, peer: str, now: float) -> None:
        pass  # the simulator stops offering the peer to this sender; the plan changes on expiry

    def on_demand(self, demands: dict[str, float], now: float) -> None:
        pass

    def join_stage(self, eligible: list[int], now: float) -> int:
        """GWTF's join rule: the bottleneck stage of the current flow, if this GPU can hold it."""
        sim = self.sim
        assert sim is not None
        capacity = sim.stage_capacity()
        empty = [s for s in eligible if capacity[s] == 0]
        if empty:
            return empty[0]
        inst = sim.instance()
        if inst is not None:
            stage = bottleneck_stage(inst, self.current_routes(now))
            if stage in eligible:
                return stage
        return least_capacity_stage(capacity, eligible)

    def routes(self, now: float) -> HolderRoutes:
        return self.current_routes(now)

    def messages(self) -> int:
        return 0


class OracleRouter(_Planned):
    """Centralized re-solve of GWTF's objective (swarm/flow's exact MILP) after every event, with
    zero protocol delay. Each solve is capped at TIME_LIMIT_S; when the cap stops the solver before
    it proves optimality the best solution found is used and counted in `inexact_solves`."""

    name = "oracle"
    TIME_LIMIT_S = 5.0

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.solves = 0
        self.inexact_solves = 0

    def _solve(self) -> None:
        from swarm.flow.reference import min_max_path_solution

        assert self.sim is not None
        inst = self.sim.instance()
        if inst is None:
            self._routes = {}
            return
        self.solves += 1
        try:
            solution = min_max_path_solution(inst, time_limit=self.TIME_LIMIT_S)
        except RuntimeError:  # no incumbent within the cap: the exact min-cost max-flow LP instead
            from swarm.flow.reference import min_cost_max_flow

            self.inexact_solves += 1
            self._routes = min_cost_max_flow(inst)
            return
        self.inexact_solves += 0 if solution.exact else 1
        self._routes = solution.routes

    def start(self, sim: Simulation) -> None:
        super().start(sim)
        self._solve()

    def on_crash(self, peer: str, now: float) -> None:
        self._solve()

    def on_join(self, peer: PeerSpec, now: float) -> None:
        self._solve()

    def on_demand(self, demands: dict[str, float], now: float) -> None:
        self._solve()


SETUP_REPORT_S = 1.0  # protocol seconds between progress reports of the first convergence


class GwtfRouter(_Planned):
    """The push-relabel protocol on a message bus in simulated time.

    The bus converges once before t=0 (the swarm forms before training starts); its clock is then
    offset so that bus time = simulated time + offset. Between churn events a quiescent bus has
    nothing to say, so the converged table is reused as it is; after an event the bus is advanced
    in batches of REFRESH_S simulated seconds (peers re-read their tables that often) until it is
    quiescent again. Every route still comes from the protocol's own state machines.
    """

    name = "gwtf"
    REFRESH_S = 0.25  # how often a peer re-reads its routing table (simulated seconds)
    SETUP_LIMIT_S = 600.0

    def start(self, sim: Simulation) -> None:
        from swarm.flow.bus import MessageBus

        super().start(sim)
        inst = sim.instance()
        if inst is None:
            raise InstanceError("the initial swarm has a stage with no peer")
        self.bus = MessageBus(inst, seed=self.seed, delay=self._delay)
        # retransmit only after a round trip on the slowest link could have come back
        regions = {n.region for n in sim.nodes.values()} | set(sim.sc.regions)
        worst = max(sim.link(a, b).latency_s for a in regions for b in regions)
        self.bus.retry_s = max(self.bus.retry_s, 4.0 * worst)
        report, bus = sim.progress, self.bus
        if report is None:
            bus.run_until_quiescent(max_time=self.SETUP_LIMIT_S)
        else:  # the first convergence of a big swarm is most of the run's wall time

            def watch() -> None:  # (phase, protocol seconds since the swarm formed, ...)
                report("routing setup", bus.now, sim.res, bus.stats.messages)

            bus.run_until_quiescent(max_time=self.SETUP_LIMIT_S, watch=watch, every=SETUP_REPORT_S)
        self.offset = self.bus.now
        self._pending: list[str] = []
        self._routes = self.bus.routes()
        self._fresh_at = 0.0
        self._settled = self.bus.quiescent()

    def _delay(self, src: str, dst: str, rng: random.Random) -> float:
        """A protocol message takes the one-way latency of the link between the two nodes."""
        sim = self.sim
        assert sim is not None
        a, b = sim.nodes.get(src), sim.nodes.get(dst)
        if a is None or b is None:
            return 0.001
        return sim.link(a.region, b.region).latency_s

    def _advance(self, now: float) -> None:
        target = now + self.offset
        if target > self.bus.now:
            self.bus.run_until(target)

    def current_routes(self, now: float) -> HolderRoutes:
        if not self._settled and now >= self._fresh_at:
            self._advance(now)
            self._routes = self.bus.routes()
            self._fresh_at = now + self.REFRESH_S
            self._settled = self.bus.quiescent()
        return self._routes

    def on_crash(self, peer: str, now: float) -> None:
        self._advance(now)
        try:
            self.bus.remove_peer(peer)
        except InstanceError:
            # the last peer of its stage: the bus cannot hold an empty stage, so the dead peer stays
            # until a joiner arrives there; no microbatch is sent to it (only live peers are
            # candidates) and the stage waits for the join anyway
            self._pending.append(peer)
        self._fresh_at, self._settled = now, False  # re-read the table at the next hop

    def on_join(self, peer: PeerSpec, now: float) -> None:
        self._advance(now)
        self.bus.add_peer(peer)
        pending, self._pending = self._pending, []
        for dead in pending:
            self.on_crash(dead, now)
        self._fresh_at, self._settled = now, False

    def on_demand(self, demands: dict[str, float], now: float) -> None:
        """Holders told their agents a new demand: the protocol re-plans from there."""
        self._advance(now)
        for holder, demand in demands.items():
            self.bus.set_demand(holder, demand)
        self._fresh_at, self._settled = now, False

    def messages(self) -> int:
        return int(self.bus.stats.messages)


class SwarmBaseline:
    """SWARM's stochastic wiring: every sender keeps its own `SwarmRouter`; joins go to the stage
    with the least total throughput (SWARM's rebalancing)."""

    name = "swarm"

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.sim: Simulation | None = None
        self._routers: dict[str, object] = {}

    def start(self, sim: Simulation) -> None:
        self.sim = sim

    def _router(self, node: str):
        from swarm.flow.baseline import SwarmRouter

        found = self._routers.get(node)
        if found is None:
            found = self._routers[node] = SwarmRouter(self.seed * 1_000_003 + zlib.crc32(node.encode()))
        return found

    def next_hop(self, holder: str, node: str, stage: int, candidates: list[str], now: float) -> str:
        return self._router(node).choose(candidates, now)

    def on_sent(self, node: str, hop: str, now: float) -> None:
        self._router(node).on_send(hop, now)

    def on_done(self, node: str, hop: str, seconds: float, now: float) -> None:
        """SWARM's estimate is a peer's own processing time per microbatch (the throughput a SWARM
        server measures and publishes), not the sender's round trip: link costs play no part in
        its choice, which is what sets it apart from GWTF's edge costs."""
        assert self.sim is not None
        self._router(node).on_done(hop, self.sim.nodes[hop].compute_s, now)

    def on_crash(self, peer: str, now: float) -> None:
        """The peer's record expired: every sender drops its estimates of it."""
        self._routers.pop(peer, None)
        for router in self._routers.values():
            router.forget(peer)

    def on_timeout(self, node: str, peer: str, now: float) -> None:
        """`node` timed out on `peer`: only its own estimates go (SWARM learns from its requests)."""
        self._router(node).forget(peer)

    def on_join(self, peer: PeerSpec, now: float) -> None:
        pass

    def on_demand(self, demands: dict[str, float], now: float) -> None:
        pass  # SWARM has no plan: a holder's demand changes nothing

    def join_stage(self, eligible: list[int], now: float) -> int:
        assert self.sim is not None
        return least_capacity_stage(self.sim.stage_capacity(), eligible)

    def routes(self, now: float) -> HolderRoutes | None:
        return None

    def messages(self) -> int:
        return 0


def make_router(name: str, seed: int):
    """A fresh router by name (gwtf, swarm or oracle)."""
    if name == "gwtf":
        return GwtfRouter(seed)
    if name == "swarm":
        return SwarmBaseline(seed)
    if name == "oracle":
        return OracleRouter(seed)
    raise ValueError(f"unknown router {name!r} (known: {', '.join(ROUTERS)})")
