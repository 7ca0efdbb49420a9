"""CheckFree-style rebuild of a lost stage from its neighbours (pure)."""

from __future__ import annotations

import pytest
import torch

from models.partition import StageSpec
from models.presets import load_config
from models.staged import build_stage
from swarm.recovery.neighbours import rebuild_from_neighbours


def stage_state(index: int, start: int, end: int, seed: int) -> dict[str, torch.Tensor]:
    return build_stage(load_config("gpt2-tiny"), StageSpec(index, start, end), seed).state_dict()


def test_middle_stage_is_the_mean_of_its_neighbours() -> None:
    before, lost, after = stage_state(0, 0, 1, 1), stage_state(1, 1, 2, 2), stage_state(2, 2, 3, 3)
    rebuilt = rebuild_from_neighbours(lost, before, after)
    assert rebuilt.keys() == lost.keys()
    for name in lost:
        assert torch.allclose(rebuilt[name], (before[name] + after[name]) / 2)


def test_edge_stage_copies_its_only_neighbour_and_block_counts_may_differ() -> None:
    after = stage_state(1, 1, 4, 2)  # three blocks
    lost = stage_state(0, 0, 1, 1)  # one block
    rebuilt = rebuild_from_neighbours(lost, None, after)
    assert all(torch.equal(rebuilt[n], after[n]) for n in lost)  # block 0 <- block 0
    two = stage_state(0, 0, 2, 1)
    rebuilt = rebuild_from_neighbours(two, None, after)
    assert torch.equal(rebuilt["blocks.1.mlp.c_fc.weight"], after["blocks.2.mlp.c_fc.weight"])  # last <- last


def test_no_live_neighbour_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="checkpoint"):
        rebuild_from_neighbours(stage_state(1, 1, 2, 1), None, None)


def test_mismatched_shapes_are_refused() -> None:
    lost = stage_state(1, 1, 2, 1)
    bad = {k: torch.zeros(3) for k in lost}
    with pytest.raises(ValueError, match="shape"):
        rebuild_from_neighbours(lost, bad, None)
