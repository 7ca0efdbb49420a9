"""A data holder: the source and the sink of its own microbatches.

It embeds its share of the global batch and sends each microbatch to a stage-0 peer; the last
stage's output comes back here (`forward` with stage S), where the loss is computed and the gradient
sent back along the recorded path; the gradient of the embeddings comes back last (`backward` with
stage -1), which completes the microbatch. Labels never leave the holder.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import torch

from models.data import DataStream, Schedule, open_source
from models.presets import config_from_dict
from models.randomness import EMBED_STAGE, seeded
from models.staged import build_holder
from models.tokenizer import load_tokenizer
from swarm.holder.supervisor import supervise
from swarm.node import SwarmNode
from swarm.routing.table import NextHops
from swarm.stage.replica import Replica
from swarm.transport import decode_tensor, encode_tensor
from swarm.wire import Hop, WireError, parse_hop

log = logging.getLogger(__name__)
HOLDER_PART = -1


@dataclass
class Flight:
    """One microbatch of this holder in flight."""

    ids: torch.Tensor
    embedded: torch.Tensor
    done: asyncio.Future
    hop: Hop | None = None
    path: tuple[str, ...] = ()
    first_hop: str | None = None
    grad_last: torch.Tensor | None = None
    loss: float | None = None
    sent_at: float = field(default_factory=time.monotonic)


class DataHolder(Replica):
    def __init__(self, node: SwarmNode, manifest, device: str = "cpu"):
        self.manifest = manifest
        train = manifest.train
        self.stages = len(manifest.layout)
        self.device = device
        config = config_from_dict(manifest.model_config)
        super().__init__(node, build_holder(config, manifest.seed, device=device), train, part=HOLDER_PART)
        self.schedule = Schedule(train["batch_size"], manifest.microbatch_size)
        tokenizer = load_tokenizer(train.get("tokenizer", "bytes"))
        source = open_source(train["data"], tokenizer, train.get("text_field", "text"))
        if source.id != manifest.data_id:
            raise ValueError(f"this holder's data ({source.id}) differs from the run's ({manifest.data_id})")
        self.stream = DataStream(source, manifest.seq_len, manifest.seed)
        self.shape = [manifest.microbatch_size, manifest.seq_len, manifest.hidden_size]
        self.hops = NextHops()
        self.flights: dict[tuple[str, int, int], Flight] = {}
        self.stats = {"rerouted": 0, "reexecuted": 0, "wasted_compute_s": 0.0}
        self.iteration_seconds: list[float] = []

    async def register(self) -> None:
        await super().register()
        await self.node.rpc.add("forward", self.on_result)
        await self.node.rpc.add("backward", self.on_embedding_grad)
        await self.node.rpc.add("start", self.on_start)
        await self.node.rpc.add("fetch", self.on_fetch)

    async def on_fetch(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        """Our embedding output or last-stage gradient of a microbatch, for a replacement hop."""
        from swarm.stage.server import key_of

        key, what = key_of(header), header.get("what")
        flight = self.flights.get(key)
        tensor = None
        if flight is not None:
            tensor = flight.embedded.detach() if what == "output" else flight.grad_last
        if tensor is None:
            raise WireError(f"no {what} kept for {key}")
        meta, data = encode_tensor(tensor, "none")
        return {"t": meta}, data

    async def on_start(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        """The initiator asks this (extra) holder to train its share of an iteration."""
        fields = [header.get(k) for k in ("iteration", "holder_index", "num_holders")]
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in fields):
            raise WireError("start needs integer iteration, holder_index and num_holders")
        return {"ok": True, "result": await self.run_iteration(*fields)}, b""

    # ------------------------------------------------------------------ sending
    def _embed(self, iteration: int, microbatch: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids = self.stream.microbatch(iteration, microbatch, self.schedule).to(self.device)
        with seeded(self.manifest.seed, iteration, microbatch, EMBED_STAGE, self.device):
            embedded = self.module.embed_tokens(ids)
        return ids, embedded

    async def send_microbatch(self, iteration: int, microbatch: int) -> Flight:
        ids, embedded = await self.run_compute(self._embed, iteration, microbatch)
        flight = Flight(ids, embedded, asyncio.get_running_loop().create_future())
        flight.hop = Hop(self.node.run_id, iteration, microbatch, self.node.peer_id, (self.node.peer_id,), 0)
        self.flights[flight.hop.key] = flight
        await self.send_first(flight, frozenset())
        return flight

    async def send_first(self, flight: Flight, exclude: frozenset[str]) -> None:
        """Send the embedded microbatch to a stage-0 peer, rerouting past failed ones."""
        meta, data = encode_tensor(flight.embedded.detach(), self.codec)
        tried: set[str] = set(exclude)
        while flight.hop.iteration == self.iteration:
            target = self.hops.choose(self.node.peer_id, 0, frozenset(tried))
            if target is None:
                await asyncio.sleep(1.0)  # no live stage-0 peer: wait for one
                tried = set(exclude)
                continue
            try:
                started = time.monotonic()
                reply, _ = await self.node.call(target, "forward", flight.hop.header(meta), data, timeout=60)
                self.hops.observe(target, time.monotonic() - started, reply)
                flight.first_hop = target
                return
            except Exception as exc:  # noqa: BLE001 - reroute to another stage-0 peer
                log.warning("forward to %s failed (%s); rerouting", target, exc)
                self.hops.mark_dead(target)
                tried.add(target)
                self.stats["rerouted"] += 1

    async def run_iteration(self, iteration: int, holder_index: int, num_holders: int) -> dict:
        """Train this holder's share of `iteration`; returns losses and the paths taken."""
        if iteration != self.iteration:
            raise WireError(f"asked to run iteration {iteration}, this holder is at {self.iteration}")
        share = self.schedule.holder_share(holder_index, num_holders)
        before = dict(self.stats)
        started = time.monotonic()
        flights = await asyncio.gather(*(self.send_microbatch(iteration, m) for m in share))
        await supervise(self, flights)
        self.iteration_seconds.append(time.monotonic() - started)
        return {
            "microbatches": {str(m): {"loss": f.loss, "path": list(f.path)} for m, f in zip(share, flights)},
            **{k: self.stats[k] - before[k] for k in ("rerouted", "reexecuted", "wasted_compute_s")},
        }

    # ---------------------------------------------------------------- receiving
    def _flight(self, header: dict, expect_stage: int) -> tuple[Hop, Flight]:
        hop = parse_hop(
            header, run=self.node.run_id, stages=self.stages, microbatches=self.schedule.microbatches
        )
        if hop.holder != self.node.peer_id or hop.stage != expect_stage:
            raise WireError("this microbatch does not belong to this holder")
        flight = self.flights.get(hop.key)
        if flight is None:
            raise WireError(f"unknown microbatch {hop.iteration}/{hop.microbatch}")
        return hop, flight

    async def on_result(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        """The last stage's output: loss, then the gradient goes back to that last-stage peer."""
        hop, flight = self._flight(header, self.stages)
        if len(hop.path) != self.stages + 1:
            raise WireError("a result must have crossed every stage")
        hidden = decode_tensor(header["t"], payload, expect_shape=self.shape)
        if flight.path:
            return {"ok": True, "duplicate": True}, b""  # already have this microbatch's output
        flight.path = hop.path
        asyncio.create_task(self._loss_and_backward(hop, flight, hidden))
        return {"ok": True}, b""

    def _compute_loss(self, flight: Flight, hidden: torch.Tensor) -> tuple[float, torch.Tensor]:
        hidden = hidden.to(self.device, torch.float32).requires_grad_(True)
        loss = self.module.loss(hidden, flight.ids)
        (loss / self.schedule.microbatches).backward()
        self.gradients.collect()
        flight.grad_last = hidden.grad.detach()
        return loss.item(), flight.grad_last

    async def _loss_and_backward(self, hop: Hop, flight: Flight, hidden: torch.Tensor) -> None:
        flight.loss, grad = await self.run_compute(self._compute_loss, flight, hidden)
        meta, data = encode_tensor(grad, self.codec)
        back = Hop(hop.run, hop.iteration, hop.microbatch, hop.holder, hop.path, self.stages - 1)
        try:
            await self.node.call(hop.path[-1], "backward", back.header(meta), data, timeout=60)
        except Exception as exc:  # noqa: BLE001 - recovery re-executes; see swarm/recovery
            log.warning("backward to %s failed: %s", hop.path[-1], exc)

    async def resend_last_grad(self, flight: Flight) -> None:
        """Send the loss gradient to the last stage again (the first copy was lost)."""
        hop = flight.hop
        meta, data = encode_tensor(flight.grad_last, self.codec)
        back = Hop(hop.run, hop.iteration, hop.microbatch, hop.holder, flight.path, self.stages - 1)
        await self.node.call(flight.path[-1], "backward", back.header(meta), data, timeout=60)

    def _embedding_backward(self, flight: Flight, grad: torch.Tensor) -> None:
        flight.embedded.backward(grad.to(flight.embedded.device))
        self.gradients.collect()

    async def on_embedding_grad(self, header: dict, payload: bytes, sender) -> tuple[dict, bytes]:
        hop, flight = self._flight(header, -1)
        grad = decode_tensor(header["t"], payload, expect_shape=self.shape)
        if flight.done.done():
            return {"ok": True, "duplicate": True}, b""
        await self.run_compute(self._embedding_backward, flight, grad)
        self.carried[hop.iteration] = self.carried.get(hop.iteration, 0) + 1
        if not flight.done.done():
            flight.done.set_result(True)
        return {"ok": True}, b""

    def after_step(self, iteration: int) -> None:
        super().after_step(iteration)
        self.flights = {k: f for k, f in self.flights.items() if k[1] > iteration}
