"""A stage server: runs its blocks for microbatches that stream through it, peer to peer.

`forward` takes activations, answers at once (an acknowledgement), computes, and pushes the output
to a next-stage peer picked from the routing table (or back to the holder after the last stage).
`backward` takes the gradient of that output, backpropagates through the kept graph, accumulates
parameter gradients and pushes the input gradient to the previous hop on the recorded path.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import torch

from models.partition import StageSpec
from models.presets import config_from_dict
from models.randomness import seeded
from models.staged import build_stage
from swarm.node import SwarmNode
from swarm.routing.table import NextHops
from swarm.stage.replica import Replica
from swarm.transport import decode_tensor, encode_tensor
from swarm.wire import Hop, WireError, parse_hop

log = logging.getLogger(__name__)


@dataclass
class HopState:
    hop: Hop
    inputs: torch.Tensor
    outputs: torch.Tensor
    compute_s: float


class StageServer(Replica):
    def __init__(self, node: SwarmNode, manifest, stage: int, device: str = "cpu"):
        self.manifest = manifest
        self.stages = len(manifest.layout)
        start, end = manifest.layout[stage]
        self.spec = StageSpec(stage, start, end)
        self.device = device
        config = config_from_dict(manifest.model_config)
        module = build_stage(config, self.spec, manifest.seed, device=device)
        super().__init__(node, module, manifest.train, part=stage)
        self.microbatches = manifest.train["batch_size"] // manifest.microbatch_size
        self.shape = [manifest.microbatch_size, manifest.seq_len, manifest.hidden_size]
        self.hops = NextHops()
        self.kept: dict[tuple[str, int, int], HopState] = {}
        self.computing: set[tuple[str, int, int]] = set()
        self.stats = {"forward": 0, "backward": 0, "rerouted": 0, "compute_s": 0.0}
        self.tasks: set[asyncio.Task] = set()

    async def register(self) -> None:
        await super().register()
        await self.node.rpc.add("forward", self.on_forward)
        await self.node.rpc.add("backward", self.on_backward)

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _parse(self, header: dict) -> Hop:
        return parse_hop(header, run=self.node.run_id, stages=self.stages, microbatches=self.microbatches)

    def _check_iteration(self, hop: Hop) -> None:
        if hop.iteration != self.iteration:
            raise WireError(f"microbatch of iteration {hop.iteration}, this stage is at {self.iteration}")

    # ------------------------------------------------------------------ forward
    async def on_forward(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        hop = self._parse(header)
        if hop.stage != self.spec.index or len(hop.path) != self.spec.index + 1:
            raise WireError(f"this peer serves stage {self.spec.index}, not {hop.stage}")
        inputs = decode_tensor(header["t"], payload, expect_shape=self.shape)
        self._check_iteration(hop)
        if hop.key in self.kept or hop.key in self.computing:
            return {"ok": True, "duplicate": True}, b""  # a re-send whose first copy got here
        self.computing.add(hop.key)
        self._spawn(self._forward(hop, inputs))
        return {"ok": True}, b""

    def _compute_forward(self, hop: Hop, inputs: torch.Tensor) -> HopState:
        started = time.perf_counter()
        inputs = inputs.to(self.device, torch.float32).requires_grad_(True)
        with seeded(self.manifest.seed, hop.iteration, hop.microbatch, self.spec.index, self.device):
            outputs = self.module(inputs)
        return HopState(hop, inputs, outputs, time.perf_counter() - started)

    async def _forward(self, hop: Hop, inputs: torch.Tensor) -> None:
        try:
            state = await self.run_compute(self._compute_forward, hop, inputs)
        finally:
            self.computing.discard(hop.key)
        if state.hop.iteration != self.iteration:
            return  # the iteration ended while we computed; its result is not wanted any more
        self.kept[hop.key] = state
        self.stats["forward"] += 1
        self.stats["compute_s"] += state.compute_s
        meta, data = encode_tensor(state.outputs.detach(), self.codec)
        nxt_stage = self.spec.index + 1
        out = Hop(
            hop.run, hop.iteration, hop.microbatch, hop.holder, (*hop.path, self.node.peer_id), nxt_stage
        )
        await self.push_forward(out, meta, data)

    async def push_forward(self, hop: Hop, meta: dict, data: bytes) -> None:
        """Send to a next-stage peer; on failure try the others (the activations are still here)."""
        tried: set[str] = set()
        while True:
            if hop.stage == self.stages:
                target = hop.holder
            else:
                target = self.hops.choose(hop.holder, hop.stage, frozenset(tried))
                if target is None:
                    await asyncio.sleep(1.0)  # nobody serves the next stage: wait for a peer
                    tried.clear()
                    continue
            try:
                await self.node.call(target, "forward", hop.header(meta), data, timeout=60)
                return
            except Exception as exc:  # noqa: BLE001 - any failure of the hop means: reroute
                log.warning("forward to %s failed (%s); rerouting", target, exc)
                if target == hop.holder:
                    return  # the holder is gone: its microbatch is gone with it
                self.hops.mark_dead(target)
                tried.add(target)
                self.stats["rerouted"] += 1

    # ----------------------------------------------------------------- backward
    async def on_backward(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        hop = self._parse(header)
        if hop.stage != self.spec.index:
            raise WireError(f"this peer serves stage {self.spec.index}, not {hop.stage}")
        self._check_iteration(hop)
        state = self.kept.get(hop.key)
        if state is None:
            raise WireError(f"unknown microbatch {hop.key} at stage {self.spec.index}")
        grad = decode_tensor(header["t"], payload, expect_shape=list(state.outputs.shape))
        self._spawn(self._backward(state, grad))
        return {"ok": True}, b""

    def _compute_backward(self, state: HopState, grad: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        state.outputs.backward(grad.to(state.outputs.device, state.outputs.dtype))
        self.stats["compute_s"] += time.perf_counter() - started
        return state.inputs.grad.detach()

    async def _backward(self, state: HopState, grad: torch.Tensor) -> None:
        hop = state.hop
        self.kept.pop(hop.key, None)
        grad_in = await self.run_compute(self._compute_backward, state, grad)
        self.carried[hop.iteration] = self.carried.get(hop.iteration, 0) + 1
        self.stats["backward"] += 1
        meta, data = encode_tensor(grad_in, self.codec)
        prev = hop.path[-1]
        back = Hop(hop.run, hop.iteration, hop.microbatch, hop.holder, hop.path, self.spec.index - 1)
        try:
            await self.node.call(prev, "backward", back.header(meta), data, timeout=60)
        except Exception as exc:  # noqa: BLE001 - the holder finds the break and re-executes
            log.warning("backward to %s failed: %s", prev, exc)

    def after_step(self, iteration: int) -> None:
        super().after_step(iteration)
        self.kept = {k: v for k, v in self.kept.items() if k[1] > iteration}
