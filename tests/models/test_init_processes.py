"""Two separate processes given (config, seed) build bit-identical stage parameters."""

from __future__ import annotations

import hashlib
import subprocess
import sys

SCRIPT = """
import hashlib, sys
from models.presets import load_config
from models.partition import partition
from models.staged import build_stage, build_holder
config = load_config(sys.argv[1])
digest = hashlib.sha256()
stages = partition(config.num_hidden_layers, 3)
for part in [build_holder(config, 11), *(build_stage(config, s, 11) for s in stages)]:
    for name, tensor in sorted(part.state_dict().items()):
        digest.update(name.encode()); digest.update(tensor.numpy().tobytes())
print(digest.hexdigest())
"""


def _digest(preset: str) -> str:
    out = subprocess.run([sys.executable, "-c", SCRIPT, preset], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_deterministic_init_across_processes() -> None:
    for preset in ("gpt2-tiny", "llama-tiny"):
        first, second = _digest(preset), _digest(preset)
        assert first == second and len(first) == len(hashlib.sha256().hexdigest())
    assert _digest("gpt2-tiny") != _digest("llama-tiny")
