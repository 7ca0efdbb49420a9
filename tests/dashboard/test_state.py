"""The JSON state and the Prometheus metrics from synthetic records (pure, no network)."""

from __future__ import annotations

import json
import math

from dashboard_helpers import XSS_NAME, flow, manifest, peer, progress, records, ring
from prometheus_client.parser import text_string_to_metric_families

from swarm.dashboard.metrics import render_metrics
from swarm.dashboard.state import GRAPH_PEERS, MAX_TEXT, PAGE, build_state, clip, empty_state, page


def dumps(state: dict) -> str:
    return json.dumps(state, allow_nan=False)  # the API's JSON must never carry NaN/inf


def test_ring_state_lists_peers_flow_and_progress() -> None:
    state, rows = build_state(ring(), now=1100.0)
    dumps(state)
    assert state["status"] == "ok" and state["schema"] == 1
    assert [[p["id"] for p in s["peers"]] for s in state["stages"]] == [["QmA", "QmB"], ["QmC"], ["QmD"]]
    assert [p["id"] for p in state["holders"]] == ["QmHolder"]
    assert state["stages"][0]["throughput"] == 10.0 and state["stages"][0]["peers"][0]["online_s"] == 100.0
    assert state["health"]["ok"] and state["health"]["line"].startswith("healthy: all 3 stages")
    # the stage with the least spare capacity (flow view): stage 0 has 1.0, stage 1 has 3.0
    assert state["health"]["bottleneck_stage"] == 0 and state["stages"][0]["bottleneck"]
    edges = {(e["from"], e["to"]): e["rate"] for e in state["flow"]["edges"]}
    assert edges == {
        ("src:QmHolder", "peer:QmA"): 6.0,
        ("src:QmHolder", "peer:QmB"): 3.0,
        ("peer:QmA", "peer:QmC"): 6.0,
        ("peer:QmB", "peer:QmC"): 3.0,
        ("peer:QmC", "peer:QmD"): 9.0,
        ("peer:QmD", "sink:QmHolder"): 9.0,
    }
    assert state["flow"]["max_rate"] == 9.0
    assert [s["assigned"] for s in state["stages"]] == [9.0, 9.0, 9.0]
    columns = {n["id"]: n["column"] for n in state["flow"]["nodes"]}
    assert columns["src:QmHolder"] == -1 and columns["sink:QmHolder"] == 3 and columns["peer:QmC"] == 1
    p = state["progress"]
    assert (p["iteration"], p["loss"], p["rerouted"], p["reexecuted"]) == (4, 3.0, 2, 1)
    assert state["loss_curve"][0] == [0, 5.0] and len(state["loss_curve"]) == 5
    assert state["event_counts"] == {"join": 1} and state["events"][0]["name"] == "qma"
    assert page(rows, 0, 1, 5)["peers"][0]["id"] == "QmB"


def test_untrusted_strings_are_bounded_and_stripped() -> None:
    long_name = "x" * 500
    peers = {
        -1: [peer("QmHolder", -1)],
        0: [peer("QmA", 0, name=XSS_NAME, region="\x1b[31mred\u202e"), peer("QmB", 0, name=long_name[:128])],
    }
    state, _ = build_state(records(peers, manifest=manifest(stages=1)))
    names = [p["name"] for p in state["stages"][0]["peers"]]
    assert XSS_NAME in names  # kept as text: escaping is the page's job (textContent), length is ours
    assert all(len(n) <= MAX_TEXT for n in names) and any(n.endswith("…") for n in names)
    assert state["stages"][0]["peers"][0]["region"] == "[31mred"
    assert clip("a\nb\tc") == "abc"


