"""The optimizer every part (holder, stage) uses: the same in the baseline and in the swarm.

AdamW acts per parameter, so one optimizer per part is exactly one optimizer over the whole model.
"""

from __future__ import annotations

import torch
from torch import nn


def param_groups(module: nn.Module, weight_decay: float) -> list[dict]:
    """Decay matrices; never biases, norms or other vectors (the usual LLM recipe)."""
    decay, no_decay = [], []
    for _, param in sorted(module.named_parameters(), key=lambda kv: kv[0]):
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def make_optimizer(
    module: nn.Module, kind: str, lr: float, weight_decay: float, betas: tuple[float, float]
) -> torch.optim.Optimizer:
    groups = param_groups(module, weight_decay)
    if kind == "adamw":
        # single-tensor path: the same arithmetic on every peer whatever its torch build chooses
        return torch.optim.AdamW(groups, lr=lr, betas=betas, foreach=False)
    if kind == "adamw8bit":
        import bitsandbytes as bnb

        return bnb.optim.AdamW8bit(groups, lr=lr, betas=betas)
    raise ValueError(f"unknown optimizer {kind!r}")
