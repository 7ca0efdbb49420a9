"""Checkpoints of a run: a transformers-loadable model plus what it takes to continue exactly.

`model.safetensors` + `config.json` (loads with `AutoModelForCausalLM.from_pretrained`),
`optimizer.pt` (one optimizer state per part: "holder", "stage0", ...) and `swarm_state.json`
(iteration = the data position, since the data stream is a function of the iteration, and the run's
options). Writes go to a temporary folder renamed into place, so a crash never leaves half a
checkpoint where the last good one was.
"""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import torch

from models.checkpoint import load_part_state, save_checkpoint

OPTIMIZER = "optimizer.pt"
STATE = "swarm_state.json"


def part_key(part: int) -> str:
    return "holder" if part == -1 else f"stage{part}"


def write_checkpoint(directory: str | Path, config, full_state: dict, optimizers: dict, extra: dict) -> Path:
    """Atomically replace `directory` with a new checkpoint."""
    final = Path(directory)
    tmp = final.with_name(final.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    save_checkpoint(tmp, config, full_state, extra)
    torch.save(optimizers, tmp / OPTIMIZER)
    old = final.with_name(final.name + ".old")
    shutil.rmtree(old, ignore_errors=True)
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)
    return final


def read_progress(directory: str | Path) -> dict:
    path = Path(directory) / STATE
    if not path.exists():
        raise ValueError(f"{directory} is not a swarm checkpoint (no {STATE})")
    return json.loads(path.read_text())


def load_into(directory: str | Path, module: torch.nn.Module, optimizer, part: int) -> int:
    """Load one part's parameters and optimizer state; returns the checkpoint's iteration."""
    module.load_state_dict(load_part_state(directory, module), strict=True)
    optimizers = torch.load(Path(directory) / OPTIMIZER, map_location="cpu", weights_only=True)
    if part_key(part) not in optimizers:
        raise ValueError(f"{directory} holds no optimizer state for {part_key(part)}")
    optimizer.load_state_dict(optimizers[part_key(part)])
    return int(read_progress(directory)["iteration"])


def part_state_blob(directory: str | Path, module: torch.nn.Module, part: int) -> tuple[int, bytes]:
    """One part's state from a checkpoint, in the `state` RPC's format (for a restoring peer)."""
    optimizers = torch.load(Path(directory) / OPTIMIZER, map_location="cpu", weights_only=True)
    iteration = int(read_progress(directory)["iteration"])
    state = {"module": load_part_state(directory, module), "optimizer": optimizers[part_key(part)],
             "iteration": iteration}  # fmt: skip
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return iteration, buffer.getvalue()
