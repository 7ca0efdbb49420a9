"""What losing a whole stage costs in loss, by recovery method (the figures behind the README note).

The same seeded run four times on the single-process baseline: without a fault; with stage `lost`
restored at iteration `at` from a checkpoint taken `age` iterations earlier (weights and optimizer
state roll back; the rest of the model does not); rebuilt from its neighbours (CheckFree); and
re-initialised from the seed. Everything else is identical, so the loss gaps are the methods' cost.
Losses are measured on fixed held-out microbatches (far beyond the training positions of the data
stream), in eval mode, so they are not the noise of each iteration's own batch.
"""

from __future__ import annotations

import copy
from dataclasses import replace

import torch

from models.staged import build_stage
from swarm.config import TrainConfig
from swarm.recovery.neighbours import rebuild_from_neighbours
from swarm.trainer.local import LocalTrainer
from swarm.trainer.optim import make_optimizer

METHODS = ("none", "checkpoint", "neighbours", "reinit")


def _fresh_optimizer(trainer: LocalTrainer, part: int):
    cfg = trainer.cfg
    return make_optimizer(trainer.parts[part], cfg.optimizer, cfg.lr, cfg.weight_decay, tuple(cfg.betas))


EVAL_FROM = 10**6  # held-out data: iterations the run never reaches
CHECKS = (0, 1, 5, 10, 20)  # iterations after the fault at which the held-out loss is taken


@torch.no_grad()
def held_out_loss(trainer: LocalTrainer, batches: int = 4) -> float:
    for part in trainer.parts:
        part.eval()
    total = 0.0
    for m in range(batches):
        ids, hidden = trainer.microbatch_hidden(EVAL_FROM, m)
        total += trainer.holder.loss(hidden, ids).item()
    return total / batches


def run_with_fault(cfg: TrainConfig, method: str, lost: int, at: int, age: int) -> dict[int, float]:
    """Held-out losses (by iteration) of one run in which stage `lost` is recovered by `method` at `at`."""
    trainer = LocalTrainer(cfg)
    part = lost + 1  # parts = [holder, stage 0, stage 1, ...]
    saved = None
    losses = {}
    for iteration in range(cfg.iterations + 1):
        if iteration == at:
            losses[-1] = held_out_loss(trainer)  # just before the fault
        if iteration == at - age:
            saved = (copy.deepcopy(trainer.parts[part].state_dict()),
                     copy.deepcopy(trainer.optimizers[part].state_dict()))  # fmt: skip
        if iteration == at and method != "none":
            module = trainer.parts[part]
            if method == "checkpoint":
                module.load_state_dict(saved[0])
                trainer.optimizers[part].load_state_dict(saved[1])
            else:
                if method == "neighbours":
                    states = [trainer.parts[p].state_dict() if 1 <= p <= len(trainer.stages) else None
                              for p in (part - 1, part + 1)]  # fmt: skip
                    state = rebuild_from_neighbours(module.state_dict(), *states)
                else:
                    state = build_stage(trainer.config, trainer.layout[lost], cfg.seed + 1).state_dict()
                module.load_state_dict(state)
                trainer.optimizers[part] = _fresh_optimizer(trainer, part)
        if iteration - at in CHECKS or iteration == cfg.iterations:
            losses[iteration] = held_out_loss(trainer)
        if iteration < cfg.iterations:
            trainer.step()
    return losses


def recovery_cost(cfg: TrainConfig, lost: int, at: int, age: int) -> dict:
    """Held-out loss before the fault, right after recovery, some iterations later and at the end."""
    runs = {m: run_with_fault(replace(cfg), m, lost, at, age) for m in METHODS}
    base = runs["none"]
    out: dict = {"model": cfg.model, "stages": cfg.stages, "lost_stage": lost, "fault_at": at,
                 "checkpoint_age": age, "iterations": cfg.iterations,
                 "loss_before_fault": round(base[-1], 4)}  # fmt: skip
    for method, losses in runs.items():
        out[method] = {f"loss_after_{k}": round(losses[at + k], 4) for k in CHECKS if at + k < cfg.iterations}
        out[method]["loss_end"] = round(losses[cfg.iterations], 4)
        out[method]["loss_end_ratio"] = round(losses[cfg.iterations] / base[cfg.iterations], 4)
    return out
