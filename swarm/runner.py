"""Running a live peer: the initiator (a data holder that coordinates) and volunteers.

This wires the pieces (node, registry, presence, stage server or holder) and owns their lifetime.
"""

from __future__ import annotations

import asyncio
import functools
import io
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from models.data import open_source
from models.presets import config_dict, config_from_dict
from models.tokenizer import load_tokenizer
from swarm import PROTOCOL_VERSION
from swarm.config import TrainConfig
from swarm.holder.coordinator import Coordinator, SwarmIteration
from swarm.holder.holder import HOLDER_PART, DataHolder
from swarm.moving import claim_move, watch_for_move
from swarm.node import SwarmNode
from swarm.presence import VIEW_S, Presence, free_memory, make_record, measure_throughput
from swarm.recovery.checkpoints import load_into, part_key, part_state_blob, read_progress, write_checkpoint
from swarm.recovery.state_sync import download_state
from swarm.registry import Manifest, ProgressRecord
from swarm.registry.view import bottleneck_stage
from swarm.routing.demand import ALL
from swarm.routing.live import LiveFlow
from swarm.stage.server import StageServer
from swarm.wire import WireError

log = logging.getLogger(__name__)
MANIFEST_TTL_S = 7 * 24 * 3600.0


LEAVE_WAIT_S = 30.0  # Ctrl-C: how long a leaving peer waits for the step of the work it holds
HOLDER_DEMAND = ALL  # a holder's first demand: as many microbatches/s as the swarm can carry