def test_hundreds_of_peers_are_paged_and_folded() -> None:
    peers = {-1: [peer("QmHolder", -1)]}
    peers[0] = [peer(f"Qm{i:04d}", 0, throughput=float(i)) for i in range(300)]
    for s in (1, 2):
        peers[s] = [peer(f"Qm{s}x", s)]
    routes = {"QmHolder": {f"Qm{i:04d}": 0.5 for i in range(300)}}
    state, rows = build_state(records(peers, {"QmHolder": flow("QmHolder", routes)}))
    st0 = state["stages"][0]
    assert st0["peers_total"] == 300 and len(st0["peers"]) == PAGE and st0["truncated"]
    assert st0["peers"][0]["id"] == "Qm0299"  # fastest first
    stage0_nodes = [n for n in state["flow"]["nodes"] if n["column"] == 0]
    assert len(stage0_nodes) == GRAPH_PEERS + 1 and stage0_nodes[-1]["label"] == f"+{300 - GRAPH_PEERS} more"
    folded = [e for e in state["flow"]["edges"] if e["to"] == "more:0"]
    assert len(folded) == 1 and math.isclose(folded[0]["rate"], 0.5 * (300 - GRAPH_PEERS))
    assert len(json.dumps(state)) < 60_000  # the poll stays small whatever the swarm size
    second = page(rows, 0, 280, 50)
    assert second["total"] == 300 and len(second["peers"]) == 20 and second["peers"][-1]["id"] == "Qm0000"
    assert page(rows, 0, 0, 10_000)["limit"] == 200


def test_degraded_empty_and_non_finite() -> None:
    peers = {-1: [peer("QmHolder", -1)], 0: [peer("QmA", 0)], 1: [], 2: [peer("QmD", 2, state="loading")]}
    bad = progress(loss=math.nan, extra={"losses": [[0, math.inf], [1, 2.0], "junk", [2]], "rerouted": -3})
    state, _ = build_state(records(peers, progress=[bad]))
    dumps(state)
    assert not state["health"]["ok"] and state["health"]["empty_stages"] == [1, 2]
    assert state["health"]["line"].startswith("degraded: stage 1, 2 has no serving peer")
    assert state["progress"]["loss"] is None and state["progress"]["rerouted"] == 0
    assert state["loss_curve"] == [[1, 2.0]]

    nobody, _ = build_state(records({}, progress=[]))
    assert nobody["status"] == "no_peers" and nobody["message"] == "no peers in this run yet"
    assert nobody["progress"] is None and nobody["flow"]["edges"] == []
    unreachable = empty_state("unreachable", "demo", "DHT unreachable: boom")
    assert unreachable["stages"] == [] and unreachable["health"]["line"] == "DHT unreachable: boom"
    dumps(unreachable)


def test_long_loss_curve_is_downsampled() -> None:
    recs = [
        progress(
            holder=f"QmH{h}",
            iteration=400 * h + 399,
            extra={"losses": [[400 * h + i, 1.0] for i in range(400)]},
        )
        for h in range(3)
    ]
    state, _ = build_state(records({-1: [peer("QmHolder", -1)]}, progress=recs))
    curve = state["loss_curve"]
    assert len(curve) <= 501 and curve[0][0] == 0 and curve[-1][0] == 1199


def families(text: str) -> dict:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k != "run")))] = s.value
    return out


def test_metrics_parse_with_prometheus_parser() -> None:
    state, _ = build_state(ring())
    m = families(render_metrics(state).decode())
    assert m[("swarm_up", ())] == 1.0 and m[("swarm_healthy", ())] == 1.0
    assert m[("swarm_stage_peers", (("stage", "0"),))] == 2.0
    assert m[("swarm_stage_throughput", (("stage", "0"),))] == 10.0
    assert m[("swarm_stage_throughput", (("stage", "2"),))] == 20.0
    assert m[("swarm_stage_bottleneck", (("stage", "0"),))] == 1.0
    assert m[("swarm_loss", ())] == 3.0 and m[("swarm_iteration", ())] == 4.0
    assert m[("swarm_tokens_per_second", ())] == 500.0
    assert m[("swarm_rerouted_microbatches", ())] == 2.0
    assert m[("swarm_reexecuted_microbatches", ())] == 1.0
    assert m[("swarm_events", (("kind", "join"),))] == 1.0

    down = families(render_metrics(empty_state("unreachable", "demo", "x")).decode())
    assert down[("swarm_up", ())] == 0.0 and ("swarm_loss", ()) not in down
