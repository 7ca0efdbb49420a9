"""Publish/read every record kind between real DHT nodes; forged, unsigned and malformed values ignored."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import hivemind
import msgpack
import pytest
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.utils import get_dht_time

from swarm.registry import LinkRecord, Registry, RegistryError, create_dht, pack, stage_key
from swarm.registry.identity import owner_subkey
from swarm.registry.keys import manifest_key

pytestmark = pytest.mark.slow


def regs(pair, run_id):
    return Registry(pair["a"], run_id), Registry(pair["b"], run_id)


def test_identity_is_bound(dht_pair, run_id):
    ra, rb = regs(dht_pair, run_id)
    assert ra.identity_bound and rb.identity_bound and ra.peer_id != rb.peer_id


def test_publish_and_read_every_kind(dht_pair, run_id, make):
    ra, rb = regs(dht_pair, run_id)
    m = make.manifest(run_id=run_id, initiator=ra.peer_id)
    assert ra.publish_manifest(m, expiration_s=60)
    stage0 = make.peer(peer_id=ra.peer_id, stage=0)
    holder = make.peer(peer_id=rb.peer_id, role="holder", stage=-1, blocks=(0, 0), name="holder")
    assert ra.publish_peer(stage0) and rb.publish_peer(holder)
    assert ra.publish_flow(make.flow(peer_id=ra.peer_id), ttl_s=30)
    assert rb.publish_progress(make.progress(holder=rb.peer_id), ttl_s=30)
    assert rb.publish_event(make.event(), ttl_s=60)
    link = LinkRecord(peer_id=ra.peer_id, other=rb.peer_id, latency_s=0.001, bandwidth=1e9, measured_at=1.0)
    assert ra.publish_link(link)

    assert rb.get_manifest() == m and ra.get_manifest() == m
    assert rb.get_stage_peers(0) == [stage0]
    assert ra.get_stage_peers(-1) == [holder]
    assert rb.get_all_peers(m.num_stages) == {-1: [holder], 0: [stage0], 1: []}
    assert rb.get_flow(ra.peer_id) == make.flow(peer_id=ra.peer_id)
    assert rb.get_flow(rb.peer_id) is None
    assert rb.get_flows([ra.peer_id, rb.peer_id]) == {ra.peer_id: make.flow(peer_id=ra.peer_id)}
    assert ra.get_progress() == [make.progress(holder=rb.peer_id)]
    assert ra.get_events() == [dataclasses.replace(make.event(), reporter=rb.peer_id)]
    assert rb.get_links(ra.peer_id) == [link]
    assert not ra.rejected and not rb.rejected


def test_async_variants(dht_pair, run_id, make):
    ra, rb = regs(dht_pair, run_id)

    async def main():
        m = make.manifest(run_id=run_id, initiator=ra.peer_id)
        rec = make.peer(peer_id=ra.peer_id, stage=1, blocks=(2, 4))
        assert await ra.apublish_manifest(m, 60) and await ra.apublish_peer(rec)
        assert await rb.apublish_progress(make.progress(holder=rb.peer_id), 30)
        assert await ra.apublish_flow(make.flow(peer_id=ra.peer_id), 30)
        assert await rb.apublish_event(make.event(kind="join"))
        got = await asyncio.gather(rb.aget_manifest(), rb.aget_stage_peers(1), rb.aget_all_peers(2))
        assert got == [m, [rec], {-1: [], 0: [], 1: [rec]}]
        assert [p.holder for p in await ra.aget_progress()] == [rb.peer_id]
        assert (await rb.aget_flow(ra.peer_id)).version == 7
        assert [e.kind for e in await ra.aget_events()] == ["join"]
        assert await ra.awithdraw_peer(ra.peer_id, 1)
        assert await rb.aget_stage_peers(1) == []

    asyncio.run(main())


def test_cannot_publish_for_others(dht_pair, run_id, make):
    from swarm.registry import RecordError

    ra, _ = regs(dht_pair, run_id)
    with pytest.raises(RecordError, match="cannot publish"):
        ra.publish_peer(make.peer(peer_id="QmSomeoneElse"))
    with pytest.raises(RecordError, match="cannot publish"):
        ra.publish_manifest(make.manifest(run_id=run_id, initiator="QmSomeoneElse"), 60)


def test_forged_unsigned_and_malformed_values_are_ignored(dht_pair, run_id, make):
    b, va, vb = dht_pair["b"], dht_pair["va"], dht_pair["vb"]
    ra, rb = regs(dht_pair, run_id)
    key, exp = stage_key(run_id, 0), get_dht_time() + 30
    honest = make.peer(peer_id=ra.peer_id)
    assert ra.publish_peer(honest)

    # b writes under a's ownership marker: b cannot sign for a's key, so a refuses to store it and
    # a reader validates what other nodes return.
    forged = pack(make.peer(peer_id=ra.peer_id, throughput=999.0))
    b.store(key, forged, exp, subkey=owner_subkey(ra.peer_id, va))
    # b signs with its own key but claims to be a (the key does not hash to a's peer id).
    b.store(key, forged, exp, subkey=owner_subkey(ra.peer_id, vb))
    # no ownership marker at all: anyone could have written it.
    b.store(key, pack(make.peer(peer_id=rb.peer_id)), exp, subkey=rb.peer_id.encode())
    # b's own marker but bytes that are not a record.
    b.store(key, b"\x00garbage", exp, subkey=owner_subkey(rb.peer_id + "/x", vb))
    b.store(
        key,
        pack(make.peer(peer_id=rb.peer_id, stage=1, blocks=(2, 4))),
        exp,
        subkey=owner_subkey(rb.peer_id, vb),
    )

    assert ra.get_stage_peers(0) == [honest]
    assert ra.rejected["foreign"] >= 1 and ra.rejected["unsigned"] >= 1
    assert ra.rejected["malformed"] >= 1 and ra.rejected["misplaced"] >= 1

    # a manifest "signed" for the initiator by someone else is not the run's manifest
    b.store(
        manifest_key(run_id),
        pack(make.manifest(run_id=run_id, initiator=ra.peer_id)),
        exp,
        subkey=owner_subkey(ra.peer_id, vb),
    )
    before = ra.rejected["foreign"]
    assert ra.get_manifest() is None and ra.rejected["foreign"] > before


def test_plain_hivemind_client_reads_peer_records(dht_pair, run_id, make, shutdown_all):
    ra, _ = regs(dht_pair, run_id)
    assert ra.publish_peer(make.peer(peer_id=ra.peer_id, stage=2, blocks=(4, 6), throughput=6.5))
    # Outside our code: hivemind's own DHT and signature validator (which strips signatures) + msgpack.
    client = hivemind.DHT(
        initial_peers=dht_pair["peers"],
        client_mode=True,
        start=True,
        host_maddrs=["/ip4/127.0.0.1/tcp/0"],
        record_validators=[RSASignatureValidator()],
    )
    try:
        found = client.get(f"{run_id}.stage.2", latest=True)
        records = [msgpack.unpackb(item.value) for item in found.value.values()]
        assert [(r["peer_id"], r["stage"], r["throughput"]) for r in records] == [(ra.peer_id, 2, 6.5)]
    finally:
        shutdown_all([client])


def test_ttl_expiry_and_withdraw(dht_pair, run_id, make):
    ra, rb = regs(dht_pair, run_id)
    short = make.peer(peer_id=ra.peer_id, stage=0)
    holder = make.peer(peer_id=rb.peer_id, role="holder", stage=-1, blocks=(0, 0))
    assert ra.publish_peer(short, ttl_s=1.5) and rb.publish_peer(holder, ttl_s=60)
    assert rb.get_stage_peers(0) == [short] and ra.get_stage_peers(-1) == [holder]
    assert rb.withdraw_peer(rb.peer_id, -1)
    assert ra.get_stage_peers(-1) == []
    time.sleep(2.0)
    assert rb.get_stage_peers(0) == []
    assert not ra.rejected and not rb.rejected


def test_unbound_identity_needs_relaxed_readers(dht_pair, run_id, make, shutdown_all):
    """A DHT started without create_dht signs with a key unrelated to its peer id."""
    from swarm.registry import make_validators

    other = hivemind.DHT(
        initial_peers=dht_pair["peers"],
        start=True,
        host_maddrs=["/ip4/127.0.0.1/tcp/0"],
        record_validators=make_validators(),
    )
    try:
        ro = Registry(other, run_id)
        assert not ro.identity_bound
        assert ro.publish_peer(make.peer(peer_id=ro.peer_id, stage=0))
        strict, relaxed = (
            Registry(dht_pair["a"], run_id),
            Registry(dht_pair["a"], run_id, strict_identity=False),
        )
        assert strict.get_stage_peers(0) == [] and strict.rejected["foreign"] == 1
        assert [p.peer_id for p in relaxed.get_stage_peers(0)] == [ro.peer_id]
    finally:
        shutdown_all([other])


def test_registry_needs_signature_validator(dht_pair):
    class Fake:
        _record_validator = None

    with pytest.raises(ValueError, match="RSASignatureValidator"):
        Registry(Fake(), "r")  # type: ignore[arg-type]


def test_unreachable_initial_peer_fails_fast():
    start = time.time()
    with pytest.raises(RegistryError, match="could not start the DHT via"):
        create_dht(
            ["/ip4/127.0.0.1/tcp/9/p2p/QmVFGdDFRSRcj61ngbLYiXKsaLbU7MyzYWELdLGNeU98W9"], client_mode=True
        )
    with pytest.raises(RegistryError):
        create_dht(["not-a-multiaddr"], client_mode=True)
    assert time.time() - start < 30
