"""The single-process baseline: the whole model as the composition of its stage modules.

It follows exactly the schedule the swarm uses (global batch -> microbatches, gradient = mean over
microbatches of each microbatch's mean token loss, one optimizer step per part), with dropout seeded
per (seed, iteration, microbatch, stage). The swarm's parity test compares against it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from models.checkpoint import full_state_dict
from models.data import DataStream, open_source
from models.randomness import EMBED_STAGE, seeded
from models.staged import HolderPart, StageModule, build_holder, build_stage
from models.tokenizer import load_tokenizer
from swarm.averaging.accumulate import GradientAccumulator
from swarm.config import ConfigError, TrainConfig
from swarm.recovery.checkpoints import load_into, part_key, write_checkpoint
from swarm.trainer.optim import make_optimizer


@dataclass
class IterationMetrics:
    iteration: int
    loss: float
    tokens: int
    seconds: float
    microbatches: int

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_json(self) -> dict:
        return {**self.__dict__, "tokens_per_s": round(self.tokens_per_s, 2)}


class LocalTrainer:
    """Holds the holder part, every stage and their optimizers in one process."""

    def __init__(self, cfg: TrainConfig):
        self.cfg = cfg
        self.config, self.layout, self.schedule = cfg.validate()
        tokenizer = load_tokenizer(cfg.tokenizer)
        if tokenizer.vocab_size > self.config.vocab_size:
            raise ConfigError(
                f"tokenizer has {tokenizer.vocab_size} tokens, "
                f"the model's vocabulary only {self.config.vocab_size}"
            )
        self.stream = DataStream(open_source(cfg.data, tokenizer, cfg.text_field), cfg.seq_len, cfg.seed)
        device = torch.device(cfg.device)
        self.holder: HolderPart = build_holder(self.config, cfg.seed, device=device)
        self.stages: list[StageModule] = [
            build_stage(self.config, s, cfg.seed, device=device) for s in self.layout
        ]
        self.parts = [self.holder, *self.stages]
        self.optimizers = [
            make_optimizer(p, cfg.optimizer, cfg.lr, cfg.weight_decay, tuple(cfg.betas)) for p in self.parts
        ]
        self.gradients = [GradientAccumulator(p, exact=cfg.exact_gradients) for p in self.parts]
        self.iteration = 0

    def microbatch_hidden(self, iteration: int, microbatch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Forward one microbatch through holder -> stages, as the swarm routes it: (ids, last hidden)."""
        device = self.cfg.device
        ids = self.stream.microbatch(iteration, microbatch, self.schedule).to(device)
        with seeded(self.cfg.seed, iteration, microbatch, EMBED_STAGE, device):
            hidden = self.holder.embed_tokens(ids)
        for spec, stage in zip(self.layout, self.stages):
            with seeded(self.cfg.seed, iteration, microbatch, spec.index, device):
                hidden = stage(hidden)
        return ids, hidden

    def microbatch_backward(self, iteration: int, microbatch: int, count: int) -> float:
        """Forward and backward of one microbatch in the swarm's two phases: the loss backward at the
        holder (the LM head, and with tied weights its share of the embedding gradient), then the
        backward through the stages to the embeddings. Each phase's gradients are collected on their
        own, as the holder does, so tied embeddings sum the same float32 terms in the same way."""
        ids, hidden = self.microbatch_hidden(iteration, microbatch)
        last = hidden.detach().requires_grad_(True)
        loss = self.holder.loss(last, ids)
        (loss / count).backward()  # the holder's scaling, to the bit
        self.gradients[0].collect()
        hidden.backward(last.grad)
        for gradients in self.gradients:
            gradients.collect()
        return loss.item()

    def step(self) -> IterationMetrics:
        """One iteration: every microbatch forward and backward, then one optimizer step."""
        start = time.perf_counter()
        for part in self.parts:
            part.train()
        for opt in self.optimizers:
            opt.zero_grad(set_to_none=True)
        count = self.schedule.microbatches
        total = 0.0
        for m in range(count):
            total += self.microbatch_backward(self.iteration, m, count)
        for gradients, opt in zip(self.gradients, self.optimizers):
            gradients.apply()
            opt.step()
        metrics = IterationMetrics(
            iteration=self.iteration,
            loss=total / count,
            tokens=self.schedule.batch_size * self.cfg.seq_len,
            seconds=time.perf_counter() - start,
            microbatches=count,
        )
        self.iteration += 1
        return metrics

    def run(self, iterations: int) -> Iterator[IterationMetrics]:
        for _ in range(iterations):
            yield self.step()

    def save(self, directory: str | Path) -> Path:
        """A full checkpoint that `AutoModelForCausalLM.from_pretrained` loads, plus optimizer state."""
        extra = {
            "iteration": self.iteration,
            "train_config": self.cfg.to_dict(),
            "data_id": self.stream.source.id,
        }
        optimizers = {part_key(i - 1): opt.state_dict() for i, opt in enumerate(self.optimizers)}
        return write_checkpoint(directory, self.config, full_state_dict(self.parts), optimizers, extra)

    def resume(self, directory: str | Path) -> int:
        """Continue from a checkpoint: parameters, optimizer states and the data position."""
        for index, (part, opt) in enumerate(zip(self.parts, self.optimizers)):
            self.iteration = load_into(directory, part, opt, index - 1)
        return self.iteration


def train_local(
    cfg: TrainConfig | LocalTrainer,
    save: str | None = None,
    metrics_out: str | None = None,
    on_iteration: Callable[[IterationMetrics], None] | None = None,
    checkpoint_every: int = 0,
) -> list[IterationMetrics]:
    """Train until iteration `cfg.iterations`, writing JSON-lines metrics and checkpoints."""
    trainer = cfg if isinstance(cfg, LocalTrainer) else LocalTrainer(cfg)
    cfg = trainer.cfg
    history = []
    sink = open(metrics_out, "w") if metrics_out else None
    try:
        for metrics in trainer.run(max(0, cfg.iterations - trainer.iteration)):
            history.append(metrics)
            if save and checkpoint_every and trainer.iteration % checkpoint_every == 0:
                trainer.save(save)
            if sink:
                sink.write(json.dumps(metrics.to_json()) + "\n")
                sink.flush()
            if on_iteration:
                on_iteration(metrics)
    finally:
        if sink:
            sink.close()
    if save:
        trainer.save(save)
    return history
