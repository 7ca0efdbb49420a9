"""Seeded randomness per (seed, iteration, microbatch, stage).

Dropout masks then never depend on which process computed a microbatch, which lets the swarm
reproduce the single-process baseline exactly (parity) and a re-executed hop redo the same work.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterator

import torch

EMBED_STAGE = -1  # the holder's embedding runs "before" stage 0


def dropout_seed(seed: int, iteration: int, microbatch: int, stage: int) -> int:
    digest = hashlib.blake2b(f"{seed}/{iteration}/{microbatch}/{stage}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


@contextlib.contextmanager
def seeded(
    seed: int, iteration: int, microbatch: int, stage: int, device: torch.device | str = "cpu"
) -> Iterator[None]:
    """Run the body with torch's RNG seeded for this hop, restoring the caller's RNG afterwards."""
    device = torch.device(device)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices, device_type=device.type if devices else "cuda"):
        torch.manual_seed(dropout_seed(seed, iteration, microbatch, stage))
        yield
