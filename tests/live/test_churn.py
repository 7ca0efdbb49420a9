"""Crashes in the middle of forward and backward passes (real SIGKILLs at deterministic points):
the run completes, every microbatch is accounted for, and the result equals a run without crashes."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import torch

from cli.processes import die_with_parent, stop_processes
from tests.live.conftest import TINY, load_weights, p2pd_count, wait_no_p2pd

COMMON = ["--model", "gpt2-tiny", "--stages", "3", "--seed", "3", *TINY]


def start(args: list[str], log, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", *args], stdout=log, stderr=subprocess.STDOUT,
                            text=True, env={**os.environ, **(env or {})}, start_new_session=True,
                            preexec_fn=die_with_parent)  # fmt: skip


def wait_for_maddr(path, proc, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = re.search(r"(/ip4/127\.0\.0\.1/tcp/\d+/p2p/\w+)", path.read_text())
        if found:
            return found.group(1)
        assert proc.poll() is None, path.read_text()
        time.sleep(0.5)
    raise AssertionError("the initiator printed no multiaddr")


stop_all = stop_processes


def test_crash_in_forward_and_backward_keeps_parity(swarm_cli, tmp_path) -> None:
    before = p2pd_count()
    local = swarm_cli("train", "--local", *COMMON, "--iterations", "4", "--save", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("init", "s0", "a", "b", "c", "s2")}
    # all five volunteers serve before iteration 0, so B is surely routed to in iteration 1
    init = start(["train", *COMMON, "--iterations", "4", "--run", "churn", "--save", str(tmp_path / "swarm"),
                  "--metrics-out", str(tmp_path / "m.jsonl"), "--min-peers", "5"], logs["init"])  # fmt: skip
    procs = [init]
    try:
        maddr = wait_for_maddr(tmp_path / "init.log", init)
        join = ["join", "--initial-peers", maddr, "--run", "churn", "--threads", "1"]
        procs.append(start([*join, "--stage", "0"], logs["s0"]))
        procs.append(start([*join, "--stage", "2"], logs["s2"]))
        # three replicas of stage 1, each lending 1 microbatch/s so the flow uses all three;
        # A dies when its first forward of iteration 1 arrives, B at its first backward
        a = start([*join, "--stage", "1", "--capacity", "1"], logs["a"], {"SWARM_TEST_FAULT": "forward@1"})
        b = start([*join, "--stage", "1", "--capacity", "1"], logs["b"], {"SWARM_TEST_FAULT": "backward@1"})
        c = start([*join, "--stage", "1", "--capacity", "1"], logs["c"])
        procs += [a, b, c]
        assert init.wait(600) == 0, (tmp_path / "init.log").read_text()[-3000:]
        assert a.wait(5) == -signal.SIGKILL and b.wait(5) == -signal.SIGKILL  # the faults really fired
    finally:
        stop_all(procs)
        for log in logs.values():
            log.close()
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["microbatches"] for r in rows] == [4, 4, 4, 4]
    # both faults were repaired (a hop's reroute may be reported with the next iteration's step)
    assert sum(r["rerouted"] for r in rows) >= 1 and sum(r["reexecuted"] for r in rows) >= 1
    assert all(r["gradients_lost"] == 0 for r in rows)
    a_w, b_w = load_weights(tmp_path / "local"), load_weights(tmp_path / "swarm")
    for name in a_w:
        assert torch.equal(a_w[name], b_w[name]), name  # bit for bit: exact accumulation, same threads
    assert wait_no_p2pd(before) <= before


def test_random_kills_lose_no_microbatch(swarm_cli) -> None:
    """`swarm bench churn`: seeded SIGKILLs anywhere in the run (never a stage's last replica),
    replacements join; every iteration completes with all its microbatches."""
    result = swarm_cli("bench", "churn", "--json", "--iterations", "8", "--volunteers", "6", "--seed", "2")
    assert result.returncode == 0, result.stderr
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["iterations_completed"] == 8 and figures["kills"] >= 1 and figures["joins"] >= 1
    assert figures["microbatches_lost"] == 0
    assert abs(figures["final_loss_ratio"] - 1.0) < 0.1


def test_straggler_gets_little_work_and_parity_holds(swarm_cli, tmp_path) -> None:
    """A stage-1 replica 60x slower than its mate (alive, same published capacity) is down-weighted
    by its senders: it carries a small share of later iterations, and the result is unchanged."""
    before = p2pd_count()
    common = ["--model", "gpt2-tiny", "--stages", "2", "--seed", "5", "--batch-size", "16",
              "--microbatch-size", "2", "--seq-len", "32", "--threads", "1"]  # fmt: skip
    local = swarm_cli("train", "--local", *common, "--iterations", "5", "--save", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("init", "s0", "fast", "slow")}
    init = start(["train", *common, "--iterations", "5", "--run", "slow", "--save", str(tmp_path / "swarm"),
                  "--metrics-out", str(tmp_path / "m.jsonl"), "--min-peers", "3"], logs["init"])  # fmt: skip
    procs = [init]
    try:
        maddr = wait_for_maddr(tmp_path / "init.log", init)
        join = ["join", "--initial-peers", maddr, "--run", "slow", "--threads", "1", "--capacity", "5"]
        procs.append(start([*join, "--stage", "0"], logs["s0"]))
        procs.append(start([*join, "--stage", "1", "--name", "fast"], logs["fast"]))
        slow = {"SWARM_TEST_SLOW": "60"}
        procs.append(start([*join, "--stage", "1", "--name", "slow"], logs["slow"], slow))
        assert init.wait(600) == 0, (tmp_path / "init.log").read_text()[-3000:]
    finally:
        stop_all(procs)
        for log in logs.values():
            log.close()
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["microbatches"] for r in rows] == [8] * 5
    later = [r["carried"]["1"] for r in rows[2:]]
    shares = [min(c.values()) / sum(c.values()) if len(c) == 2 else 0.0 for c in later]
    assert max(shares) <= 0.25, later  # equal capacities: 0.5 each without straggler handling
    a_w, b_w = load_weights(tmp_path / "local"), load_weights(tmp_path / "swarm")
    for name in a_w:
        assert torch.equal(a_w[name], b_w[name]), name  # bit for bit: exact accumulation, same threads
    assert wait_no_p2pd(before) <= before


def test_peer_moves_to_the_bottleneck_stage_and_parity_holds(swarm_cli, tmp_path) -> None:
    """Stage 0 has two replicas lending 5 microbatches/s each, stage 1 one lending 1: one stage-0 peer
    moves (hysteresis, random delay), downloads stage 1's state and carries stage-1 work; the other
    stays (it is the last of its stage); training is unchanged."""
    before = p2pd_count()
    common = ["--model", "gpt2-tiny", "--stages", "2", "--seed", "7", *TINY]
    local = swarm_cli("train", "--local", *common, "--iterations", "30", "--save", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr
    logs = {name: open(tmp_path / f"{name}.log", "w") for name in ("init", "a", "b", "c")}
    init = start(["train", *common, "--iterations", "30", "--run", "move", "--save", str(tmp_path / "swarm"),
                  "--metrics-out", str(tmp_path / "m.jsonl"), "--min-peers", "3"], logs["init"])  # fmt: skip
    procs = [init]
    try:
        maddr = wait_for_maddr(tmp_path / "init.log", init)
        join = ["join", "--initial-peers", maddr, "--run", "move", "--threads", "1", "--rebalance-every", "1"]
        procs.append(start([*join, "--stage", "0", "--capacity", "5"], logs["a"]))
        procs.append(start([*join, "--stage", "0", "--capacity", "5"], logs["b"]))
        # the thin stage is really slow: while it carries every microbatch alone an iteration takes
        # seconds, so the mover (which needs a few rebalance periods and a state download, longer on a
        # loaded machine) arrives long before the 30 iterations are over
        slow = {"SWARM_TEST_SLOW": "400"}
        procs.append(start([*join, "--stage", "1", "--capacity", "1"], logs["c"], slow))
        assert init.wait(600) == 0, (tmp_path / "init.log").read_text()[-3000:]
    finally:
        stop_all(procs)
        for log in logs.values():
            log.close()
    moved = [n for n in ("a", "b") if "moving from stage 0 to stage 1" in (tmp_path / f"{n}.log").read_text()]
    assert len(moved) == 1, [(tmp_path / f"{n}.log").read_text()[-2000:] for n in ("a", "b")]
    assert "moving" not in (tmp_path / "c.log").read_text()
    rows = [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["microbatches"] for r in rows] == [4] * 30
    stage1 = {p for r in rows for p in r["carried"]["1"]}
    assert len(stage1) == 2 and set(rows[-1]["carried"]["1"]) - set(rows[0]["carried"]["1"])  # mover works
    assert "from the state of replica" in (tmp_path / f"{moved[0]}.log").read_text().split("moving from")[1]
    a_w, b_w = load_weights(tmp_path / "local"), load_weights(tmp_path / "swarm")
    for name in a_w:
        assert torch.equal(a_w[name], b_w[name]), name  # bit for bit: exact accumulation, same threads
    assert wait_no_p2pd(before) <= before
