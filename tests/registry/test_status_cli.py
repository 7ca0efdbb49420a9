"""`swarm status` against a live DHT, in a subprocess as a user would run it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from swarm.registry import Registry
from swarm.registry.view import bottleneck_stage

pytestmark = pytest.mark.slow
UNREACHABLE = "/ip4/127.0.0.1/tcp/9/p2p/QmVFGdDFRSRcj61ngbLYiXKsaLbU7MyzYWELdLGNeU98W9"


def status(*args: str) -> subprocess.CompletedProcess:
    # cli.main registers the command once the lead wires it in; the module also runs standalone.
    cmd = [sys.executable, "-m", "cli.main", "status", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


@pytest.fixture
def live_run(dht_pair, run_id, make):
    ra, rb = Registry(dht_pair["a"], run_id), Registry(dht_pair["b"], run_id)
    assert ra.publish_manifest(make.manifest(run_id=run_id, initiator=ra.peer_id), 120)
    assert ra.publish_peer(make.peer(peer_id=ra.peer_id, stage=0, capacity=4.0, name="fast"), ttl_s=120)
    assert rb.publish_peer(make.peer(peer_id=rb.peer_id, stage=1, blocks=(2, 4), capacity=1.0), ttl_s=120)
    assert ra.publish_progress(make.progress(holder=ra.peer_id, iteration=9, loss=2.5), ttl_s=120)
    assert ra.publish_flow(make.flow(peer_id=ra.peer_id, routes={ra.peer_id: {rb.peer_id: 1.0}}), 120)
    return {"peers": dht_pair["peers"], "run": run_id, "a": ra.peer_id, "b": rb.peer_id}


def test_status_json_and_table(live_run):
    out = status("--initial-peers", live_run["peers"][0], "--run", live_run["run"], "--json")
    assert out.returncode == 0, out.stderr
    snap = json.loads(out.stdout)
    assert snap["run_id"] == live_run["run"] and snap["num_stages"] == 2
    assert [[p["peer_id"] for p in s["peers"]] for s in snap["stages"]] == [[live_run["a"]], [live_run["b"]]]
    assert snap["stages"][0]["throughput"] == 3.5
    assert snap["bottleneck_stage"] == 1  # least capacity (no flow record for stage 1)
    assert snap["iteration"] == 9 and snap["loss"] == 2.5
    assert snap["routes"] == [
        {"peer": live_run["a"], "stage": 0, "holder": live_run["a"], "next": live_run["b"], "rate": 1.0}
    ]

    table = status("--initial-peers", live_run["peers"][0], "--run", live_run["run"])
    assert table.returncode == 0, table.stderr
    for text in ("peers per stage", "bottleneck stage: 1", "iteration 9", "fast", "routes"):
        assert text in table.stdout


def test_status_errors_are_one_line(dht_pair):
    for args in (
        ["--initial-peers", UNREACHABLE],
        ["--initial-peers", dht_pair["peers"][0], "--run", "no-such-run", "--timeout", "5"],
        ["--initial-peers", dht_pair["peers"][0], "--run", "bad.run"],
    ):
        out = status(*args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr
        lines = [line for line in out.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), out.stderr


def test_bottleneck_prefers_flow_view(make):
    peers = {0: [make.peer(peer_id="A", capacity=1.0)], 1: [make.peer(peer_id="B", stage=1, capacity=5.0)]}
    assert bottleneck_stage(peers, 2) == 0
    flows = {"A": make.flow(peer_id="A", spare=0.9), "B": make.flow(peer_id="B", spare=0.1)}
    assert bottleneck_stage(peers, 2, flows) == 1
    assert bottleneck_stage({0: peers[0]}, 2, flows) == 1  # an empty stage is the bottleneck
