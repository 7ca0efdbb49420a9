"""Reading one run's records from the DHT: shared by `swarm status` and the dashboard's collector."""

from __future__ import annotations

import dataclasses
import time

from swarm.registry import Registry
from swarm.registry.records import EventRecord, FlowRecord, Manifest, PeerRecord, ProgressRecord


@dataclasses.dataclass
class RunRecords:
    """Everything readers show about a run, as read at `read_at` (validated records only)."""

    manifest: Manifest
    peers: dict[int, list[PeerRecord]]
    progress: list[ProgressRecord]
    flows: dict[str, FlowRecord]
    events: list[EventRecord]
    rejected: dict[str, int]
    read_at: float


def read_run(registry: Registry, *, events: bool = False) -> RunRecords | None:
    """The run's manifest, peers (holders at -1), progress and flows; None when there is no manifest.

    Blocking (each step bounded by the registry's timeout); RegistryError when the DHT does not answer.
    """
    manifest = registry.get_manifest()
    if manifest is None:
        return None
    peers = registry.get_all_peers(manifest.num_stages)
    progress = registry.get_progress()
    flows = registry.get_flows(p.peer_id for recs in peers.values() for p in recs)
    timeline = registry.get_events() if events else []
    return RunRecords(manifest, peers, progress, flows, timeline, dict(registry.rejected), time.time())
