"""Where a lost stage is restored from (pure)."""

from __future__ import annotations

import pytest

from swarm.recovery.policy import restore_source


def test_a_run_that_has_not_trained_starts_from_the_seed() -> None:
    assert restore_source("auto", 0, None, 50, neighbours_alive=True) == "seed"
    assert restore_source("neighbours", 0, None, 50, neighbours_alive=True) == "seed"


def test_auto_prefers_a_recent_checkpoint_and_rebuilds_past_max_age() -> None:
    assert restore_source("auto", 12, 10, 50, neighbours_alive=True) == "checkpoint"
    assert restore_source("auto", 100, 10, 50, neighbours_alive=True) == "neighbours"
    assert restore_source("auto", 100, 10, 50, neighbours_alive=False) == "checkpoint"
    assert restore_source("auto", 5, None, 50, neighbours_alive=True) == "neighbours"


def test_each_method_falls_back_to_the_other() -> None:
    assert restore_source("checkpoint", 5, None, 50, neighbours_alive=True) == "neighbours"
    assert restore_source("neighbours", 5, 4, 50, neighbours_alive=False) == "checkpoint"
    assert restore_source("neighbours", 5, 4, 50, neighbours_alive=True) == "neighbours"
    assert restore_source("checkpoint", 5, None, 50, neighbours_alive=False) == "seed"


def test_unknown_method_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown stage recovery"):
        restore_source("magic", 1, None, 1, True)
