"""Schemas: round trips, and every kind of bad value rejected with a RecordError that names the field."""

from __future__ import annotations

import math

import msgpack
import pytest

from swarm.registry import (
    EventRecord,
    FlowRecord,
    LinkRecord,
    Manifest,
    PeerRecord,
    ProgressRecord,
    RecordError,
    events_key,
    flow_key,
    links_key,
    manifest_key,
    pack,
    progress_key,
    stage_key,
    unpack,
)
from swarm.registry.identity import peer_id_of_public_key, split_subkey
from swarm.registry.records import MAX_RECORD_BYTES, is_tombstone, pack_tombstone


def test_keys():
    assert manifest_key("r") == "r.manifest"
    assert stage_key("r", 0) == "r.stage.0"
    assert stage_key("r", -1) == "r.holders"
    assert flow_key("r", "Qm1") == "r.flow.Qm1"
    assert links_key("r", "Qm1") == "r.links.Qm1"
    assert progress_key("r") == "r.progress"
    assert events_key("r") == "r.events"
    for bad in ("", "a.b", "x" * 65, "sp ace"):
        with pytest.raises(ValueError):
            manifest_key(bad)
    with pytest.raises(ValueError):
        stage_key("r", -2)
    with pytest.raises(ValueError):
        stage_key("r", True)


def test_round_trips(make):
    link = LinkRecord(peer_id="QmA", other="QmB", latency_s=0.01, bandwidth=1e8, measured_at=5.0)
    holder = make.peer(role="holder", stage=-1, blocks=(0, 0))
    for rec in (make.manifest(), make.peer(), holder, make.progress(), make.flow(), make.event(), link):
        raw = pack(rec)
        assert isinstance(raw, bytes)
        again = unpack(type(rec), raw)
        assert again == rec
        assert type(rec).from_dict(rec.to_dict()) == rec
        plain = msgpack.unpackb(raw)
        assert plain["v"] == 1 and plain["type"] == rec.TYPE


def test_plain_msgpack_view(make):
    plain = msgpack.unpackb(pack(make.peer(stage=1, blocks=(2, 4), throughput=7.25)))
    assert plain["stage"] == 1 and plain["throughput"] == 7.25 and plain["blocks"] == [2, 4]


def test_normalises_types(make):
    rec = make.peer(blocks=[0, 2], addresses=["/ip4/1.2.3.4/tcp/1"], throughput=3, capacity=2)
    assert rec.blocks == (0, 2) and rec.addresses == ("/ip4/1.2.3.4/tcp/1",)
    assert isinstance(rec.throughput, float) and isinstance(rec.capacity, float)
    assert make.manifest(layout=[[0, 1], [1, 4]]).layout == [(0, 1), (1, 4)]


@pytest.mark.parametrize(
    "field,value,match",
    [
        ("peer_id", "", "peer_id: must not be empty"),
        ("peer_id", "x" * 129, "peer_id: longer than 128"),
        ("peer_id", 5, "peer_id: expected a string"),
        ("role", "relay", "role: expected one of"),
        ("stage", -1, "stage: a stage cannot announce stage -1"),
        ("stage", True, "stage: expected an integer"),
        ("blocks", (2, 2), "blocks: empty block range"),
        ("blocks", (0, 1, 2), "blocks: expected"),
        ("throughput", float("nan"), "throughput: must be finite"),
        ("throughput", -1.0, "throughput: -1.0 is outside"),
        ("capacity", "4", "capacity: expected a number"),
        ("free_memory", -5, "free_memory"),
        ("region", "r" * 200, "region: longer than 128"),
        ("version", None, "version: expected a string"),
        ("addresses", ["/ip4/1.1.1.1/tcp/1"] * 17, "addresses: expected a list of at most 16"),
        ("addresses", "/ip4/1.1.1.1/tcp/1", "addresses"),
        ("state", "dead", "state: expected one of"),
        ("iteration", 1.5, "iteration: expected an integer"),
    ],
)
def test_peer_rejections(make, field, value, match):
    with pytest.raises(RecordError, match=match):
        make.peer(**{field: value})


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"layout": []}, "layout: expected 1"),
        ({"layout": [(0, 2), (3, 4)]}, "stage 1 starts at block 3"),
        ({"layout": [(0, 2), (2, "4")]}, "layout\\[1\\]"),
        ({"model_config": {"f": object()}}, "model_config: not plain msgpack"),
        ({"model_config": {1: 2}}, "model_config: expected a map with string keys"),
        ({"train": {"blob": "x" * 70000}}, "train: .* bytes packed"),
        ({"microbatch_size": 0}, "microbatch_size"),
        ({"initiator": ""}, "initiator"),
    ],
)
def test_manifest_rejections(make, kw, match):
    with pytest.raises(RecordError, match=match):
        make.manifest(**kw)


