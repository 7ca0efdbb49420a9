"""Checkpoints: a resumed swarm run equals an uninterrupted one, and a stage that lost every
replica is restored from the latest checkpoint by a new peer while the run goes on."""

from __future__ import annotations

import json
import signal

import pytest
import torch

from tests.live.conftest import TINY, load_weights
from tests.live.test_churn import start, stop_all, wait_for_maddr

COMMON = ["--model", "gpt2-tiny", "--stages", "3", "--seed", "4", *TINY]


def test_resume_equals_uninterrupted_run(swarm_cli, tmp_path) -> None:
    local = swarm_cli("train", "--local", *COMMON, "--iterations", "4", "--save", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    first = swarm_cli("train", "--local-swarm", "3", *COMMON, "--iterations", "2", "--run", "resume1",
                      "--save", str(tmp_path / "half"), "--log-dir", str(tmp_path / "logs1"))  # fmt: skip
    assert first.returncode == 0, first.stderr
    assert json.loads((tmp_path / "half" / "swarm_state.json").read_text())["iteration"] == 2
    second = swarm_cli("train", "--local-swarm", "3", "--resume", str(tmp_path / "half"), "--iterations", "4",
                       "--run", "resume2", "--save", str(tmp_path / "full"),
                       "--log-dir", str(tmp_path / "logs2"))  # fmt: skip
    assert second.returncode == 0, second.stderr
    logs = "".join(p.read_text() for p in (tmp_path / "logs2").glob("*.log"))
    assert logs.count("from the latest checkpoint (iteration 2)") == 3, logs
    a, b = load_weights(tmp_path / "local"), load_weights(tmp_path / "full")
    for name in a:
        assert torch.allclose(a[name], b[name], rtol=1e-4, atol=1e-5), name


@pytest.mark.parametrize(
    ("recovery", "restored_from"),
    [
        ("auto", "from the latest checkpoint (iteration 2), serving iteration 3"),
        # CheckFree: the lost middle stage is the mean of stages 0 and 2
        ("neighbours", "average of the neighbouring stages (before and after), serving iteration 3"),
    ],
)
def test_whole_stage_restored(swarm_cli, tmp_path, recovery: str, restored_from: str) -> None:
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("init", "s0", "s1", "s2", "new")}
    init = start(["train", *COMMON, "--iterations", "6", "--run", "stageloss", "--save", str(tmp_path / "ck"),
                  "--checkpoint-every", "2", "--stage-recovery", recovery,
                  "--metrics-out", str(tmp_path / "m.jsonl")],
                 logs["init"])  # fmt: skip
    procs = [init]
    try:
        maddr = wait_for_maddr(tmp_path / "init.log", init)
        join = ["join", "--initial-peers", maddr, "--run", "stageloss", "--threads", "1"]
        procs.append(start([*join, "--stage", "0"], logs["s0"]))
        procs.append(start([*join, "--stage", "2"], logs["s2"]))
        only = start([*join, "--stage", "1"], logs["s1"], {"SWARM_TEST_FAULT": "forward@3"})
        procs.append(only)
        assert only.wait(300) == -signal.SIGKILL  # stage 1 has no replica left
        procs.append(start([*join, "--stage", "1", "--name", "rescuer"], logs["new"]))
        assert init.wait(600) == 0, (tmp_path / "init.log").read_text()[-3000:]
    finally:
        stop_all(procs)
        for log in logs.values():
            log.close()
    assert restored_from in (tmp_path / "new.log").read_text()
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(6)) and all(r["microbatches"] == 4 for r in rows)
    assert json.loads((tmp_path / "ck" / "swarm_state.json").read_text())["iteration"] == 6
