"""The holder watches its microbatches and repairs the ones a crash broke (DESIGN section 7).

When no microbatch has completed for an adaptive timeout, the holder walks each stuck microbatch's
recorded path with `status` calls (GWTF: "pings along the recorded path to find the break"):
- still going forward: the first hop that does not answer is dead; the live hop before it re-sends
  the output it still holds to another peer of that stage (nothing upstream is recomputed);
- going backward: the first dead hop from the end is re-executed on a replacement replica, which
  fetches its input from the live hop before and the output gradient from the live hop after;
- a live hop that is just slow is left alone (it is a straggler, not a failure).
"""

from __future__ import annotations

import asyncio
import logging
import time

from swarm.recovery.policy import adaptive_timeout, choose_replacement
from swarm.wire import Hop

log = logging.getLogger(__name__)
MIN_STALL_S = 10.0
FIRST_ITERATION_S = 60.0


async def supervise(holder, flights: list) -> None:
    """Wait for every flight; repair stuck ones; never give up while the run goes on."""
    stall = adaptive_timeout(holder.iteration_seconds[-5:], floor_s=MIN_STALL_S, default_s=FIRST_ITERATION_S)
    last_progress = time.monotonic()
    done = sum(f.done.done() for f in flights)
    while done < len(flights):
        pending = [f.done for f in flights if not f.done.done()]
        await asyncio.wait(pending, timeout=1.0)
        now_done = sum(f.done.done() for f in flights)
        if now_done > done:
            done, last_progress = now_done, time.monotonic()
            continue
        if time.monotonic() - last_progress < stall:
            continue
        for flight in flights:
            if not flight.done.done():
                try:
                    await repair(holder, flight)
                except Exception as exc:  # noqa: BLE001 - looked at again after the next stall
                    log.warning("repair of microbatch %s failed: %s", flight.hop.key, exc)
        last_progress = time.monotonic()


async def _status(holder, peer: str, key) -> dict | None:
    """A hop's view of the microbatch, or None when the hop does not answer (dead)."""
    try:
        reply, _ = await holder.node.call(peer, "status", {"key": list(key)}, timeout=10)
        return reply
    except Exception:  # noqa: BLE001 - no answer is the failure signal
        holder.hops.mark_dead(peer)
        return None


async def repair(holder, flight) -> None:
    key = flight.hop.key
    if not flight.path:
        await _repair_forward(holder, flight, key)
    else:
        await _repair_backward(holder, flight, key)


async def _repair_forward(holder, flight, key) -> None:
    me = holder.node.peer_id
    prev, cur = me, flight.first_hop
    while cur is not None and cur != me:
        status = await _status(holder, cur, key)
        if status is None:
            log.warning("microbatch %s: hop %s is dead; %s re-sends", key, cur, prev)
            holder.stats["rerouted"] += 1
            if prev == me:
                await holder.send_first(flight, frozenset({cur}))
            else:
                await holder.node.call(
                    prev, "resend", {"key": list(key), "what": "forward", "exclude": [cur]}
                )
            return
        if status["state"] == "unknown" and prev == me:
            await holder.send_first(flight, frozenset())  # the first hop never got it
            return
        if status["next"] is None:
            return  # that hop is computing or pushing: a straggler, leave it
        prev, cur = cur, status["next"]


async def _repair_backward(holder, flight, key) -> None:
    me = holder.node.peer_id
    path = list(flight.path)  # [holder, stage 0 peer, ..., last stage peer]
    stages = holder.stages
    for stage in range(stages - 1, -1, -1):
        peer = path[stage + 1]
        status = await _status(holder, peer, key)
        if status is not None and status["state"] == "done":
            continue
        downstream = path[stage + 2] if stage + 1 < stages else me
        if status is not None and status["state"] == "kept":
            # it waits for a gradient that was lost on the way: the hop after it sends it again
            if downstream == me:
                await holder.resend_last_grad(flight)
            else:
                await holder.node.call(downstream, "resend", {"key": list(key), "what": "grad"})
            return
        if status is not None:
            return  # computing: a straggler
        await _reexecute(holder, flight, stage, path, downstream)
        return
    # every hop is done: the embedding gradient got lost on its way back to us
    await holder.node.call(path[1], "resend", {"key": list(key), "what": "grad"})


async def _reexecute(holder, flight, stage: int, path: list[str], downstream: str) -> None:
    dead = path[stage + 1]
    records = await holder.node.blocking(holder.node.registry.get_stage_peers, stage)
    candidates = sorted(r.peer_id for r in records if r.serves)
    replacement = choose_replacement(candidates, {dead} | {p for p in candidates if not holder.hops.alive(p)})
    if replacement is None:
        log.warning("stage %d has no live peer: microbatch %s waits for one", stage, flight.hop.key)
        return
    hop = flight.hop
    redo = Hop(hop.run, hop.iteration, hop.microbatch, hop.holder, tuple(path[: stage + 1]), stage)
    await holder.node.call(replacement, "reexec", {**redo.header({}), "downstream": downstream}, timeout=30)
    path[stage + 1] = replacement
    flight.path = tuple(path)  # the replacement carried it at this stage
    holder.stats["reexecuted"] += 1
    speed = {r.peer_id: r.throughput for r in records}
    holder.stats["wasted_compute_s"] += 1.0 / max(speed.get(replacement, 1.0), 1e-6)
    log.warning("microbatch %s: re-executed stage %d on %s (was %s)", hop.key, stage, replacement, dead)
