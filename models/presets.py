"""Model configurations: named presets, a transformers config.json, or a local checkpoint directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported where a config is built: the CLI and the simulator start without it)
    from transformers import GPT2Config, LlamaConfig, PretrainedConfig

# Byte-level tokenizer: 256 byte values + end-of-text; rounded up so shapes stay friendly.
BYTE_VOCAB = 264
SUPPORTED_TYPES = ("gpt2", "llama")


def _gpt2(n_layer: int, n_embd: int, n_head: int, vocab: int, n_positions: int = 1024) -> GPT2Config:
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=vocab,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        bos_token_id=256,
        eos_token_id=256,
    )


def _llama(
    layers: int, hidden: int, heads: int, kv_heads: int, inter: int, vocab: int, tie: bool = False
) -> LlamaConfig:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        max_position_embeddings=2048,
        tie_word_embeddings=tie,
        bos_token_id=256,
        eos_token_id=256,
    )


# Tiny presets are for tests and the CPU demo; the larger ones are realistic for volunteer GPUs.
PRESETS: dict[str, callable] = {
    "gpt2-tiny": lambda: _gpt2(4, 64, 4, BYTE_VOCAB, n_positions=512),
    "llama-tiny": lambda: _llama(4, 64, 4, 2, 176, BYTE_VOCAB),
    "gpt2-small-cpu": lambda: _gpt2(8, 256, 8, BYTE_VOCAB, n_positions=1024),
    "llama-small-cpu": lambda: _llama(8, 256, 8, 4, 688, BYTE_VOCAB),
    "gpt2-124m": lambda: _gpt2(12, 768, 12, 50257),
    "gpt2-355m": lambda: _gpt2(24, 1024, 16, 50257),
    "llama-125m": lambda: _llama(12, 768, 12, 4, 2048, 32000, tie=True),
    "llama-500m": lambda: _llama(24, 1152, 16, 4, 3072, 32000, tie=True),
    "llama-1b": lambda: _llama(16, 2048, 32, 8, 8192, 32000, tie=True),
}


class ModelConfigError(ValueError):
    """A model spec that names no preset, or a config/checkpoint that cannot be used."""


def load_config(spec: str) -> PretrainedConfig:
    """A preset name, a path to a `config.json`, or a checkpoint directory holding one."""
    if spec in PRESETS:
        config = PRESETS[spec]()
    else:
        path = Path(spec)
        if path.is_dir():
            path = path / "config.json"
        if not path.exists():
            raise ModelConfigError(
                f"unknown model {spec!r}: not a preset ({', '.join(PRESETS)}) and no such config file"
            )
        try:
            raw = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ModelConfigError(f"cannot read model config {path}: {exc}") from None
        if not isinstance(raw, dict) or raw.get("model_type") not in SUPPORTED_TYPES:
            kind = raw.get("model_type") if isinstance(raw, dict) else None
            raise ModelConfigError(
                f"{path}: model_type {kind!r} is not supported (use one of {', '.join(SUPPORTED_TYPES)})"
            )
        from transformers import AutoConfig

        try:
            config = AutoConfig.for_model(**raw)
        except (TypeError, ValueError) as exc:
            raise ModelConfigError(f"{path}: invalid config: {exc}") from None
    if config.num_hidden_layers < 1:
        raise ModelConfigError("the model needs at least one transformer block")
    config._attn_implementation = "sdpa"
    return config


def config_dict(config: PretrainedConfig) -> dict:
    """A JSON-safe dict (string keys only) that `config_from_dict` turns back into the same config."""
    return json.loads(config.to_json_string(use_diff=False))


def config_from_dict(raw: dict) -> PretrainedConfig:
    from transformers import AutoConfig

    config = AutoConfig.for_model(**raw)
    config._attn_implementation = "sdpa"
    return config
