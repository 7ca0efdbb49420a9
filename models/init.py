"""Deterministic initialisation by parameter name.

Every parameter is drawn from its own generator seeded by (seed, full-model parameter name), so any
process can initialise any stage alone and get bit-identical values, equal to the whole model
initialised with the same seed (`build_full_model`). The distributions follow transformers'
`_init_weights` for these families: N(0, initializer_range) for weights, GPT-2's residual
projections scaled by 1/sqrt(2 * n_layer), zero biases, unit norms.
"""

from __future__ import annotations

import hashlib
import math

import torch
from torch import nn
from transformers import PretrainedConfig


def name_seed(seed: int, name: str) -> int:
    digest = hashlib.blake2b(f"{seed}:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def _is_norm(name: str) -> bool:
    leaf = name.rsplit(".", 2)[-2] if name.count(".") else name
    return "norm" in leaf or leaf.startswith("ln_")


@torch.no_grad()
def init_parameter(param: torch.Tensor, full_name: str, config: PretrainedConfig, seed: int) -> None:
    """Fill one parameter in place according to its full-model name."""
    if full_name.endswith("bias"):
        param.zero_()
        return
    if _is_norm(full_name):
        param.fill_(1.0)
        return
    std = config.initializer_range
    if config.model_type == "gpt2" and full_name.endswith("c_proj.weight"):
        std = std / math.sqrt(2 * config.n_layer)
    generator = torch.Generator(device="cpu").manual_seed(name_seed(seed, full_name))
    values = torch.randn(param.shape, generator=generator, dtype=torch.float32) * std
    param.copy_(values.to(param.dtype))


def init_module(module: nn.Module, to_full_name, config: PretrainedConfig, seed: int) -> None:
    """Initialise every parameter of `module`; `to_full_name` maps a local name to the full one."""
    for local, param in module.named_parameters():
        init_parameter(param, to_full_name(local), config, seed)
