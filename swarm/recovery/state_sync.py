"""A joining peer copies its stage's current state, so it starts exactly where the replicas are.

The state (parameters, optimizer state, iteration) streams from a live replica's `state` RPC.
When the stage has no live replica left (the whole stage died), it comes from the initiator's latest
checkpoint (`checkpoint_state`) or is rebuilt from the neighbouring stages' weights (CheckFree,
neighbours.py), as the run's `stage_recovery` option and `restore_source` decide; the run goes on
from its current iteration, which the initiator reports.
"""

from __future__ import annotations

import io
import logging

import torch

from swarm.recovery.neighbours import rebuild_from_neighbours
from swarm.recovery.policy import restore_source

log = logging.getLogger(__name__)


async def _live_replicas(node, part: int) -> list:
    records = await node.blocking(node.registry.get_stage_peers, part)
    return sorted((r for r in records if r.state == "serving" and r.peer_id != node.peer_id),
                  key=lambda r: (-r.iteration, r.peer_id))  # fmt: skip


async def _replica_state(node, part: int) -> tuple[str, bytes] | None:
    """(peer id, state blob) of the most advanced live replica of `part` that answers, or None."""
    for mate in await _live_replicas(node, part):
        try:
            header, payload = await node.call(mate.peer_id, "state", {"part": part}, timeout=600)
        except Exception as exc:  # noqa: BLE001 - try the next replica
            log.warning("state of part %s from %s failed: %s", part, mate.peer_id, exc)
            continue
        if header.get("part") == part:
            return mate.peer_id, payload
    return None


async def _module_state(node, part: int) -> dict[str, torch.Tensor] | None:
    """The parameters of a live replica of stage `part`, or None when it has none that answers."""
    found = await _replica_state(node, part) if part >= 0 else None
    if found is None:
        return None
    return torch.load(io.BytesIO(found[1]), map_location="cpu", weights_only=True)["module"]


async def download_state(node, worker, part: int, initiator: str | None) -> str:
    """Load `worker` from a live replica of `part` (most advanced first); say where it came from."""
    found = await _replica_state(node, part)
    if found is not None:
        worker.load_state(found[1])
        return f"state of replica {found[0][-8:]} at iteration {worker.iteration}"
    if not initiator or initiator == node.peer_id:
        return "initial state from the run's seed"
    try:
        header, payload = await node.call(initiator, "checkpoint_state", {"part": part}, timeout=600)
    except Exception as exc:  # noqa: BLE001 - an initiator that cannot answer: start from the seed
        log.warning("checkpoint state from the initiator failed: %s", exc)
        return "initial state from the run's seed"
    saved, current = header.get("iteration"), header.get("current")
    current = current if isinstance(current, int) and current >= 0 else (saved or 0)
    method = worker.train.get("stage_recovery", "auto")
    max_age = int(worker.train.get("recovery_max_age", 50))
    checkpoint = saved if payload else None
    source = restore_source(method, current, checkpoint, max_age, neighbours_alive=part >= 0)
    before = after = None
    if source == "neighbours":
        stages = len(worker.manifest.layout)
        before = await _module_state(node, part - 1)
        after = await _module_state(node, part + 1) if part + 1 < stages else None
        if before is None and after is None:
            source = restore_source(method, current, checkpoint, max_age, neighbours_alive=False)
    if source == "checkpoint":
        worker.load_state(payload)
        worker.iteration = max(current, worker.iteration)  # the swarm may be further on
        return f"latest checkpoint (iteration {saved}), serving iteration {worker.iteration}"
    if source == "neighbours":
        state = rebuild_from_neighbours(worker.module.state_dict(), before, after)
        await worker.run_compute(worker.module.load_state_dict, state)
        worker.iteration = current
        sides = " and ".join(n for n, s in (("before", before), ("after", after)) if s is not None)
        return f"average of the neighbouring stages ({sides}), serving iteration {current}"
    return "initial state from the run's seed"