async def serve_stats(node: SwarmNode, worker, flow: LiveFlow) -> None:
    """A read-only `stats` RPC: what this peer carried and refused, and its routing view."""

    async def on_stats(header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        return {
            "peer": node.peer_id, "part": worker.part, "iteration": worker.iteration,
            "served": node.rpc.served, "refused": node.rpc.refused, "bytes_in": node.rpc.bytes_in_by,
            "worker": dict(worker.stats), "flow": flow.describe(),
        }, b""  # fmt: skip

    await node.rpc.add("stats", on_stats)


async def start_flow(node: SwarmNode, manifest, part: int, capacity: float, region: str = "") -> LiveFlow:
    """This peer's routing agent, answering the `flow` RPC (its neighbours come from the DHT)."""
    activation_bytes = 4.0 * manifest.microbatch_size * manifest.seq_len * manifest.hidden_size
    flow = LiveFlow(node, stage=part, stages=len(manifest.layout), capacity=capacity,
                    compute_s=1.0 / max(capacity, 1e-6), activation_bytes=activation_bytes,
                    region=region)  # fmt: skip
    await flow.register()
    return flow


class JoinError(RuntimeError):
    """A volunteer cannot join: no such run, or a protocol version it does not speak."""


def build_manifest(cfg: TrainConfig, node: SwarmNode) -> Manifest:
    config, layout, schedule = cfg.validate()
    source = open_source(cfg.data, load_tokenizer(cfg.tokenizer), cfg.text_field)
    return Manifest(
        run_id=cfg.run_id, protocol_version=PROTOCOL_VERSION, model_config=config_dict(config),
        layout=[(s.start, s.end) for s in layout], microbatch_size=cfg.microbatch_size, seq_len=cfg.seq_len,
        hidden_size=config.hidden_size, train=cfg.to_dict(), data_id=source.id, seed=cfg.seed,
        initiator=node.peer_id, created_at=time.time(),
    )  # fmt: skip


async def wait_manifest(node: SwarmNode, timeout: float) -> Manifest:
    deadline = time.monotonic() + timeout
    while True:
        manifest = await node.blocking(node.registry.get_manifest)
        if manifest is not None:
            if manifest.protocol_version != PROTOCOL_VERSION:
                raise JoinError(
                    f"run {node.run_id!r} speaks protocol version {manifest.protocol_version}, "
                    f"this peer speaks {PROTOCOL_VERSION}: upgrade swarm to join it"
                )
            return manifest
        if time.monotonic() > deadline:
            raise JoinError(f"no run {node.run_id!r} found on the DHT within {timeout:.0f} s")
        await asyncio.sleep(1.0)


async def choose_stage(node: SwarmNode, stages: int) -> tuple[int, str]:
    """The stage where the flow is short: the routing engine's bottleneck (least spare capacity in
    the peers' flow records), or the least published capacity before routing has run. Returns the
    stage and the figures it was chosen on (for the log)."""
    peers = await node.blocking(node.registry.get_all_peers, stages)
    serving = {s: [r for r in peers.get(s, []) if r.serves] for s in range(stages)}
    ids = [r.peer_id for recs in serving.values() for r in recs]
    flows = await node.blocking(node.registry.get_flows, ids) if ids else {}
    stage = bottleneck_stage(serving, stages, flows)
    spare = {
        s: sum(flows[r.peer_id].spare for r in recs if r.peer_id in flows) for s, recs in serving.items()
    }
    capacity = {s: sum(r.capacity for r in recs) for s, recs in serving.items()}
    why = f"capacity per stage {_rounded(capacity)}, spare per stage {_rounded(spare)}"
    return (0 if stage is None else stage), why


def _rounded(values: dict[int, float]) -> dict[int, float]:
    return {k: round(v, 1) for k, v in values.items()}


@dataclass
class Serving:
    """What a volunteer runs for the part it serves now (a stage can change when it rebalances)."""

    worker: StageServer | DataHolder
    part: int
    flow: LiveFlow
    presence: Presence
    throughput: float
    origin: str


async def serve_part(
    node: SwarmNode, manifest, *, role: str, stage: int, device: str, region: str, name: str,
    capacity: float | None,
) -> Serving:  # fmt: skip
    """Build the worker for `stage` (or the holder part), load its current state, start serving."""
    stages = len(manifest.layout)
    if role == "holder":
        worker: StageServer | DataHolder = DataHolder(node, manifest, device=device)
        part, blocks, throughput = HOLDER_PART, (0, 0), HOLDER_DEMAND
    else:
        worker = StageServer(node, manifest, stage, device=device)
        part, blocks = stage, tuple(manifest.layout[stage])
        shape = [manifest.microbatch_size, manifest.seq_len, manifest.hidden_size]
        throughput = await worker.run_compute(measure_throughput, worker.module, shape, device)
        if capacity is not None:
            throughput = min(throughput, capacity)  # the volunteer lends at most this much
    origin = await download_state(node, worker, part, manifest.initiator)
    await worker.register()
    flow = await start_flow(node, manifest, part, throughput, region)
    await serve_stats(node, worker, flow)
    presence = Presence(
        node,
        make_record(node, role=role, stage=part, blocks=blocks, throughput=throughput,
                    free_memory=free_memory(device), region=region, name=name),
        worker.hops, stages, iteration_of=lambda: worker.iteration, flow=flow,
    )  # fmt: skip
    await presence.start()
    return Serving(worker, part, flow, presence, throughput, origin)


async def run_volunteer(
    node: SwarmNode, *, stage: int | None, role: str, device: str, region: str, name: str,
    stop: asyncio.Event, manifest_timeout: float = 60.0, on_ready: Callable[[str], None] = lambda s: None,
    capacity: float | None = None, rebalance_every_s: float = 0.0,
) -> None:  # fmt: skip
    """`swarm join`: serve a stage (or be an extra data holder) until `stop` is set; with
    `rebalance_every_s`, move to another stage when that raises the swarm's throughput enough."""
    manifest = await wait_manifest(node, manifest_timeout)
    stages = len(manifest.layout)
    if role != "holder":
        if stage is None:
            stage, why = await choose_stage(node, stages)
            on_ready(f"joining stage {stage}, the bottleneck ({why})")
        if not 0 <= stage < stages:
            raise JoinError(f"--stage {stage} outside 0..{stages - 1}")
    serve = functools.partial(serve_part, node, manifest, role=role, device=device, region=region, name=name,
                              capacity=capacity)  # fmt: skip
    serving = await serve(stage=stage or 0)
    what = "holder part" if serving.part == HOLDER_PART else f"stage {serving.part}"
    on_ready(f"serving {what} of run {node.run_id} at {serving.throughput:.1f} microbatches/s, "
             f"from the {serving.origin}")  # fmt: skip
    try:
        while role != "holder" and rebalance_every_s > 0:
            move = await watch_for_move(node, stages, stop, rebalance_every_s)
            if move is None:
                break
            move = await claim_move(node, serving.presence, stages, move)
            if move is None:
                on_ready(f"staying at stage {serving.part}: the move no longer holds (another peer claimed "
                         "it first, or the view changed)")  # fmt: skip
                continue
            on_ready(f"moving from stage {serving.part} to stage {move.stage}: the swarm's bound rises from "
                     f"{move.bound_before:.1f} to {move.bound_after:.1f} microbatches/s")  # fmt: skip
            await leave_part(serving, stop, f"moving to stage {move.stage}")
            serving = await serve(stage=move.stage)
            on_ready(f"serving stage {serving.part} from the {serving.origin}")
        await stop.wait()
    finally:
        if not serving.flow.closed:  # Ctrl-C: finish or hand back what we hold, then go
            await leave_part(serving, None, "clean exit", boundary_s=LEAVE_WAIT_S)


async def leave_part(
    serving: Serving, stop: asyncio.Event | None, reason: str, boundary_s: float = 600
) -> None:
    """Leave the part we serve without losing work: announce it (senders stop choosing us once their
    view refreshes), then go as soon as we hold nothing of the running iteration, or after the step
    that averages what we carried in it; only then refuse new work and withdraw our records."""
    presence, worker = serving.presence, serving.worker
    if not isinstance(worker, StageServer):  # an extra holder: its share is re-dealt next iteration
        serving.flow.close()
        await presence.withdraw(reason)
        return
    presence.update(state="leaving")
    try:
        await presence.publish()
    except Exception as exc:  # noqa: BLE001 - the swarm may be gone already
        log.warning("could not announce leaving: %s", exc)
    await asyncio.sleep(2 * VIEW_S)
    at = worker.iteration
    deadline = time.monotonic() + boundary_s
    while worker.iteration == at and not (stop and stop.is_set()) and time.monotonic() < deadline:
        if worker.idle_in(at):
            break
        await asyncio.sleep(0.05)
    worker.retire()
    serving.flow.close()
    await presence.withdraw(reason)


async def run_initiator(
    cfg: TrainConfig, node: SwarmNode, *, on_iteration: Callable[[SwarmIteration], None],
    status: Callable[[str], None], save: str | None, metrics_out: str | None,
    resume: str | None = None, checkpoint_every: int = 0, min_holders: int = 1, region: str = "",
    min_peers: int = 0,
) -> list[SwarmIteration]:  # fmt: skip
    """`swarm train`: publish the manifest, hold data, coordinate iterations, save checkpoints."""
    manifest = build_manifest(cfg, node)
    holder = DataHolder(node, manifest, device=cfg.device)
    latest: dict = {"dir": resume, "current": lambda: holder.iteration}
    if resume:
        holder.iteration = load_into(resume, holder.module, holder.optimizer, HOLDER_PART)
        status(f"resuming from {resume} at iteration {holder.iteration}")
    await serve_checkpoint_state(node, manifest, latest)
    await node.blocking(node.registry.publish_manifest, manifest, MANIFEST_TTL_S)
    await holder.register()
    flow = await start_flow(node, manifest, HOLDER_PART, HOLDER_DEMAND, region)
    await serve_stats(node, holder, flow)
    presence = Presence(
        node, make_record(node, role="holder", stage=HOLDER_PART, blocks=(0, 0), throughput=HOLDER_DEMAND,
                          free_memory=free_memory(cfg.device), region=region, name="initiator"),
        holder.hops, len(manifest.layout), iteration_of=lambda: holder.iteration, flow=flow,
    )  # fmt: skip
    await presence.start()
    coordinator = Coordinator(node, holder, manifest, status=status, min_holders=min_holders,
                              min_peers=min_peers)  # fmt: skip

    async def report_crash(peer: str, stage: int) -> None:
        await presence.event("crash", "did not answer before the step", peer=peer, stage=stage)

    coordinator.on_crash = report_crash
    history: list[SwarmIteration] = []
    sink = open(metrics_out, "w") if metrics_out else None
    try:
        for iteration in range(holder.iteration, cfg.iterations):
            await presence.refresh_view()
            metrics = await coordinator.run_iteration(iteration)
            history.append(metrics)
            flow.restate_demand(cfg.holder_demand, metrics.microbatches, metrics.seconds)
            if save and checkpoint_every and (iteration + 1) % checkpoint_every == 0:
                latest["dir"] = str(await save_swarm_checkpoint(coordinator, holder, manifest, save))
            await publish_progress(node, metrics, history)
            if sink:
                sink.write(json.dumps(metrics.to_json()) + "\n")
                sink.flush()
            on_iteration(metrics)
        if save and (not history or history[-1].iteration + 1 != latest_iteration(latest)):
            await save_swarm_checkpoint(coordinator, holder, manifest, save)
    finally:
        if sink:
            sink.close()
        await presence.withdraw()
    return history


async def publish_progress(node: SwarmNode, metrics: SwarmIteration, history: list[SwarmIteration]) -> None:
    """The run's progress on the DHT: latest figures plus a bounded loss curve for the dashboard."""
    extra = {
        "losses": [[m.iteration, round(m.loss, 5)] for m in history[-300:]],
        "rerouted": metrics.rerouted, "reexecuted": metrics.reexecuted,
        "gradients_lost": metrics.gradients_lost, "peers": metrics.peers,
    }  # fmt: skip
    record = ProgressRecord(
        holder=node.peer_id, iteration=metrics.iteration, microbatches=metrics.microbatches,
        loss=metrics.loss, tokens_per_s=metrics.tokens / metrics.seconds if metrics.seconds > 0 else 0.0,
        seconds=metrics.seconds, updated_at=time.time(), extra=extra,
    )  # fmt: skip
    try:
        await node.blocking(node.registry.publish_progress, record, 600.0)
    except Exception as exc:  # noqa: BLE001 - progress is informative only
        log.warning("progress not published: %s", exc)


async def save_swarm_checkpoint(
    coordinator: Coordinator, holder: DataHolder, manifest, directory: str
) -> Path:
    """Collect every stage's state from a live replica into one transformers checkpoint."""
    from models.partition import StageSpec
    from models.staged import StageModule

    config = config_from_dict(manifest.model_config)
    states = await coordinator.fetch_states()
    full: dict[str, torch.Tensor] = {}
    optimizers = {part_key(HOLDER_PART): holder.optimizer.state_dict()}
    for stage, payload in sorted(states.items()):
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        start, end = manifest.layout[stage]
        with torch.device("meta"):
            shell = StageModule(config, StageSpec(stage, start, end))
        for local, tensor in state["module"].items():
            full[shell.full_name(local)] = tensor.contiguous()
        optimizers[part_key(stage)] = state["optimizer"]
    for local, tensor in holder.module.state_dict().items():
        full[holder.module.full_name(local)] = tensor.detach().cpu().contiguous()
    extra = {"iteration": holder.iteration, "train_config": manifest.train, "data_id": manifest.data_id}
    return write_checkpoint(directory, config, full, optimizers, extra)


def latest_iteration(latest: dict) -> int | None:
    return read_progress(latest["dir"])["iteration"] if latest.get("dir") else None


async def serve_checkpoint_state(node: SwarmNode, manifest, latest: dict) -> None:
    """`checkpoint_state`: a stage's state from the latest checkpoint, for a peer restoring a stage
    that lost every replica (or every peer of a resumed run)."""
    from models.partition import StageSpec
    from models.staged import HolderPart, StageModule

    config = config_from_dict(manifest.model_config)

    async def on_checkpoint_state(header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        part = header.get("part")
        if not isinstance(part, int) or not -1 <= part < len(manifest.layout):
            raise WireError(f"no part {part!r} in this run")
        current = latest["current"]() if "current" in latest else None
        if not latest.get("dir"):
            return {"ok": True, "part": part, "iteration": None, "current": current}, b""
        with torch.device("meta"):
            shell = HolderPart(config) if part == HOLDER_PART else StageModule(
                config, StageSpec(part, *manifest.layout[part]))  # fmt: skip
        iteration, blob = await node.blocking(part_state_blob, latest["dir"], shell, part)
        return {"ok": True, "part": part, "iteration": iteration, "current": current}, blob

    await node.rpc.add("checkpoint_state", on_checkpoint_state)
