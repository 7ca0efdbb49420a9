"""Stage and holder modules: the pieces of one model that different peers run.

A stage is hidden states in, hidden states out (positions and rotary embeddings computed inside).
The holder part embeds token ids and turns the last stage's output into logits and the loss. Each
piece creates and initialises only its own parameters: a volunteer never materialises the whole
model. Their composition equals transformers' full model (tests/models prove it).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AutoModelForCausalLM, PretrainedConfig
from transformers.loss.loss_utils import ForCausalLMLoss
from transformers.masking_utils import create_causal_mask

from models.family import Family, family_of
from models.init import init_module
from models.partition import StageSpec


def _materialise(module: nn.Module, device: torch.device | str, dtype: torch.dtype) -> nn.Module:
    """Give a module built on the meta device real (uninitialised) storage."""
    module = module.to_empty(device=device)
    return module.to(dtype=dtype)


class StageModule(nn.Module):
    """Transformer blocks `spec.start .. spec.end - 1` of one model."""

    def __init__(self, config: PretrainedConfig, spec: StageSpec):
        super().__init__()
        self.config, self.spec = config, spec
        self.family: Family = family_of(config)
        self.blocks = nn.ModuleList(self.family.make_block(config, i) for i in spec.blocks)
        self.rotary = self.family.make_rotary(config)

    def full_name(self, local: str) -> str:
        """Map `blocks.k.rest` to the full model's `prefix{start + k}.rest`."""
        _, k, rest = local.split(".", 2)
        return f"{self.family.block_prefix}{self.spec.start + int(k)}.{rest}"

    def local_name(self, full: str) -> str | None:
        prefix = self.family.block_prefix
        if not full.startswith(prefix):
            return None
        index, rest = full[len(prefix) :].split(".", 1)
        if int(index) not in self.spec.blocks:
            return None
        return f"blocks.{int(index) - self.spec.start}.{rest}"

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(hidden.shape[1], device=hidden.device).unsqueeze(0)
        mask = create_causal_mask(
            config=self.config, inputs_embeds=hidden, attention_mask=None, cache=None, position_ids=positions
        )
        extra = {}
        if self.rotary is not None:
            extra["position_embeddings"] = self.rotary(hidden, position_ids=positions)
        for block in self.blocks:
            hidden = block(hidden, attention_mask=mask, position_ids=positions, **extra)
        return hidden


class HolderPart(nn.Module):
    """Embeddings, final norm and LM head: what a data holder runs around the stages."""

    def __init__(self, config: PretrainedConfig):
        super().__init__()
        self.config = config
        self.family = family_of(config)
        self.tied = bool(getattr(config, "tie_word_embeddings", False))
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.position = (
            nn.Embedding(config.n_positions, config.hidden_size) if self.family.position_name else None
        )
        self.drop = nn.Dropout(getattr(config, "embd_pdrop", 0.0))
        self.norm = self.family.make_norm(config)
        self.lm_head = None if self.tied else nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def full_name(self, local: str) -> str:
        module, rest = local.split(".", 1)
        names = {
            "embed": self.family.embed_name,
            "position": self.family.position_name,
            "norm": self.family.norm_name,
            "lm_head": "lm_head",
        }
        return f"{names[module]}.{rest}"

    def local_name(self, full: str) -> str | None:
        for local in self.state_dict():
            if self.full_name(local) == full:
                return local
        return None

    def embed_tokens(self, input_ids: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(input_ids)
        if self.position is not None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0)
            hidden = hidden + self.position(positions)
        return self.drop(hidden)

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        hidden = self.norm(hidden)
        weight = self.embed.weight if self.tied else self.lm_head.weight
        return nn.functional.linear(hidden, weight)

    def loss(self, hidden: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """Mean next-token loss of one microbatch, exactly as transformers computes it."""
        return ForCausalLMLoss(self.logits(hidden), labels, self.config.vocab_size)


def build_stage(
    config: PretrainedConfig,
    spec: StageSpec,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> StageModule:
    """One stage, its parameters initialised deterministically from (config, seed)."""
    with torch.device("meta"):
        stage = StageModule(config, spec)
    rotary = stage.rotary
    stage.rotary = None
    stage = _materialise(stage, device, dtype)
    if rotary is not None:  # its buffers are computed at construction, so build it for real
        stage.rotary = family_of(config).make_rotary(config).to(device)
    init_module(stage, stage.full_name, config, seed)
    return stage


def build_holder(
    config: PretrainedConfig,
    seed: int = 0,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> HolderPart:
    """The holder part, initialised deterministically from (config, seed)."""
    with torch.device("meta"):
        holder = HolderPart(config)
    holder = _materialise(holder, device, dtype)
    init_module(holder, holder.full_name, config, seed)
    return holder


def build_full_model(config: PretrainedConfig, seed: int = 0) -> nn.Module:
    """transformers' own full model with the same deterministic initialisation (the reference)."""
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    named = dict(model.named_parameters())
    from models.init import init_parameter

    for name, param in named.items():
        init_parameter(param, name, config, seed)
    return model
