"""One real 5-peer swarm on loopback (initiator + 4 volunteers, each its own DHT node and p2pd),
probed from outside while it trains: peer-to-peer data flow, bad input, plain DHT readers."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time

import hivemind
import msgpack
import pytest
import torch
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.p2p import PeerID

from cli.processes import die_with_parent
from swarm.node import SwarmNode
from swarm.registry import Manifest, stage_key
from swarm.transport import encode_tensor
from swarm.transport.framing import PREFIX
from tests.live.conftest import p2pd_count, wait_no_p2pd

RUN = "probe"
STAGES = 3
SHAPE = [2, 32, 64]  # microbatch, seq_len, gpt2-tiny hidden


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live")
    before = p2pd_count()
    # a file, not a pipe: the initiator logs a line per iteration and a pipe nobody drains fills up
    log = open(tmp / "train.log", "w")  # noqa: SIM115 - open while the swarm runs
    proc = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "train", "--local-swarm", "4", "--stages", str(STAGES),
         "--iterations", "100000", "--model", "gpt2-tiny", "--batch-size", "8", "--microbatch-size", "2",
         "--seq-len", "32", "--run", RUN, "--log-dir", str(tmp / "logs"),
         "--metrics-out", str(tmp / "m.jsonl")],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent,
    )  # fmt: skip
    maddr = None
    deadline = time.monotonic() + 120
    while maddr is None and time.monotonic() < deadline and proc.poll() is None:
        found = re.search(r"(/ip4/127\.0\.0\.1/tcp/\d+/p2p/\w+)", (tmp / "train.log").read_text())
        maddr = found.group(1) if found else None
        time.sleep(0.2)
    assert maddr, (tmp / "train.log").read_text()
    metrics = tmp / "m.jsonl"
    while time.monotonic() < deadline and (not metrics.exists() or len(metrics.read_text().splitlines()) < 2):
        time.sleep(1)
    try:
        yield {"maddr": maddr, "metrics": metrics, "tmp": tmp, "proc": proc}
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # its volunteers follow it (parent-death signal)
            proc.wait()
        log.close()
        assert wait_no_p2pd(before, timeout=60) <= before, "the swarm left p2pd daemons running"


def rows(live) -> list[dict]:
    return [json.loads(line) for line in live["metrics"].read_text().splitlines()]


def with_client(live, fn):
    async def main():
        node = SwarmNode(RUN, [live["maddr"]], client_mode=True)
        await node.start()
        try:
            return await fn(node)
        finally:
            await node.shutdown()

    return asyncio.run(main())


async def peers_by_stage(node) -> dict[int, list[str]]:
    peers = await node.blocking(node.registry.get_all_peers, STAGES)
    return {s: sorted(r.peer_id for r in recs) for s, recs in peers.items()}


def test_loss_falls_over_30_iterations(live) -> None:
    deadline = time.monotonic() + 300
    while len(rows(live)) < 30 and time.monotonic() < deadline:
        time.sleep(1)
    data = rows(live)[:30]
    assert len(data) == 30
    assert all(r["microbatches"] == 4 and r["peers"] == 5 for r in data)
    first, last = sum(r["loss"] for r in data[:5]) / 5, sum(r["loss"] for r in data[-5:]) / 5
    assert last < first - 0.8, (first, last)


def test_activations_go_peer_to_peer(live) -> None:
    """Count payload bytes per (handler, sender) on every peer: each hop talks only to its ring
    neighbours, and the holder receives outputs only from the last stage."""

    async def probe(node):
        by_stage = await peers_by_stage(node)
        stats = {}
        for stage, peers in by_stage.items():
            for peer in peers:
                reply, _ = await node.call(peer, "stats", {}, timeout=30)
                stats[peer] = (stage, reply)
        return by_stage, stats

    by_stage, stats = with_client(live, probe)
    stage_of = {p: s for s, peers in by_stage.items() for p in peers}
    holder = by_stage[-1][0]
    carried = set()
    for stage, reply in stats.values():
        forward_from = {stage_of.get(s) for s in reply["bytes_in"].get("forward", {})}
        backward_from = {stage_of.get(s) for s in reply["bytes_in"].get("backward", {})}
        if not forward_from and stage != -1:
            # a spare replica: the maximum flow may not need it (4 volunteers over 3 stages leave one
            # stage with two, and that stage is not the bottleneck), so the protocol gives it no share
            assert not backward_from, (stage, backward_from)
            continue
        carried.add(stage)
        if stage == -1:
            assert forward_from == {STAGES - 1} and backward_from == {0}
        else:
            assert forward_from == {stage - 1}, (stage, forward_from)
            assert backward_from == {stage + 1 if stage + 1 < STAGES else -1}
        assert sum(reply["bytes_in"].get("forward", {}).values()) > 0
    assert carried == {-1, *range(STAGES)}, carried  # every stage carried traffic
    # the routing tables come from the push-relabel protocol and cover the next stage
    holder_routes = stats[holder][1]["flow"]["routes"][holder]
    assert set(holder_routes) <= set(by_stage[0]) and sum(holder_routes.values()) > 0


def test_plain_hivemind_client_reads_peer_records(live) -> None:
    dht = hivemind.DHT(initial_peers=[live["maddr"]], client_mode=True, start=True,
                       record_validators=[RSASignatureValidator()])  # fmt: skip
    try:
        found = {}
        for stage in range(STAGES):
            entry = dht.get(stage_key(RUN, stage), latest=True)
            assert entry is not None, stage
            for item in entry.value.values():
                record = msgpack.unpackb(item.value, raw=False, strict_map_key=False)
                found[record["peer_id"]] = (record["stage"], record["throughput"])
        assert sorted(s for s, _ in found.values()) == [0, 0, 1, 2]
        assert all(t > 0 for _, t in found.values())
    finally:
        dht.shutdown()


def test_bad_input_is_refused_and_the_peer_keeps_serving(live) -> None:
    async def probe(node):
        by_stage = await peers_by_stage(node)
        target = by_stage[1][0]
        holder = by_stage[-1][0]
        good = {"run": RUN, "iteration": 0, "mb": 0, "holder": holder, "path": [holder, by_stage[0][0]],
                "stage": 1}  # fmt: skip
        errors = []

        async def expect_error(name, header, payload=b""):
            try:
                await node.call(target, name, header, payload, timeout=30)
            except Exception as exc:  # noqa: BLE001
                errors.append(str(exc))
                return
            raise AssertionError(f"{name} {header} was accepted")

        ok_meta, ok_data = encode_tensor(torch.zeros(SHAPE))
        await expect_error("forward", {**good, "run": "other", "t": ok_meta}, ok_data)
        await expect_error("forward", {**good, "t": encode_tensor(torch.zeros(2, 31, 64))[0]},
                           encode_tensor(torch.zeros(2, 31, 64))[1])  # fmt: skip
        nan = torch.zeros(SHAPE)
        nan[0, 0, 0] = float("nan")
        await expect_error("forward", {**good, "t": encode_tensor(nan)[0]}, encode_tensor(nan)[1])
        await expect_error("forward", {**good, "t": {**ok_meta, "dtype": "int64"}}, ok_data)
        await expect_error("forward", {**good, "mb": 999, "t": ok_meta}, ok_data)
        await expect_error("forward", {**good, "t": ok_meta}, ok_data[:-4])
        await expect_error("backward", {**good, "iteration": 10**6, "t": ok_meta}, ok_data)
        await expect_error("flow", {"m": b"\x93garbage"})
        await expect_error("grads", {"part": 7, "iteration": 0, "count": 1, "t": ok_meta}, ok_data)
        # a frame that claims an oversized payload, and one whose header is not msgpack
        for raw in (PREFIX.pack(2, 1 << 40) + b"\x80\x00", PREFIX.pack(3, 0) + b"\xc1\xc1\xc1"):
            _, reader, writer = await node.p2p.call_binary_stream_handler(
                PeerID.from_base58(target), f"swarm.{RUN}.forward"
            )
            writer.write(raw)
            await writer.drain()
            head_len, pay_len = PREFIX.unpack(await reader.readexactly(PREFIX.size))
            reply = msgpack.unpackb(await reader.readexactly(head_len))
            writer.close()
            errors.append(reply["error"])
        reply, _ = await node.call(target, "stats", {}, timeout=30)
        return errors, reply

    done_before = len(rows(live))
    errors, stats = with_client(live, probe)
    expected = ["unknown run", "expected shape", "NaN", "unsupported dtype", "unknown microbatch id 999",
                "payload has", "iteration", "flow message", "part", "exceeds the limit",
                "msgpack"]  # fmt: skip
    for fragment, error in zip(expected, errors):
        assert fragment in error, (fragment, error)
    assert len(errors) == len(expected)
    assert sum(stats["refused"].values()) >= len(expected)
    deadline = time.monotonic() + 120
    while len(rows(live)) < done_before + 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(rows(live)) >= done_before + 3, "the swarm stopped training after bad input"
    assert live["proc"].poll() is None


def test_wrong_protocol_version_is_refused(live, tmp_path) -> None:
    async def publish(node):
        manifest = Manifest(
            run_id="oldrun", protocol_version=999, model_config={"model_type": "gpt2"}, layout=[(0, 4)],
            microbatch_size=1, seq_len=8, hidden_size=64, train={}, data_id="x", seed=0,
            initiator=node.peer_id, created_at=time.time(),
        )  # fmt: skip
        node.registry.run_id = "oldrun"
        from swarm.registry import Registry

        registry = Registry(node.dht, "oldrun")
        await node.blocking(registry.publish_manifest, manifest, 600.0)

    async def main():
        node = SwarmNode("oldrun", [live["maddr"]])
        await node.start()
        try:
            await publish(node)
            result = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "cli.main", "join", "--initial-peers", node.maddrs()[0],
                "--run", "oldrun", "--manifest-timeout", "30",
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, err = await asyncio.wait_for(result.communicate(), 120)
            return result.returncode, err.decode()
        finally:
            await node.shutdown()

    code, err = asyncio.run(main())
    assert code != 0 and "speaks protocol version 999" in err and "Traceback" not in err, err


def test_peer_joining_mid_run_equals_its_replicas(live, tmp_path) -> None:
    """A volunteer that joins at iteration k copies a replica's state and then steps with it. It
    names its region, so its routing agent bounds links (the others name none: fast links)."""
    log = open(tmp_path / "joiner.log", "w")
    joiner = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "join", "--initial-peers", live["maddr"], "--run", RUN,
         "--stage", "1", "--threads", "1", "--name", "late", "--region", "Iowa"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent,
    )  # fmt: skip
    joined_at = len(rows(live))
    try:

        async def compare(node):
            for _ in range(240):
                await asyncio.sleep(0.5)
                records = await node.blocking(node.registry.get_stage_peers, 1)
                late = [r.peer_id for r in records if r.name == "late" and r.state == "serving"]
                if not late:
                    continue
                others = [r.peer_id for r in records if r.peer_id not in late]
                head_a, blob_a = await node.call(late[0], "state", {"part": 1}, timeout=60)
                head_b, blob_b = await node.call(others[0], "state", {"part": 1}, timeout=60)
                if head_a["iteration"] != head_b["iteration"] or head_a["iteration"] < joined_at + 3:
                    continue  # the stage stepped between the two reads, or too early: look again
                import io

                a = torch.load(io.BytesIO(blob_a), weights_only=True)
                b = torch.load(io.BytesIO(blob_b), weights_only=True)
                return head_a["iteration"], a, b
            raise AssertionError((tmp_path / "joiner.log").read_text())

        iteration, a, b = with_client(live, compare)
        assert iteration >= joined_at + 3
        for name, tensor in a["module"].items():
            assert torch.equal(tensor, b["module"][name]), name  # bit-identical replicas
        assert a["optimizer"]["state"].keys() == b["optimizer"]["state"].keys()
        for key, entry in a["optimizer"]["state"].items():
            assert torch.equal(entry["exp_avg"], b["optimizer"]["state"][key]["exp_avg"])
    finally:
        logs = sorted((live["tmp"] / "logs").glob("*.log"))
        seen = {path: path.stat().st_size for path in logs}
        left_at = len(rows(live))
        joiner.send_signal(signal.SIGINT)
        try:
            joiner.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(joiner.pid, signal.SIGKILL)
            joiner.wait()
        log.close()
    assert "left the swarm cleanly" in (tmp_path / "joiner.log").read_text()
    # Ctrl-C loses nothing, and the others log at most a notice about it
    deadline = time.monotonic() + 120
    while len(rows(live)) < left_at + 3 and time.monotonic() < deadline:
        time.sleep(0.5)
    after = rows(live)[left_at:]
    assert len(after) >= 3 and all(r["microbatches"] == 4 and r["gradients_lost"] == 0 for r in after), after
    for path in logs:
        with open(path) as handle:
            handle.seek(seen[path])
            text = handle.read()
        assert "Traceback" not in text and " ERROR " not in text, (path.name, text[-2000:])


def test_auto_stage_joins_the_bottleneck(live, tmp_path) -> None:
    """`--stage auto` joins the stage where the flow is short, by the figures it read from the DHT:
    the least spare capacity in the flow records (the least capacity before routing has run)."""
    log_path = tmp_path / "auto.log"
    log = open(log_path, "w")
    joiner = subprocess.Popen(
        [sys.executable, "-m", "cli.main", "join", "--initial-peers", live["maddr"], "--run", RUN,
         "--stage", "auto", "--threads", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=die_with_parent,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "serving stage" not in log_path.read_text() and time.monotonic() < deadline:
            time.sleep(0.5)
        text = log_path.read_text()
        found = re.search(r"joining stage (\d+), the bottleneck \(capacity per stage (\{.*?\}), "
                          r"spare per stage (\{.*?\})\)", text)  # fmt: skip
        assert found, text
        chosen = int(found.group(1))
        capacity, spare = ast.literal_eval(found.group(2)), ast.literal_eval(found.group(3))
        # the routing engine's view (least spare) when every stage has flow records, else capacity
        assert spare[chosen] == min(spare.values()) or capacity[chosen] == min(capacity.values()), text
        assert f"serving stage {chosen} " in text
    finally:
        joiner.send_signal(signal.SIGINT)
        try:
            joiner.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(joiner.pid, signal.SIGKILL)
            joiner.wait()
        log.close()
