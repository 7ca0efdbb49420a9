"""What differs between the GPT-2 and Llama families: block classes and parameter names.

Parameter names are those of transformers' `GPT2LMHeadModel` / `LlamaForCausalLM`, so stage state
dicts assemble into a checkpoint that `AutoModelForCausalLM.from_pretrained` loads.
"""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn
from transformers import PretrainedConfig
from transformers.models.gpt2.modeling_gpt2 import GPT2Block
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding


@dataclass(frozen=True)
class Family:
    model_type: str
    block_prefix: str  # full-model name of block i is f"{block_prefix}{i}."
    embed_name: str
    position_name: str | None
    norm_name: str

    def make_block(self, config: PretrainedConfig, index: int) -> nn.Module:
        if self.model_type == "gpt2":
            return GPT2Block(config, layer_idx=index)
        return LlamaDecoderLayer(config, index)

    def make_norm(self, config: PretrainedConfig) -> nn.Module:
        if self.model_type == "gpt2":
            return nn.LayerNorm(config.hidden_size, eps=config.layer_norm_epsilon)
        return LlamaRMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def make_rotary(self, config: PretrainedConfig) -> nn.Module | None:
        return LlamaRotaryEmbedding(config=config) if self.model_type == "llama" else None


FAMILIES = {
    "gpt2": Family("gpt2", "transformer.h.", "transformer.wte", "transformer.wpe", "transformer.ln_f"),
    "llama": Family("llama", "model.layers.", "model.embed_tokens", None, "model.norm"),
}


def family_of(config: PretrainedConfig) -> Family:
    try:
        return FAMILIES[config.model_type]
    except KeyError:
        raise ValueError(f"model_type {config.model_type!r} is not supported") from None
