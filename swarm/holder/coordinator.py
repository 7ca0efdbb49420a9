"""The initiator's iteration loop: start the holders, wait for the microbatches, end the iteration.

Only control messages go through here (start, step, counts); activations and gradients stream peer
to peer. At the end of an iteration every stage's members average what they carried (weighted by
the microbatches the recorded paths say each replica carried) and step together.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from swarm.holder.holder import HOLDER_PART, DataHolder
from swarm.node import SwarmNode
from swarm.presence import VIEW_S

log = logging.getLogger(__name__)
PING_TIMEOUT_S = 5.0


@dataclass
class SwarmIteration:
    iteration: int
    loss: float
    tokens: int
    seconds: float
    microbatches: int
    peers: int
    per_stage: dict[int, dict[str, int]] = field(default_factory=dict)
    rerouted: int = 0
    reexecuted: int = 0
    gradients_lost: int = 0
    wasted_compute_s: float = 0.0
    slowest_stage_mb_s: float = 0.0
    bottleneck_stage: int = 0

    def to_json(self) -> dict:
        return {
            "iteration": self.iteration, "loss": self.loss, "tokens": self.tokens,
            "seconds": round(self.seconds, 4), "microbatches": self.microbatches, "peers": self.peers,
            "tokens_per_s": round(self.tokens / self.seconds, 2) if self.seconds > 0 else 0.0,
            "rerouted": self.rerouted, "reexecuted": self.reexecuted, "gradients_lost": self.gradients_lost,
            "wasted_compute_s": round(self.wasted_compute_s, 4),
            "slowest_stage_mb_s": round(self.slowest_stage_mb_s, 3),
            "bottleneck_stage": self.bottleneck_stage,
            "carried": {str(s): c for s, c in self.per_stage.items()},
        }  # fmt: skip


# Before the first iteration with `min_peers`: two DHT view refreshes and a few routing messages.
ROUTES_SETTLE_S = 2 * VIEW_S + 1.0


async def _no_crash_report(peer: str, stage: int) -> None:
    return None


class Coordinator:
    def __init__(self, node: SwarmNode, holder: DataHolder, manifest, status=lambda text: None,
                 min_holders: int = 1, min_peers: int = 0):  # fmt: skip
        self.node, self.holder, self.manifest = node, holder, manifest
        self.stages = len(manifest.layout)
        self.status = status
        self.capacity: dict[int, float] = {}  # stage -> measured microbatches/s of its serving peers
        self.speed: dict[str, float] = {}  # peer -> its measured microbatches/s (kept after it dies)
        self.reported_dead: set[str] = set()
        self.min_holders = min_holders
        self.min_peers = min_peers  # stage peers serving before the first iteration (0: one per stage)
        self.on_crash = _no_crash_report

    async def stage_members(self) -> dict[int, list[str]]:
        peers = await self.node.blocking(self.node.registry.get_all_peers, self.stages)
        serving = {s: [r for r in peers.get(s, []) if r.serves] for s in range(self.stages)}
        self.capacity = {s: sum(r.throughput for r in recs) for s, recs in serving.items()}
        self.speed.update({r.peer_id: r.throughput for recs in serving.values() for r in recs})
        return {s: sorted(r.peer_id for r in recs) for s, recs in serving.items()}

    async def holders(self) -> list[str]:
        records = await self.node.blocking(self.node.registry.get_stage_peers, HOLDER_PART)
        others = sorted(r.peer_id for r in records if r.serves and r.peer_id != self.node.peer_id)
        return [self.node.peer_id, *others]

    async def wait_for_stages(self, poll_s: float = 1.0) -> dict[int, list[str]]:
        """Block until every stage has a serving peer (and, before the first iteration, until the
        expected data holders and stage peers are there), saying what is missing."""
        while True:
            members = await self.stage_members()
            missing = [s for s, peers in members.items() if not peers]
            holders = len(await self.holders())
            serving = sum(len(peers) for peers in members.values())
            if not missing and holders >= self.min_holders and serving >= self.min_peers:
                if self.min_peers > 0:
                    # serving is not routed to yet: peers re-read the DHT every VIEW_S and then
                    # route to the newcomers, so the first iteration would run without them
                    self.status(f"{serving} volunteers serving: letting the routes take them in")
                    await asyncio.sleep(ROUTES_SETTLE_S)
                self.min_holders, self.min_peers = 1, 0  # later iterations go on with whoever is there
                return members
            if missing:
                self.status(f"waiting for a peer to serve stage(s) {missing}")
            elif holders < self.min_holders:
                self.status(f"waiting for data holders: {holders} of {self.min_holders} here")
            else:
                self.status(f"waiting for volunteers: {serving} of {self.min_peers} serving")
            await asyncio.sleep(poll_s)

    async def run_iteration(self, iteration: int) -> SwarmIteration:
        await self.wait_for_stages()
        start = time.perf_counter()  # waiting for peers is not training time
        self.status(f"iteration {iteration}: microbatches in flight")
        holders = await self.holders()
        count = len(holders)

        async def run_holder(index: int, peer: str) -> dict:
            if peer == self.node.peer_id:
                return await self.holder.run_iteration(iteration, index, count)
            reply, _ = await self.node.call(peer, "start", {"iteration": iteration, "holder_index": index,
                                                            "num_holders": count}, timeout=3600)  # fmt: skip
            return reply["result"]

        results = await asyncio.gather(*(run_holder(i, h) for i, h in enumerate(holders)))
        losses: list[float] = []
        carried: dict[int, Counter] = {s: Counter() for s in range(self.stages)}
        holder_counts: Counter = Counter()
        for peer, result in zip(holders, results):
            for mb in result["microbatches"].values():
                losses.append(float(mb["loss"]))
                holder_counts[peer] += 1
                for stage, hop_peer in enumerate(mb["path"][1:]):
                    carried[stage][hop_peer] += 1
        members = await self.stage_members()
        stage_of = {p: s for s in range(self.stages) for p in set(members.get(s, [])) | set(carried[s])}
        alive = await self.alive(stage_of)
        calls = []
        lost = 0
        wasted = 0.0
        for stage in range(self.stages):
            group = sorted(p for p in set(members.get(stage, [])) | set(carried[stage]) if p in alive)
            dead_carried = {p: c for p, c in carried[stage].items() if p not in alive}
            lost += sum(dead_carried.values())  # a replica died holding these gradients
            # and the forward and backward compute it spent on them is thrown away
            wasted += sum(c / max(self.speed.get(p, 1.0), 1e-6) for p, c in dead_carried.items())
            contributors = {p: c for p, c in carried[stage].items() if p in alive}
            calls += [(peer, stage, group, contributors) for peer in group]
        calls += [(peer, HOLDER_PART, holders, dict(holder_counts)) for peer in holders]
        replies = await asyncio.gather(*(self._step(p, s, iteration, g, c) for p, s, g, c in calls),
                                       return_exceptions=True)  # fmt: skip
        hop_rerouted = 0
        late: dict[int, int] = {}  # contributions that did not reach a stage's average in time
        for (peer, stage, _, _), reply in zip(calls, replies):
            if isinstance(reply, BaseException):
                log.warning("step of %s (stage %s) failed: %s", peer, stage, reply)
                continue
            late[stage] = max(late.get(stage, 0), sum(reply.get("lost", {}).values()))
            if stage != HOLDER_PART:  # hops count the reroutes they made themselves
                hop_rerouted += int(reply.get("rerouted", 0))
        lost += sum(late.values())
        seconds = time.perf_counter() - start
        return SwarmIteration(
            iteration=iteration, loss=sum(losses) / max(len(losses), 1),
            tokens=len(losses) * self.manifest.microbatch_size * self.manifest.seq_len, seconds=seconds,
            microbatches=len(losses), peers=sum(len(v) for v in members.values()) + len(holders),
            per_stage={s: dict(c) for s, c in carried.items()},
            rerouted=hop_rerouted + sum(int(r.get("rerouted", 0)) for r in results),
            reexecuted=sum(int(r.get("reexecuted", 0)) for r in results), gradients_lost=lost,
            wasted_compute_s=wasted + sum(float(r.get("wasted_compute_s", 0.0)) for r in results),
            slowest_stage_mb_s=min(self.capacity.values(), default=0.0),
            bottleneck_stage=min(self.capacity, key=lambda s: (self.capacity[s], s), default=0),
        )  # fmt: skip

    async def alive(self, stage_of: dict[str, int]) -> set[str]:
        """The peers that answer a short ping: a crashed replica is left out of the step."""

        async def ping(peer: str) -> str | None:
            if peer == self.node.peer_id:
                return peer
            try:
                await self.node.call(peer, "stats", {}, timeout=PING_TIMEOUT_S)
                return peer
            except Exception:  # noqa: BLE001 - no answer: treat as crashed
                return None

        peers = sorted(stage_of)
        alive = {p for p in await asyncio.gather(*(ping(p) for p in peers)) if p is not None}
        for peer in sorted(set(peers) - alive - self.reported_dead):
            self.reported_dead.add(peer)
            await self.on_crash(peer, stage_of[peer])
        return alive

    async def _step(
        self, peer: str, part: int, iteration: int, members: list[str], contributors: dict[str, int]
    ) -> dict:
        header = {"iteration": iteration, "part": part, "members": members, "contributors": contributors,
                  "timeout": 60}  # fmt: skip
        if peer == self.node.peer_id:
            reply, _ = await self.holder.on_step(header, b"", None)
            return reply
        reply, _ = await self.node.call(peer, "step", header, timeout=300)
        return reply

    async def fetch_states(self) -> dict[int, bytes]:
        """One replica's state per stage (for the final checkpoint)."""
        members = await self.stage_members()
        states: dict[int, bytes] = {}
        for stage, peers in members.items():
            for peer in peers:
                try:
                    reply, payload = await self.node.call(peer, "state", {"part": stage}, timeout=600)
                except Exception as exc:  # noqa: BLE001 - try the next replica
                    log.warning("state from %s failed: %s", peer, exc)
                    continue
                states[stage] = payload
                break
            else:
                raise RuntimeError(f"no replica of stage {stage} could send its state")
        return states
