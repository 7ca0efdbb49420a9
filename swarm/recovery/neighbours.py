"""Rebuild a lost stage from its neighbouring stages' weights, as CheckFree does (pure).

When every replica of a stage is gone and no checkpoint is recent enough, the stage's blocks are
set to the average of the corresponding blocks of the stage before and the stage after it (a first
or last stage copies its only neighbour). Neighbouring transformer blocks compute similar functions
(residual streams change slowly with depth), so this starts far closer to the lost weights than a
fresh initialisation, with no checkpoint traffic; the optimizer state starts empty. It costs some
loss for a while: `swarm bench recovery` measures how much against checkpoint restore.

CheckFree weighs the two neighbours by their recent gradient norms; we take the plain mean, since a
joining peer only has the neighbours' weights (their gradients are gone with the iteration).
Stages may hold different numbers of blocks: block r of n maps to block round(r * (m - 1) / (n - 1))
of a neighbour with m blocks, so first maps to first and last to last.
"""

from __future__ import annotations

import re

import torch

BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")


def _blocks(state: dict[str, torch.Tensor]) -> dict[int, dict[str, torch.Tensor]]:
    out: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in state.items():
        found = BLOCK.match(name)
        if found:
            out.setdefault(int(found.group(1)), {})[found.group(2)] = tensor
    return out


def _source_block(r: int, n: int, m: int) -> int:
    return 0 if n <= 1 or m <= 1 else round(r * (m - 1) / (n - 1))


def rebuild_from_neighbours(
    template: dict[str, torch.Tensor],
    before: dict[str, torch.Tensor] | None,
    after: dict[str, torch.Tensor] | None,
) -> dict[str, torch.Tensor]:
    """A state dict shaped like `template` (the lost stage's own) from its neighbours' state dicts."""
    neighbours = [_blocks(s) for s in (before, after) if s is not None]
    if not neighbours:
        raise ValueError("no neighbouring stage is alive: the stage can only come from a checkpoint")
    mine = _blocks(template)
    n = len(mine)
    out: dict[str, torch.Tensor] = {}
    for name, tensor in template.items():
        found = BLOCK.match(name)
        if not found:
            raise ValueError(f"stage parameter {name!r} is not inside a block")
        r, rest = int(found.group(1)), found.group(2)
        sources = []
        for blocks in neighbours:
            source = blocks.get(_source_block(r, n, len(blocks)), {}).get(rest)
            if source is None or source.shape != tensor.shape:
                raise ValueError(f"neighbouring stage has no {rest!r} of shape {tuple(tensor.shape)}")
            sources.append(source.to(torch.float32))
        out[name] = (sum(sources) / len(sources)).to(tensor.dtype)
    return out
