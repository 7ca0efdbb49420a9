"""Real hivemind DHTs on loopback for the registry tests, always shut down (no leaked p2pd)."""

from __future__ import annotations

import os
import subprocess
import time
import uuid

import pytest

from swarm.registry import create_dht


def p2pd_children(pid: int) -> set[int]:
    """The p2pd daemons a DHT process started (its direct children named p2pd)."""
    out = subprocess.run(["pgrep", "-P", str(pid), "-x", "p2pd"], capture_output=True, text=True).stdout
    return {int(x) for x in out.split()}


def shutdown_all(dhts: list) -> None:
    """Shut DHTs down and check their p2pd daemons went with them."""
    daemons = set()
    for dht in dhts:
        if dht.is_alive():
            daemons |= p2pd_children(dht.pid)
    for dht in reversed(dhts):
        dht.shutdown()
    deadline = time.time() + 10
    while time.time() < deadline and any(os.path.exists(f"/proc/{pid}") for pid in daemons):
        time.sleep(0.1)
    leaked = [pid for pid in daemons if os.path.exists(f"/proc/{pid}")]
    assert not leaked, f"p2pd daemons left running: {leaked}"


@pytest.fixture(name="shutdown_all")
def shutdown_all_fixture():
    return shutdown_all


@pytest.fixture(scope="package")
def dht_pair():
    """Two DHT nodes (a bootstraps, b joins), shared by the package's live tests."""
    started: list = []
    try:
        a, va = create_dht([])
        started.append(a)
        peers = [str(m) for m in a.get_visible_maddrs()]
        b, vb = create_dht(peers)
        started.append(b)
        yield {"a": a, "b": b, "va": va, "vb": vb, "peers": peers}
    finally:
        shutdown_all(started)


@pytest.fixture
def run_id() -> str:
    """A fresh run id per test so tests never see each other's records."""
    return f"t-{uuid.uuid4().hex[:10]}"


class Make:
    """Valid records with overridable fields."""

    @staticmethod
    def manifest(**kw):
        from swarm.registry import Manifest

        base = dict(
            run_id="swarm",
            protocol_version=1,
            model_config={"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 4},
            layout=[(0, 2), (2, 4)],
            microbatch_size=4,
            seq_len=128,
            hidden_size=64,
            train={"lr": 3e-3, "betas": [0.9, 0.95], "optimizer": "adamw"},
            data_id="embedded",
            seed=0,
            initiator="QmInitiator",
            created_at=1000.0,
        )
        return Manifest(**{**base, **kw})

    @staticmethod
    def peer(**kw):
        from swarm.registry import PeerRecord

        base = dict(
            peer_id="QmPeer",
            role="stage",
            stage=0,
            blocks=(0, 2),
            throughput=3.5,
            capacity=4.0,
            free_memory=2**30,
            region="eu-west",
            version="0.1.0",
            protocol_version=1,
            addresses=("/ip4/127.0.0.1/tcp/4000/p2p/QmPeer",),
            joined_at=1000.0,
            state="serving",
            iteration=3,
            name="alice",
        )
        return PeerRecord(**{**base, **kw})

    @staticmethod
    def progress(**kw):
        from swarm.registry import ProgressRecord

        base = dict(
            holder="QmHolder",
            iteration=5,
            microbatches=16,
            loss=2.75,
            tokens_per_s=1234.5,
            seconds=1.5,
            updated_at=1000.0,
            extra={"reroutes": 1, "reexecuted": 0},
        )
        return ProgressRecord(**{**base, **kw})

    @staticmethod
    def flow(**kw):
        from swarm.registry import FlowRecord

        base = dict(
            peer_id="QmPeer",
            version=7,
            spare=1.5,
            labels={"QmHolder": 2},
            cheapest={"QmHolder": 0.25},
            worst={"QmHolder": 0.75},
            routes={"QmHolder": {"QmNext": 2.0}},
        )
        return FlowRecord(**{**base, **kw})

    @staticmethod
    def event(**kw):
        from swarm.registry import EventRecord

        base = dict(kind="crash", peer_id="QmPeer", stage=1, at=1000.0, detail="rpc timeout")
        return EventRecord(**{**base, **kw})


@pytest.fixture
def make() -> type[Make]:
    return Make
