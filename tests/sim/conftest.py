"""Small scenarios that run in well under a second each."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from swarm.sim.scenario import scenario_from_dict  # noqa: E402

MIX = {"A100-80GB": 0.3, "RTX-4090": 0.4, "T4": 0.3}


def small(**over):
    raw = {
        "name": "small",
        "model": "gpt-500m",
        "stages": 4,
        "peers": {"count": 24, "regions": ["Iowa", "Germany", "Japan", "Oregon"], "gpus": MIX},
        "holders": {"regions": ["Iowa", "Germany"]},
        "training": {"iterations": 6, "global_batch": 24},
        "seed": 3,
    }
    raw.update(over)
    return scenario_from_dict(raw)


@pytest.fixture
def churny():
    """High churn on a small swarm: crashes hit forward and backward passes, stages may empty."""
    return small(
        name="churny",
        peers={"count": 12, "regions": ["Iowa", "Germany"], "gpus": MIX},
        churn={"failure_rate_per_hour": 20.0, "join_rate_per_hour": 20.0},
        training={"iterations": 8, "global_batch": 24},
        seed=5,  # crashes that hit forward and backward passes and empty a stage (stalls)
    )
