"""A stage server: runs its blocks for microbatches that stream through it, peer to peer.

`forward` takes activations, answers at once (an acknowledgement), computes, and pushes the output
to a next-stage peer picked from the routing table (or back to the holder after the last stage).
`backward` takes the gradient of that output, backpropagates through the kept graph, accumulates
parameter gradients and pushes the input gradient to the previous hop on the recorded path.

For recovery (DESIGN section 7) a hop keeps, per microbatch of the current iteration, its input
and output until backward, where it sent the output, and the gradient it sent back; the holder
asks `status` along the path to find a break, `resend` re-pushes from the last live hop, and
`reexec` makes this peer replace a dead hop of its stage (forward again, then backward).
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
from swarm.recovery.faults import fault_point, straggle
from swarm.routing.stragglers import observe
from swarm.routing.table import NextHops
from swarm.stage.replica import Replica
from swarm.transport import decode_tensor, encode_tensor
from swarm.wire import Hop, WireError, parse_hop

log = logging.getLogger(__name__)
Key = tuple[str, int, int]


@dataclass
class HopState:
    hop: Hop
    inputs: torch.Tensor
    outputs: torch.Tensor
    compute_s: float


def key_of(header: dict) -> Key:
    key = header.get("key")
    if not (isinstance(key, list) and len(key) == 3 and isinstance(key[0], str)
            and all(isinstance(k, int) for k in key[1:])):  # fmt: skip
        raise WireError("key must be [holder, iteration, microbatch]")
    return (key[0], key[1], key[2])


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
        self.service_s: float | None = None  # moving average of our forward compute (for senders)
        self.kept: dict[Key, HopState] = {}
        self.computing: set[Key] = set()
        self.sent_to: dict[Key, str] = {}
        self.grad_sent: dict[Key, tuple[torch.Tensor, Hop]] = {}
        self.stats = {"forward": 0, "backward": 0, "rerouted": 0, "reexecuted": 0, "compute_s": 0.0}
        self.tasks: set[asyncio.Task] = set()
        self.on_peer_failed = lambda peer: None
        self.retired = False  # moving to another stage: take no new microbatches

    def idle_in(self, iteration: int) -> bool:
        """We hold nothing of `iteration`: no hop computing or kept, no gradient carried."""
        return (not self.computing and self.carried.get(iteration, 0) == 0
                and not any(key[1] == iteration for key in self.kept))  # fmt: skip

    def retire(self) -> None:
        """Refuse new work from now on (the sender reroutes); cancel what is still running."""
        self.retired = True
        for task in list(self.tasks):
            task.cancel()

    async def register(self) -> None:
        await super().register()
        for name, handler in (("forward", self.on_forward), ("backward", self.on_backward),
                              ("status", self.on_status), ("resend", self.on_resend),
                              ("fetch", self.on_fetch), ("reexec", self.on_reexec)):  # fmt: skip
            await self.node.rpc.add(name, handler)

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def _parse(self, header: dict) -> Hop:
        return parse_hop(header, run=self.node.run_id, stages=self.stages, microbatches=self.microbatches)

    def _check_iteration(self, iteration: int) -> None:
        if iteration != self.iteration:
            raise WireError(f"microbatch of iteration {iteration}, this stage is at {self.iteration}")

    # ------------------------------------------------------------------ forward
    async def on_forward(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        if self.retired:
            raise WireError(f"this peer no longer serves stage {self.spec.index}")
        hop = self._parse(header)
        if hop.stage != self.spec.index or len(hop.path) != self.spec.index + 1:
            raise WireError(f"this peer serves stage {self.spec.index}, not {hop.stage}")
        inputs = decode_tensor(header["t"], payload, expect_shape=self.shape)
        self._check_iteration(hop.iteration)
        if hop.key in self.kept or hop.key in self.computing:
            return {"ok": True, "duplicate": True}, b""  # a re-send whose first copy got here
        fault_point("forward", hop.iteration)
        self.computing.add(hop.key)
        self._spawn(self._forward(hop, inputs))
        return {"ok": True, "service_s": round(self.service_s or 0.0, 6)}, b""

    def _compute_forward(self, hop: Hop, inputs: torch.Tensor) -> HopState:
        started = time.perf_counter()
        inputs = inputs.to(self.device, torch.float32).requires_grad_(True)
        with seeded(self.manifest.seed, hop.iteration, hop.microbatch, self.spec.index, self.device):
            outputs = self.module(inputs)
        straggle(time.perf_counter() - started)
        elapsed = time.perf_counter() - started
        self.service_s = observe(self.service_s, elapsed)
        return HopState(hop, inputs, outputs, elapsed)

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
        await self.push_forward(state, frozenset())

    async def push_forward(self, state: HopState, exclude: frozenset[str]) -> None:
        """Send our output to a next-stage peer; on failure try the others (we still hold it)."""
        hop = state.hop
        out = Hop(hop.run, hop.iteration, hop.microbatch, hop.holder, (*hop.path, self.node.peer_id),
                  self.spec.index + 1)  # fmt: skip
        meta, data = encode_tensor(state.outputs.detach(), self.codec)
        tried: set[str] = set(exclude)
        while hop.iteration == self.iteration:
            if out.stage == self.stages:
                target = hop.holder
            else:
                target = self.hops.choose(hop.holder, out.stage, frozenset(tried))
                if target is None:
                    await asyncio.sleep(1.0)  # nobody serves the next stage: wait for a peer
                    tried = set(exclude)
                    continue
            try:
                started = time.monotonic()
                reply, _ = await self.node.call(target, "forward", out.header(meta), data, timeout=60)
                self.hops.observe(target, time.monotonic() - started, reply)
                self.sent_to[hop.key] = target
                return
            except Exception as exc:  # noqa: BLE001 - any failure of the hop means: reroute
                log.warning("forward to %s failed (%s); rerouting", target, exc)
                if target == hop.holder:
                    return  # the holder is gone: its microbatch is gone with it
                self.hops.mark_dead(target)
                self.on_peer_failed(target)
                tried.add(target)
                self.stats["rerouted"] += 1

    # ----------------------------------------------------------------- backward
    async def on_backward(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        hop = self._parse(header)
        if hop.stage != self.spec.index:
            raise WireError(f"this peer serves stage {self.spec.index}, not {hop.stage}")
        self._check_iteration(hop.iteration)
        state = self.kept.get(hop.key)
        if state is None:
            if hop.key in self.grad_sent:
                return {"ok": True, "duplicate": True}, b""
            raise WireError(f"unknown microbatch {hop.key} at stage {self.spec.index}")
        grad = decode_tensor(header["t"], payload, expect_shape=list(state.outputs.shape))
        fault_point("backward", hop.iteration)
        del self.kept[hop.key]
        self._spawn(self._backward(state, grad))
        return {"ok": True}, b""

    def _compute_backward(self, state: HopState, grad: torch.Tensor) -> torch.Tensor:
        started = time.perf_counter()
        state.outputs.backward(grad.to(state.outputs.device, state.outputs.dtype))
        self.gradients.collect()
        straggle(time.perf_counter() - started)
        self.stats["compute_s"] += time.perf_counter() - started
        return state.inputs.grad.detach()

    async def _backward(self, state: HopState, grad: torch.Tensor) -> None:
        grad_in = await self.run_compute(self._compute_backward, state, grad)
        hop = state.hop
        self.carried[hop.iteration] = self.carried.get(hop.iteration, 0) + 1
        self.stats["backward"] += 1
        self.grad_sent[hop.key] = (grad_in, hop)
        await self._send_grad(hop.key)

    async def _send_grad(self, key: Key) -> None:
        grad_in, hop = self.grad_sent[key]
        meta, data = encode_tensor(grad_in, self.codec)
        back = Hop(hop.run, hop.iteration, hop.microbatch, hop.holder, hop.path, self.spec.index - 1)
        try:
            await self.node.call(hop.path[-1], "backward", back.header(meta), data, timeout=60)
        except Exception as exc:  # noqa: BLE001 - the holder finds the break and re-executes
            log.warning("backward to %s failed: %s", hop.path[-1], exc)

    # ----------------------------------------------------------------- recovery
    async def on_status(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        key = key_of(header)
        if key in self.computing:
            state = "computing"
        elif key in self.kept:
            state = "kept"
        elif key in self.grad_sent:
            state = "done"
        else:
            state = "unknown"
        return {"state": state, "next": self.sent_to.get(key), "iteration": self.iteration}, b""

    async def on_resend(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        """Re-push our output (forward) or our input gradient (backward) for a microbatch."""
        key, what = key_of(header), header.get("what")
        exclude = header.get("exclude", [])
        if not isinstance(exclude, list) or not all(isinstance(p, str) for p in exclude):
            raise WireError("exclude must be a list of peer ids")
        if what == "forward" and key in self.kept:
            self.stats["rerouted"] += 1
            self.sent_to.pop(key, None)
            self._spawn(self.push_forward(self.kept[key], frozenset(exclude)))
        elif what == "grad" and key in self.grad_sent:
            self._spawn(self._send_grad(key))
        else:
            raise WireError(f"nothing to resend for {key} ({what})")
        return {"ok": True}, b""

    async def on_fetch(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        """Our output or input gradient of a microbatch, for a peer that replaces a dead hop."""
        key, what = key_of(header), header.get("what")
        if what == "output" and key in self.kept:
            meta, data = encode_tensor(self.kept[key].outputs.detach(), "none")
        elif what == "grad" and key in self.grad_sent:
            meta, data = encode_tensor(self.grad_sent[key][0], "none")
        else:
            raise WireError(f"no {what} kept for {key}")
        return {"t": meta}, data

    async def on_reexec(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        """Replace a dead hop of our stage for one microbatch: fetch its input from the live hop
        before the break and the output gradient from the live hop after it, redo forward and
        backward here, and send the input gradient on as the dead hop would have."""
        if self.retired:
            raise WireError(f"this peer no longer serves stage {self.spec.index}")
        hop = self._parse(header)
        downstream = header.get("downstream")
        if hop.stage != self.spec.index or not isinstance(downstream, str):
            raise WireError("reexec needs this peer's stage and a downstream peer")
        self._check_iteration(hop.iteration)
        self._spawn(self._reexec(hop, downstream))
        return {"ok": True}, b""

    async def _reexec(self, hop: Hop, downstream: str) -> None:
        ask = {"key": list(hop.key)}
        try:
            head, data = await self.node.call(hop.path[-1], "fetch", {**ask, "what": "output"}, timeout=60)
            inputs = decode_tensor(head["t"], data, expect_shape=self.shape)
            head, data = await self.node.call(downstream, "fetch", {**ask, "what": "grad"}, timeout=60)
            grad = decode_tensor(head["t"], data, expect_shape=self.shape)
        except Exception as exc:  # noqa: BLE001 - the holder will look again
            log.warning("re-execution of %s failed: %s", hop.key, exc)
            return
        state = await self.run_compute(self._compute_forward, hop, inputs)
        self.stats["reexecuted"] += 1
        self.stats["compute_s"] += state.compute_s
        await self._backward(state, grad)

    def after_step(self, iteration: int) -> None:
        super().after_step(iteration)
        self.kept = {k: v for k, v in self.kept.items() if k[1] > iteration}
        self.sent_to = {k: v for k, v in self.sent_to.items() if k[1] > iteration}
        self.grad_sent = {k: v for k, v in self.grad_sent.items() if k[1] > iteration}
