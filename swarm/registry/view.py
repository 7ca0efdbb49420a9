"""A whole-swarm snapshot from registry records: pure, shared by `swarm status` and progress views."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from swarm.registry.keys import HOLDER_STAGE
from swarm.registry.records import FlowRecord, Manifest, PeerRecord, ProgressRecord


def stage_of(peers: Mapping[int, list[PeerRecord]]) -> dict[str, int]:
    return {p.peer_id: s for s, recs in peers.items() for p in recs}


def bottleneck_stage(
    peers: Mapping[int, list[PeerRecord]], num_stages: int, flows: Mapping[str, FlowRecord] | None = None
) -> int | None:
    """The stage that limits the swarm, where a joining volunteer helps most.

    By default the stage with the least total capacity (an empty stage first). When every stage has
    flow records from the routing engine, its view wins: the stage with the least spare capacity.
    """
    if num_stages <= 0:
        return None
    capacity = {s: sum(p.capacity for p in peers.get(s, [])) for s in range(num_stages)}
    flows = flows or {}
    spare: dict[int, float] = {}
    for s in range(num_stages):
        recs = [flows[p.peer_id] for p in peers.get(s, []) if p.peer_id in flows]
        if recs:
            spare[s] = sum(r.spare for r in recs)
    if len(spare) == num_stages and all(capacity.values()):
        return min(range(num_stages), key=lambda s: (spare[s], capacity[s], s))
    return min(range(num_stages), key=lambda s: (capacity[s], s))


def routes_of(peers: Mapping[int, list[PeerRecord]], flows: Mapping[str, FlowRecord]) -> list[dict]:
    """(peer, stage, holder, next hop, rate) rows of the routing tables, ordered along the ring."""
    stages = stage_of(peers)
    rows = []
    for peer_id, rec in flows.items():
        for holder, hops in rec.routes.items():
            for hop, rate in hops.items():
                rows.append(
                    {
                        "peer": peer_id,
                        "stage": stages.get(peer_id),
                        "holder": holder,
                        "next": hop,
                        "rate": rate,
                    }
                )
    return sorted(rows, key=lambda r: (r["holder"], -2 if r["stage"] is None else r["stage"], r["peer"]))


def snapshot(
    manifest: Manifest,
    peers: Mapping[int, list[PeerRecord]],
    progress: list[ProgressRecord],
    flows: Mapping[str, FlowRecord],
    rejected: Mapping[str, int] | None = None,
) -> dict:
    """JSON-ready picture of a run: stages with their peers, holders, routes, bottleneck, progress."""
    n = manifest.num_stages
    stages = []
    for s in range(n):
        recs = peers.get(s, [])
        stages.append(
            {
                "stage": s,
                "blocks": list(manifest.layout[s]),
                "peers": [p.to_dict() for p in recs],
                "throughput": sum(p.throughput for p in recs),
                "capacity": sum(p.capacity for p in recs),
            }
        )
    latest = max(progress, key=lambda r: (r.iteration, r.updated_at), default=None)
    return {
        "run_id": manifest.run_id,
        "protocol_version": manifest.protocol_version,
        "initiator": manifest.initiator,
        "num_stages": n,
        "stages": stages,
        "holders": [p.to_dict() for p in peers.get(HOLDER_STAGE, [])],
        "bottleneck_stage": bottleneck_stage(peers, n, flows),
        "routes": routes_of(peers, flows),
        "iteration": latest.iteration if latest else None,
        "loss": latest.loss if latest else None,
        "tokens_per_s": sum(r.tokens_per_s for r in progress) if progress else None,
        "progress": [dataclasses.asdict(r) for r in progress],
        "rejected": dict(rejected or {}),
    }
