"""Model presets and the GPU table: where activation bytes, stage compute times and memory come from.

The figures are first-order estimates, good enough to rank routers, not to predict a real run:
- FLOPs of one layer for one microbatch, forward + backward: 6 * params_per_layer * tokens (the
  usual 2 for forward, 4 for backward) plus the attention-score term 12 * seq_len * hidden * tokens
  (Megatron's formula, no causal halving).
- Compute time = FLOPs / (peak dense bf16 TFLOPS * MFU). MFU defaults to 0.4: a well-tuned
  single-GPU stage with a microbatch of a few thousand tokens reaches 35-50% of peak; 0.4 is a
  round middle. A scenario can override it.
- Forward is one third of a hop's compute, backward two thirds (the 2:4 split above).
- Activations crossing a stage boundary: microbatch * seq_len * hidden values in bf16.
- Memory decides which stages a GPU can serve: the stage's state plus at least one microbatch's
  stash must fit (`stage_slots` >= 1). A peer's capacity in the flow is not memory but what a live
  peer publishes: its measured throughput, 1 / compute time (see Simulation.spec).
- Memory a stage needs: 16 bytes per parameter (bf16 weights and grads, fp32 master weights and
  Adam moments) plus 34 * seq_len * microbatch * hidden bytes of stashed activations per layer for
  one microbatch in flight (Korthikanti et al., flash attention so no seq^2 term).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from typing import Any

BF16_BYTES = 2
STATE_BYTES_PER_PARAM = 16
ACT_STASH_BYTES_PER_TOKEN_HIDDEN = 34
DEFAULT_MFU = 0.4
MAX_IN_FLIGHT = 16  # microbatches a stage peer keeps stashed at most, memory permitting
FORWARD_SHARE = 1.0 / 3.0


class HardwareError(ValueError):
    """Unknown GPU or model preset, or impossible model dimensions."""


@dataclass(frozen=True)
class Gpu:
    """One GPU type: peak dense bf16/fp16 TFLOPS and memory (GB)."""

    name: str
    tflops: float
    memory_gb: float


@lru_cache(maxsize=1)
def gpu_table() -> dict[str, Gpu]:
    """The GPU table shipped in swarm/data/gpus.json."""
    raw = json.loads(resources.files("swarm.data").joinpath("gpus.json").read_text())
    return {name: Gpu(name, float(v["tflops"]), float(v["memory_gb"])) for name, v in raw["gpus"].items()}


def gpu(name: str) -> Gpu:
    table = gpu_table()
    if name not in table:
        raise HardwareError(f"unknown GPU {name!r} (known: {', '.join(sorted(table))})")
    return table[name]


@dataclass(frozen=True)
class ModelSpec:
    """A transformer's shape and the microbatch it is trained with."""

    name: str
    arch: str  # "gpt" (4h MLP, tied embeddings) or "llama" (SwiGLU MLP, untied head)
    layers: int
    hidden: int
    ffn: int
    vocab: int
    seq_len: int
    microbatch: int  # sequences per microbatch

    @property
    def tokens(self) -> int:
        return self.seq_len * self.microbatch

    @property
    def params_per_layer(self) -> int:
        h = self.hidden
        if self.arch == "gpt":
            return 4 * h * h + 2 * h * self.ffn + 9 * h + 2 * self.ffn  # attn + MLP + biases/norms
        return 4 * h * h + 3 * h * self.ffn + 2 * h  # llama: no biases, two RMSNorms

    @property
    def embedding_params(self) -> int:
        tied = 1 if self.arch == "gpt" else 2
        return tied * self.vocab * self.hidden

    @property
    def total_params(self) -> int:
        return self.layers * self.params_per_layer + self.embedding_params

    @property
    def activation_bytes(self) -> float:
        """Bytes of one microbatch's hidden states crossing a stage boundary (bf16)."""
        return float(self.tokens * self.hidden * BF16_BYTES)

    @property
    def layer_flops(self) -> float:
        """Forward + backward FLOPs of one layer for one microbatch."""
        return 6.0 * self.params_per_layer * self.tokens + 12.0 * self.seq_len * self.hidden * self.tokens

    @property
    def head_flops(self) -> float:
        """Forward + backward FLOPs of the LM head on a data holder (the embedding lookup is free)."""
        return 6.0 * self.vocab * self.hidden * self.tokens

    def stage_layers(self, stages: int) -> list[int]:
        """Contiguous layer counts per stage, as even as possible (the first stages get the extra)."""
        if not 1 <= stages <= self.layers:
            raise HardwareError(f"{self.name}: cannot cut {self.layers} layers into {stages} stages")
        base, extra = divmod(self.layers, stages)
        return [base + (1 if s < extra else 0) for s in range(stages)]

    def stage_param_bytes(self, n_layers: int) -> float:
        """bf16 bytes of a stage's parameters: what a replica averages and a joining peer downloads."""
        return float(n_layers * self.params_per_layer * BF16_BYTES)

    def stage_memory_bytes(self, n_layers: int) -> float:
        """Memory a peer needs to serve a stage of `n_layers` with one microbatch in flight."""
        state = n_layers * self.params_per_layer * STATE_BYTES_PER_PARAM
        stash = n_layers * ACT_STASH_BYTES_PER_TOKEN_HIDDEN * self.tokens * self.hidden
        return float(state + stash)

    def stage_slots(self, n_layers: int, gpu_: Gpu) -> int:
        """Microbatches a peer can hold in flight on a stage: memory left after the stage's state,
        over one microbatch's stash, at most MAX_IN_FLIGHT (a schedule bounds in-flight work; more
        would only queue at a GPU that runs one microbatch at a time). 0: the stage does not fit."""
        state = n_layers * self.params_per_layer * STATE_BYTES_PER_PARAM
        stash = n_layers * ACT_STASH_BYTES_PER_TOKEN_HIDDEN * self.tokens * self.hidden
        return min(max(int((gpu_.memory_gb * 1e9 - state) // stash), 0), MAX_IN_FLIGHT)

    def compute_s(self, n_layers: int, gpu_: Gpu, mfu: float) -> float:
        """Seconds of forward + backward of `n_layers` layers for one microbatch on `gpu_`."""
        return n_layers * self.layer_flops / (gpu_.tflops * 1e12 * mfu)

    def holder_compute_s(self, gpu_: Gpu, mfu: float) -> float:
        return self.head_flops / (gpu_.tflops * 1e12 * mfu)


PRESETS: dict[str, ModelSpec] = {
    # GPT-2-like: 24 x 1280 is GPT-2 large's width at two thirds of its depth (~0.54B params).
    "gpt-500m": ModelSpec("gpt-500m", "gpt", 24, 1280, 5120, 50257, 1024, 4),
    # GPT-2 XL (~1.56B params).
    "gpt-1.5b": ModelSpec("gpt-1.5b", "gpt", 48, 1600, 6400, 50257, 1024, 4),
    # Llama-like, 32k vocabulary, SwiGLU, 2k context (~0.55B and ~1.44B params).
    "llama-500m": ModelSpec("llama-500m", "llama", 16, 1536, 4096, 32000, 2048, 2),
    "llama-1.5b": ModelSpec("llama-1.5b", "llama", 24, 2048, 6144, 32000, 2048, 2),
}


def model_from_raw(raw: Any) -> ModelSpec:
    """A preset name or an object with the ModelSpec fields (name optional, ffn defaults to 4h)."""
    if isinstance(raw, str):
        if raw not in PRESETS:
            raise HardwareError(f"unknown model preset {raw!r} (known: {', '.join(PRESETS)})")
        return PRESETS[raw]
    if not isinstance(raw, dict):
        raise HardwareError("'model' must be a preset name or an object")
    arch = raw.get("arch", "gpt")
    if arch not in ("gpt", "llama"):
        raise HardwareError(f"model arch must be 'gpt' or 'llama', got {arch!r}")
    fields = {}
    for key in ("layers", "hidden", "vocab", "seq_len", "microbatch"):
        value = raw.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise HardwareError(f"model: {key!r} must be a positive integer, got {value!r}")
        fields[key] = value
    ffn = raw.get("ffn", 4 * fields["hidden"])
    if isinstance(ffn, bool) or not isinstance(ffn, int) or ffn < 1:
        raise HardwareError(f"model: 'ffn' must be a positive integer, got {ffn!r}")
    return ModelSpec(str(raw.get("name", "custom")), arch, ffn=ffn, **fields)
