"""Being present in the swarm: the peer record refreshed under a TTL, and the view of other peers.

Every few seconds a peer re-publishes its record (so it expires ~30 s after a crash) and re-reads
the stages it sends to, feeding their capacities to its routing table.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time

from swarm import PROTOCOL_VERSION, __version__
from swarm.node import SwarmNode
from swarm.registry import EventRecord, FlowRecord, PeerRecord
from swarm.routing.live import LiveFlow
from swarm.routing.table import NextHops

log = logging.getLogger(__name__)
RECORD_TTL_S = 30.0
REFRESH_S = 10.0
VIEW_S = 2.0


def make_record(
    node: SwarmNode, *, role: str, stage: int, blocks: tuple[int, int], throughput: float,
    free_memory: int, region: str, name: str = "", state: str = "serving",
) -> PeerRecord:  # fmt: skip
    return PeerRecord(
        peer_id=node.peer_id, role=role, stage=stage, blocks=tuple(blocks), throughput=float(throughput),
        capacity=float(throughput), free_memory=int(free_memory), region=region, version=__version__,
        protocol_version=PROTOCOL_VERSION, addresses=tuple(node.advertised()), joined_at=node.started_at,
        state=state, iteration=0, name=name,
    )  # fmt: skip


class Presence:
    """Publishes this peer's record and keeps `hops` current for the stages it sends to."""

    def __init__(self, node: SwarmNode, record: PeerRecord, hops: NextHops, stages: int,
                 iteration_of=lambda: 0, flow: LiveFlow | None = None):  # fmt: skip
        self.node, self.record, self.hops = node, record, hops
        self.stages = stages
        self.flow = flow
        self._refresh_soon: asyncio.TimerHandle | None = None
        if flow is not None:
            flow.on_change = self.apply_routes
            flow.on_unknown = self.refresh_soon
        self.iteration_of = iteration_of
        self._tasks: list[asyncio.Task] = []

    def update(self, **changes) -> None:
        self.record = dataclasses.replace(self.record, **changes)

    async def publish(self) -> None:
        self.update(iteration=int(self.iteration_of()))
        await self.node.blocking(self.node.registry.publish_peer, self.record, RECORD_TTL_S)
        if self.flow is not None and self.flow.agent is not None:
            await self.node.blocking(self.node.registry.publish_flow, self.flow_record(), RECORD_TTL_S)

    def flow_record(self) -> FlowRecord:
        """The routing agent's published state and routes (for `swarm status` and the dashboard)."""
        state = self.flow.agent.state()

        def finite(values) -> dict:
            return {k: max(-1e12, min(1e12, float(v))) for k, v in values.items()}

        return FlowRecord(
            peer_id=self.node.peer_id, version=int(state.version), spare=finite({"s": state.spare})["s"],
            labels={k: int(v) for k, v in state.labels.items()}, cheapest=finite(state.cheapest),
            worst=finite(state.worst), routes={h: finite(t) for h, t in self.flow.routes().items()},
        )  # fmt: skip

    async def event(
        self, kind: str, detail: str = "", peer: str | None = None, stage: int | None = None
    ) -> None:
        """Add to the run's churn timeline (joins, leaves, crashes seen, reroutes)."""
        record = EventRecord(kind=kind, peer_id=peer or self.node.peer_id,
                             stage=self.record.stage if stage is None else stage, at=time.time(),
                             detail=detail[:200], reporter=self.node.peer_id)  # fmt: skip
        try:
            await self.node.blocking(self.node.registry.publish_event, record)
        except Exception as exc:  # noqa: BLE001 - the timeline is informative only
            log.warning("event not published: %s", exc)

    @property
    def next_stage(self) -> int:
        """Where this peer sends activations: stage 0 for a holder, S (the holders) after the last."""
        return 0 if self.record.stage == -1 else self.record.stage + 1

    async def refresh_view(self) -> None:
        """Re-read the stages around us: next-hop candidates and the routing agent's neighbours."""
        peers = await self.node.blocking(self.node.registry.get_all_peers, self.stages)
        serving = {s: [r for r in peers.get(s, []) if r.serves] for s in range(-1, self.stages)}
        for records in serving.values():
            for r in records:
                self.node.learn_addresses(r.peer_id, r.addresses)
        if self.next_stage < self.stages:
            self.hops.set_stage_peers(
                self.next_stage, {r.peer_id: r.capacity for r in serving[self.next_stage]}
            )
        if self.flow is None:
            return
        me, stage = self.node.peer_id, self.record.stage
        holders = sorted({r.peer_id for r in serving[-1]} | ({me} if stage == -1 else set()))
        around = {-1: [0, self.stages - 1]}.get(stage, [stage - 1, stage + 1])
        neighbours = {}
        for s in around:
            s = -1 if s in (-1, self.stages) else s
            neighbours.update({r.peer_id: s for r in serving[s] if r.peer_id != me})
        compute = {r.peer_id: 1.0 / max(r.throughput, 1e-6) for recs in serving.values() for r in recs}
        mates = {r.peer_id for r in serving[stage] if r.peer_id != me} if stage >= 0 else set()
        regions = {r.peer_id: r.region for recs in serving.values() for r in recs}
        self.flow.update(holders, neighbours, compute, mates, regions)

    def refresh_soon(self) -> None:
        """A message came from a peer we do not know yet: look at the DHT again shortly."""
        if self._refresh_soon is None:
            loop = asyncio.get_running_loop()
            self._refresh_soon = loop.call_later(0.3, lambda: asyncio.ensure_future(self._refresh_now()))

    async def _refresh_now(self) -> None:
        try:
            await self.refresh_view()
        except Exception as exc:  # noqa: BLE001 - the periodic refresh retries
            log.warning("refresh failed: %s", exc)
        finally:
            self._refresh_soon = None

    def apply_routes(self) -> None:
        """The routing agent's out-flows become this peer's next-hop rates."""
        if self.next_stage >= self.stages:
            return  # after the last stage the next hop is always the microbatch's own holder
        for holder, table in self.flow.routes().items():
            self.hops.set_flow(holder, self.next_stage, table)

    async def start(self) -> None:
        await self.event("join", f"{self.record.role} {self.record.name}".strip())
        await self.publish()
        await self.refresh_view()
        self._tasks = [asyncio.create_task(self._loop(self.publish, REFRESH_S)),
                       asyncio.create_task(self._loop(self.refresh_view, VIEW_S))]  # fmt: skip

    async def _loop(self, fn, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            try:
                await fn()
            except Exception as exc:  # noqa: BLE001 - a missed refresh is retried next period
                log.warning("%s failed: %s", fn.__name__, exc)

    async def withdraw(self, reason: str = "clean exit") -> None:
        for task in self._tasks:
            task.cancel()
        await self.event("leave", reason)
        try:
            await self.node.blocking(self.node.registry.withdraw_peer, self.node.peer_id, self.record.stage)
        except Exception as exc:  # noqa: BLE001 - the TTL removes it anyway
            log.warning("withdraw failed: %s", exc)


def free_memory(device: str) -> int:
    """Bytes free where this peer keeps its stage: the GPU's memory, or the host's available RAM."""
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return 0


def measure_throughput(module, shape: list[int], device: str, repeats: int = 2) -> float:
    """Microbatches/s of forward+backward through `module` on a random input (a short benchmark)."""
    import torch

    x = torch.randn(*shape, device=device)
    best = float("inf")
    for _ in range(repeats + 1):
        start = time.perf_counter()
        inp = x.clone().requires_grad_(True)
        module(inp).sum().backward()
        best = min(best, time.perf_counter() - start)
    module.zero_grad(set_to_none=True)
    return 1.0 / max(best, 1e-6)