def test_other_rejections(make):
    with pytest.raises(RecordError, match="labels\\[QmHolder\\]"):
        make.flow(labels={"QmHolder": "high"})
    with pytest.raises(RecordError, match="routes: more than"):
        make.flow(routes={f"h{i}": {f"n{j}": 1.0 for j in range(40)} for i in range(40)})
    with pytest.raises(RecordError, match="kind"):
        make.event(kind="explode")
    with pytest.raises(RecordError, match="detail: longer"):
        make.event(detail="x" * 2000)
    with pytest.raises(RecordError, match="extra: expected a map"):
        make.progress(extra=[1])
    assert math.isnan(make.progress(loss=float("nan")).loss)  # a diverged loss is still reported


def test_unpack_rejects_malformed(make):
    good = pack(make.peer())
    cases = [
        b"\xc1\xc1 not msgpack",
        good[:-3],
        msgpack.packb([1, 2, 3]),
        msgpack.packb({"v": 2, "type": "peer"}),
        msgpack.packb({"type": "peer"}),
        pack(make.progress()),  # a record of another type
        msgpack.packb({"v": 1, "type": "peer", "peer_id": "QmX"}),  # missing fields
        msgpack.packb({1: 2}),
        b"\x00" * (MAX_RECORD_BYTES + 1),
        "a string",
        None,
    ]
    for raw in cases:
        with pytest.raises(RecordError):
            unpack(PeerRecord, raw)
    with pytest.raises(RecordError, match="PeerRecord.throughput"):
        unpack(PeerRecord, msgpack.packb({**msgpack.unpackb(good), "throughput": "fast"}))


def test_unknown_fields_are_ignored(make):
    raw = msgpack.packb({**make.event().to_dict(), "v": 1, "type": "event", "future_field": [1, 2]})
    assert unpack(EventRecord, raw) == make.event()


def test_tombstone():
    assert is_tombstone(pack_tombstone("QmA", 1.0))
    assert not is_tombstone(b"junk")
    with pytest.raises(RecordError):
        unpack(PeerRecord, pack_tombstone("QmA", 1.0))


def test_identity_derivation(tmp_path):
    from hivemind.p2p import P2P, PeerID

    from swarm.registry.dht import make_validators
    from swarm.registry.identity import load_identity, owner_subkey

    path = str(tmp_path / "id.key")
    P2P.generate_identity(path)
    with open(path, "rb") as f:
        expected = PeerID.from_identity(f.read()).to_base58()
    validator = make_validators(load_identity(path))[0]
    subkey = owner_subkey(expected, validator)
    owner, ssh = split_subkey(subkey)
    assert owner == expected
    assert peer_id_of_public_key(ssh) == expected
    assert peer_id_of_public_key(b"ssh-rsa garbage") is None
    assert split_subkey(b"no marker") is None
    assert split_subkey("str subkey") is None


def test_all_record_types_registered():
    from swarm.registry.records import RECORD_TYPES

    assert set(RECORD_TYPES.values()) == {
        Manifest,
        PeerRecord,
        ProgressRecord,
        FlowRecord,
        EventRecord,
        LinkRecord,
    }
