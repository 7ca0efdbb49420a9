"""A joining peer copies its stage's current state, so it starts exactly where the replicas are.

The state (parameters, optimizer state, iteration) streams from a live replica's `state` RPC.
When the stage has no live replica left (the whole stage died), it comes from the initiator's latest
checkpoint instead (`checkpoint_state`), and the run goes on from there.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


async def download_state(node, worker, part: int, initiator: str | None) -> str:
    """Load `worker` from a live replica of `part` (most advanced first); say where it came from."""
    records = await node.blocking(node.registry.get_stage_peers, part)
    mates = sorted((r for r in records if r.state == "serving" and r.peer_id != node.peer_id),
                   key=lambda r: (-r.iteration, r.peer_id))  # fmt: skip
    for mate in mates:
        try:
            header, payload = await node.call(mate.peer_id, "state", {"part": part}, timeout=600)
        except Exception as exc:  # noqa: BLE001 - try the next replica
            log.warning("state from %s failed: %s", mate.peer_id, exc)
            continue
        if header.get("part") == part:
            worker.load_state(payload)
            return f"state of replica {mate.peer_id[-8:]} at iteration {worker.iteration}"
    if initiator and initiator != node.peer_id:
        try:
            header, payload = await node.call(initiator, "checkpoint_state", {"part": part}, timeout=600)
            worker.load_state(payload)
            saved = worker.iteration
            # the rest of the swarm may be further on: serve its current iteration with the
            # checkpointed weights (what losing every replica of a stage costs)
            holders = await node.blocking(node.registry.get_stage_peers, -1)
            worker.iteration = max([saved, *(r.iteration for r in holders if r.state == "serving")])
            return f"latest checkpoint (iteration {saved}), serving iteration {worker.iteration}"
        except Exception as exc:  # noqa: BLE001 - no checkpoint yet: the seed is the state
            log.info("no checkpoint state: %s", exc)
    return "initial state from the run's seed"
