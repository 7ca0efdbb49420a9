"""What a stage server and a data holder share: a trainable part, its optimizer and the step.

Both are replicas of one part of the model (a stage, or the holder part); at the end of an
iteration they average gradients with their mates and take the same optimizer step.
"""

from __future__ import annotations

import asyncio
import io
import logging
from concurrent.futures import ThreadPoolExecutor

import torch
from torch import nn

from swarm.averaging import GradientAccumulator, ReplicaAverager
from swarm.node import SwarmNode
from swarm.trainer.optim import make_optimizer
from swarm.transport import decode_tensor, encode_tensor
from swarm.wire import WireError

log = logging.getLogger(__name__)


class Replica:
    """A part of the model being trained by this process, with the RPCs every replica serves."""

    def __init__(self, node: SwarmNode, module: nn.Module, train: dict, part: int):
        self.node, self.module, self.train, self.part = node, module, train, part
        self.optimizer = make_optimizer(
            module, train["optimizer"], train["lr"], train["weight_decay"], tuple(train["betas"])
        )
        self.gradients = GradientAccumulator(module, exact=bool(train.get("exact_gradients", True)))
        self.averager = ReplicaAverager(node.peer_id, self.gradients)
        self.compute = ThreadPoolExecutor(1, thread_name_prefix=f"compute-{part}")  # one hop at a time
        self.iteration = 0  # optimizer steps taken = the iteration this replica trains now
        self.carried: dict[int, int] = {}
        self.codec = train.get("compression", "none")
        self._reported: dict[str, int] = {}
        self._resyncing = False

    async def run_compute(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.compute, fn, *args)

    async def register(self) -> None:
        await self.node.rpc.add("grads", self.on_grads)
        await self.node.rpc.add("step", self.on_step)
        await self.node.rpc.add("state", self.on_state)

    # ------------------------------------------------------------------ averaging
    async def _send_grads(self, peer: str, iteration: int, count: int, flat: torch.Tensor) -> None:
        meta, payload = encode_tensor(flat, "none")  # gradients averaged exactly
        await self.node.call(peer, "grads", {"iteration": iteration, "count": count, "part": self.part,
                                             "t": meta}, payload, timeout=120)  # fmt: skip

    async def on_grads(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        if header.get("part") != self.part:
            raise WireError(f"this peer serves part {self.part}, not {header.get('part')!r}")
        iteration, count = header.get("iteration"), header.get("count")
        if not isinstance(iteration, int) or iteration != self.iteration:
            raise WireError(f"gradients for iteration {iteration!r}, this replica is at {self.iteration}")
        if not isinstance(count, int) or count < 1:
            raise WireError("count must be a positive integer")
        flat = decode_tensor(header["t"] if isinstance(header.get("t"), dict) else {}, payload,
                             expect_shape=[self.averager.numel])  # fmt: skip
        self.averager.receive(iteration, sender.to_base58(), count, flat)
        return {"ok": True}, b""

    async def on_step(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        """End of iteration: average with the listed mates and take the optimizer step."""
        if header.get("part", self.part) != self.part:  # we moved to another stage meanwhile
            raise WireError(f"this peer serves part {self.part}, not {header.get('part')!r}")
        iteration = header.get("iteration")
        if iteration != self.iteration:
            behind = isinstance(iteration, int) and iteration > self.iteration
            if behind and isinstance(header.get("members"), list) and not self._resyncing:
                asyncio.ensure_future(self.resync([str(m) for m in header["members"]], iteration + 1))
            raise WireError(f"step for iteration {iteration!r}, this replica is at {self.iteration}")
        members = header.get("members")
        contributors = header.get("contributors")
        if not isinstance(members, list) or not isinstance(contributors, dict):
            raise WireError("step needs 'members' (list) and 'contributors' (map)")
        included = await self.averager.average(
            iteration, [str(m) for m in members], {str(k): int(v) for k, v in contributors.items()},
            self._send_grads, timeout=float(header.get("timeout", 60.0)),
        )  # fmt: skip
        await self.run_compute(self._apply_step, iteration)
        self.after_step(iteration)
        lost = {p: c for p, c in contributors.items() if p not in included and c > 0}
        counters = {k: v for k, v in getattr(self, "stats", {}).items() if k in ("rerouted", "reexecuted")}
        delta = {k: v - self._reported.get(k, 0) for k, v in counters.items()}
        self._reported = counters
        return {"ok": True, "iteration": self.iteration, "included": included, "lost": lost, **delta}, b""

    def _apply_step(self, iteration: int) -> None:
        """In the compute thread, so that a state snapshot never sees new weights with an old number."""
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.iteration = iteration + 1

    def after_step(self, iteration: int) -> None:
        self.carried.pop(iteration, None)

    async def on_state(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        """This replica's parameters and optimizer state (for a joining mate or a checkpoint)."""
        if header.get("part", self.part) != self.part:
            raise WireError(f"this peer serves part {self.part}, not {header.get('part')!r}")
        buffer = io.BytesIO()
        iteration = await self.run_compute(self._snapshot, buffer)
        return {"ok": True, "iteration": iteration, "part": self.part}, buffer.getvalue()

    def _snapshot(self, buffer: io.BytesIO) -> int:
        """Weights, optimizer state and iteration, read together in the compute thread (no step between)."""
        iteration = self.iteration
        state = {"module": self.module.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "iteration": iteration}  # fmt: skip
        torch.save(state, buffer)
        return iteration

    async def resync(self, members: list[str], target: int) -> None:
        """We fell out of step (joined while the stage stepped): copy a mate once it reached `target`
        or went past it (a fast stage steps many times a second), then serve its iteration."""
        self._resyncing = True
        try:
            for _ in range(60):
                await asyncio.sleep(0.5)
                for mate in (m for m in members if m != self.node.peer_id):
                    if await self._copy_mate(mate, target):
                        return
        finally:
            self._resyncing = False

    async def _copy_mate(self, mate: str, target: int) -> bool:
        try:
            header, payload = await self.node.call(mate, "state", {"part": self.part}, timeout=600)
        except Exception:  # noqa: BLE001 - try another mate
            return False
        got = header.get("iteration")
        if header.get("part") != self.part or not isinstance(got, int) or not got >= target > self.iteration:
            return False
        await self.run_compute(self.load_state, payload)
        self.gradients.reset()
        log.info("resynced from %s at iteration %s", mate[-8:], got)
        return True

    def load_state(self, payload: bytes) -> int:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        self.module.load_state_dict(state["module"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.iteration = int(state["iteration"])
        return self.iteration
