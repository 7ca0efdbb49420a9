"""Full checkpoints in transformers' format, assembled from stage and holder state dicts.

Written directly as safetensors + config.json (what `save_pretrained` writes), so the initiator never
builds a second copy of the model; read back per stage with `safe_open`, so a volunteer loads only
its own tensors.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file
from transformers import PretrainedConfig

from models.presets import ModelConfigError, load_config

WEIGHTS = "model.safetensors"


def full_state_dict(parts: Iterable[torch.nn.Module]) -> dict[str, torch.Tensor]:
    """Merge holder/stage modules (each with `full_name`) into one full-model state dict."""
    state: dict[str, torch.Tensor] = {}
    for part in parts:
        for local, tensor in part.state_dict().items():
            name = part.full_name(local)
            if name in state:
                raise ValueError(f"parameter {name} is held by two parts")
            state[name] = tensor.detach().to("cpu").contiguous()
    return state


def save_checkpoint(
    directory: str | Path, config: PretrainedConfig, state: dict[str, torch.Tensor], extra: dict | None = None
) -> Path:
    """Write `config.json` and `model.safetensors` (plus `swarm_state.json` with `extra`)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(directory)
    save_file(state, str(directory / WEIGHTS), metadata={"format": "pt"})
    if extra is not None:
        (directory / "swarm_state.json").write_text(json.dumps(extra, indent=2))
    return directory


def load_part_state(directory: str | Path, part: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Read only the tensors of `part` (a stage or the holder) from a checkpoint directory."""
    path = Path(directory) / WEIGHTS
    if not path.exists():
        raise ModelConfigError(f"{directory} holds no {WEIGHTS}")
    wanted = {part.full_name(local): local for local in part.state_dict()}
    state: dict[str, torch.Tensor] = {}
    with safe_open(str(path), framework="pt") as f:
        keys = set(f.keys())
        for full, local in wanted.items():
            if full not in keys:
                raise ModelConfigError(f"{path} lacks parameter {full}")
            state[local] = f.get_tensor(full)
    return state


def load_part(directory: str | Path, part: torch.nn.Module) -> torch.nn.Module:
    """Load a part's parameters from a checkpoint in place (shapes checked by torch)."""
    part.load_state_dict(load_part_state(directory, part), strict=True)
    return part


def checkpoint_config(directory: str | Path) -> PretrainedConfig:
    return load_config(str(directory))
