"""Invalid instances get one clear error each."""

from __future__ import annotations

import json

import pytest

from swarm.flow.instance import InstanceError, instance_from_dict, load_instance

GOOD = {
    "stages": 2,
    "activation_bytes": 4194304,
    "holders": [{"id": "h0", "region": "Iowa", "demand": 12.0, "compute_s": 0.01}],
    "peers": [
        {"id": "p0", "stage": 0, "capacity": 3.0, "compute_s": 0.25, "region": "Japan"},
        {"id": "p1", "stage": 1, "capacity": 2.0, "compute_s": 0.2, "region": "Iowa"},
    ],
    "links": "geo",
}


def variant(**changes):
    raw = json.loads(json.dumps(GOOD))
    raw.update(changes)
    return raw


def test_good_instance_parses() -> None:
    inst = instance_from_dict(GOOD)
    assert [p.id for p in inst.peers_of(1)] == ["p1"]
    assert inst.edge_cost("h0", "p0") > 0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (variant(peers=[{**GOOD["peers"][0], "region": "Mars"}, GOOD["peers"][1]]), "unknown region 'Mars'"),
        (variant(peers=[{**GOOD["peers"][0], "capacity": -1}, GOOD["peers"][1]]), "capacity"),
        (variant(peers=[GOOD["peers"][0]]), "stage(s) [1] have no peers"),
        (variant(holders=[]), "at least one data holder"),
        (variant(links=[{"a": "h0", "b": "p0", "latency_ms": 1, "bandwidth_mb_s": 100}]), "no link given"),
        (variant(links=42), "'links' must be"),
        ([], "must be a JSON object"),
    ],
)
def test_invalid_instances(raw, message: str) -> None:
    with pytest.raises(InstanceError, match=None) as err:
        instance_from_dict(raw)
    assert message in str(err.value)


def test_bad_json_file(tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(InstanceError, match="not valid JSON"):
        load_instance(path)
    with pytest.raises(InstanceError, match="cannot read"):
        load_instance(tmp_path / "missing.json")
