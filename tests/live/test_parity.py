"""The key test: a live swarm trains exactly the model the single-process baseline trains."""

from __future__ import annotations

import json

import pytest
import torch

from tests.live.conftest import TINY, load_weights


def _compare(local_dir, swarm_dir) -> None:
    """rtol 1e-4; the atol covers attention key biases, whose true gradient is exactly zero
    (softmax is shift-invariant): Adam turns their float noise, which depends on the order in which
    microbatch gradients are added, into steps of ~1e-6."""
    a, b = load_weights(local_dir), load_weights(swarm_dir)
    assert set(a) == set(b)
    from models.presets import load_config
    from models.staged import build_full_model

    init = build_full_model(load_config("gpt2-tiny"), seed=5).state_dict()
    assert sum(not torch.equal(a[n], init[n]) for n in a) > 0.9 * len(a)  # it really trained
    for name in sorted(a):
        assert torch.allclose(a[name], b[name], rtol=1e-4, atol=1e-5), name

    assert json.loads((swarm_dir / "swarm_state.json").read_text())["iteration"] == 3


@pytest.mark.parametrize("holders", [1, 2])
def test_swarm_equals_local_baseline(swarm_cli, tmp_path, holders: int) -> None:
    common = [
        "--model",
        "gpt2-tiny",
        "--stages",
        "3",
        "--iterations",
        "3",
        "--seed",
        "5",
        *TINY,
    ]  # dropout 0.1
    local = swarm_cli("train", "--local", *common, "--save", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    live = swarm_cli(
        "train", "--local-swarm", "4", "--holders", str(holders), *common, "--save", str(tmp_path / "swarm"),
        "--metrics-out", str(tmp_path / "m.jsonl"), "--log-dir", str(tmp_path / "logs"),
        "--run", f"parity{holders}",
    )  # fmt: skip
    assert live.returncode == 0, live.stderr + "".join(
        p.read_text() for p in (tmp_path / "logs").glob("*.log")
    )
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["microbatches"] for r in rows] == [4, 4, 4]
    assert all(r["peers"] == 4 + holders for r in rows)
    _compare(tmp_path / "local", tmp_path / "swarm")
