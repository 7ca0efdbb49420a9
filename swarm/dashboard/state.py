"""The dashboard's JSON state (schema in docs/dashboard.md): pure, built from validated run records.

Everything a peer wrote is untrusted: strings are cut to `MAX_TEXT` characters and stripped of
control characters here, on the server, so the page and any other client get bounded text. Large
stages are paged (the state carries the first `PAGE` peers of each stage, the rest are served by
`/api/v1/stages/{s}/peers`) and the flow graph keeps the `GRAPH_PEERS` fastest peers of a stage as
nodes and folds the others into one "+N more" node, so hundreds of peers stay cheap to draw.
"""

from __future__ import annotations

import math
import time
import unicodedata
from collections import Counter, defaultdict
from typing import Any

from swarm.dashboard.records import RunRecords
from swarm.registry.keys import HOLDER_STAGE
from swarm.registry.records import PeerRecord
from swarm.registry.view import bottleneck_stage

SCHEMA_VERSION = 1
MAX_TEXT = 64  # names, regions, versions, peer ids on the page
MAX_DETAIL = 200  # event details
PAGE = 20  # peers per stage in the state; more through the paging endpoint
MAX_PAGE = 200  # largest page the paging endpoint serves
GRAPH_PEERS = 8  # peers per stage drawn as their own node in the flow graph
MAX_EVENTS = 100
MAX_LOSS_POINTS = 500
STATUSES = ("starting", "unreachable", "no_run", "no_peers", "ok")


def clip(value: Any, limit: int = MAX_TEXT) -> str:
    """Bounded printable text: control and format characters removed, cut with an ellipsis."""
    text = "".join(ch for ch in str(value) if unicodedata.category(ch)[0] != "C")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def num(value: Any, digits: int = 4) -> float | None:
    """A finite rounded float, or None (JSON has no NaN/inf, and a peer may publish anything)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return round(float(value), digits)


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def short_id(peer_id: str) -> str:
    return peer_id if len(peer_id) <= 12 else f"…{peer_id[-8:]}"


def empty_state(status: str, run_id: str, message: str, now: float | None = None) -> dict:
    """The state before any data: starting, DHT unreachable or no such run."""
    assert status in STATUSES, status
    return {
        "schema": SCHEMA_VERSION,
        "status": status,
        "message": message,
        "stale": False,
        "run_id": clip(run_id),
        "now": num(now if now is not None else time.time(), 3),
        "read_at": None,
        "run": None,
        "health": {
            "ok": False,
            "line": message,
            "peers": 0,
            "holders": 0,
            "num_stages": 0,
            "stages_served": 0,
            "empty_stages": [],
            "bottleneck_stage": None,
        },
        "progress": None,
        "loss_curve": [],
        "stages": [],
        "holders": [],
        "flow": {"nodes": [], "edges": [], "max_rate": 0.0},
        "events": [],
        "event_counts": {},
        "rejected": {},
    }


def peer_row(p: PeerRecord, now: float, spare: float | None) -> dict:
    """One peer for the page and the API; every string bounded."""
    return {
        "id": clip(p.peer_id),
        "short": clip(short_id(p.peer_id)),
        "name": clip(p.name),
        "role": p.role,
        "stage": p.stage,
        "state": p.state,
        "throughput": num(p.throughput),
        "capacity": num(p.capacity),
        "spare": num(spare),
        "region": clip(p.region),
        "version": clip(p.version),
        "iteration": p.iteration,
        "joined_at": num(p.joined_at, 3),
        "online_s": num(max(0.0, now - p.joined_at), 1),
    }


def loss_curve(records: RunRecords) -> list[list[float]]:
    """[[iteration, loss], ...] from the holders' `extra["losses"]` (mean over holders per iteration)."""
    points: dict[int, list[float]] = defaultdict(list)
    for rec in records.progress:
        raw = rec.extra.get("losses")
        for item in raw if isinstance(raw, list) else []:
            if isinstance(item, (list, tuple)) and len(item) == 2:
                it, loss = _count(item[0]), num(item[1], 5)
                if loss is not None:
                    points[it].append(loss)
        if num(rec.loss) is not None and rec.iteration not in points:
            points[rec.iteration].append(round(rec.loss, 5))
    curve = [[it, round(sum(v) / len(v), 5)] for it, v in sorted(points.items())]
    if len(curve) > MAX_LOSS_POINTS:  # keep the shape: every k-th point plus the newest one
        k = math.ceil(len(curve) / MAX_LOSS_POINTS)
        curve = curve[::k] + ([curve[-1]] if (len(curve) - 1) % k else [])
    return curve


def progress_of(records: RunRecords) -> dict | None:
    """Latest iteration, loss and speed, with the churn counters of that iteration."""
    if not records.progress:
        return None
    latest = max(records.progress, key=lambda r: (r.iteration, r.updated_at))
    extra = latest.extra
    return {
        "iteration": latest.iteration,
        "loss": num(latest.loss),
        "tokens_per_s": num(sum(r.tokens_per_s for r in records.progress), 2),
        "seconds_per_iteration": num(latest.seconds, 3),
        "microbatches": latest.microbatches,
        "rerouted": _count(extra.get("rerouted")),
        "reexecuted": _count(extra.get("reexecuted")),
        "gradients_lost": _count(extra.get("gradients_lost")),
        "holders": len(records.progress),
        "updated_at": num(latest.updated_at, 3),
    }


def _order(rows: list[dict]) -> list[dict]:
    """Serving peers first, fastest first, then by id: a stable order for paging."""
    return sorted(rows, key=lambda r: (r["state"] != "serving", -(r["throughput"] or 0.0), r["id"]))


def flow_graph(records: RunRecords, num_stages: int) -> dict:
    """Nodes (holders as source and sink, stage peers) and edges weighted by the assigned rates."""
    peers = records.peers
    stage_of = {p.peer_id: s for s, recs in peers.items() for p in recs}
    node_of: dict[tuple[str, str], str] = {}  # (column kind, peer id) -> node id
    nodes: list[dict] = []
    for h in peers.get(HOLDER_STAGE, []):
        for side, column in (("src", -1), ("sink", num_stages)):
            node_of[side, h.peer_id] = f"{side}:{h.peer_id}"
            nodes.append(
                {
                    "id": clip(f"{side}:{h.peer_id}", 2 * MAX_TEXT),
                    "column": column,
                    "label": clip(h.name or short_id(h.peer_id)),
                    "count": 1,
                    "throughput": num(h.throughput),
                }
            )
    for s in range(num_stages):
        recs = sorted(peers.get(s, []), key=lambda p: (-p.throughput, p.peer_id))
        for p in recs[:GRAPH_PEERS]:
            node_of["peer", p.peer_id] = f"peer:{p.peer_id}"
            nodes.append(
                {
                    "id": clip(f"peer:{p.peer_id}", 2 * MAX_TEXT),
                    "column": s,
                    "label": clip(p.name or short_id(p.peer_id)),
                    "count": 1,
                    "throughput": num(p.throughput),
                }
            )
        rest = recs[GRAPH_PEERS:]
        if rest:
            for p in rest:
                node_of["peer", p.peer_id] = f"more:{s}"
            nodes.append(
                {
                    "id": f"more:{s}",
                    "column": s,
                    "label": f"+{len(rest)} more",
                    "count": len(rest),
                    "throughput": num(sum(p.throughput for p in rest)),
                }
            )
    rates: Counter[tuple[str, str]] = Counter()
    for peer_id, rec in records.flows.items():
        s = stage_of.get(peer_id)
        if s is None:
            continue
        src = node_of.get(("src", peer_id) if s == HOLDER_STAGE else ("peer", peer_id))
        for holder, hops in rec.routes.items():
            for hop, rate in hops.items():
                if s == num_stages - 1 or (s != HOLDER_STAGE and hop == holder):
                    dst = node_of.get(("sink", hop))
                else:
                    dst = node_of.get(("peer", hop)) if stage_of.get(hop) == (0 if s < 0 else s + 1) else None
                if src and dst and math.isfinite(rate) and rate > 0:
                    rates[src, dst] += rate
    edges = [
        {"from": clip(a, 2 * MAX_TEXT), "to": clip(b, 2 * MAX_TEXT), "rate": num(r)}
        for (a, b), r in sorted(rates.items())
    ]
    return {"nodes": nodes, "edges": edges, "max_rate": num(max(rates.values(), default=0.0))}


def events_of(records: RunRecords, names: dict[str, str]) -> tuple[list[dict], dict[str, int]]:
    """The churn timeline, newest first and bounded, plus counts by kind."""
    counts = Counter(ev.kind for ev in records.events)
    latest = sorted(records.events, key=lambda e: e.at, reverse=True)[:MAX_EVENTS]
    rows = [
        {
            "kind": ev.kind,
            "peer": clip(ev.peer_id),
            "short": clip(short_id(ev.peer_id)),
            "name": clip(names.get(ev.peer_id, "")),
            "stage": ev.stage,
            "at": num(ev.at, 3),
            "detail": clip(ev.detail, MAX_DETAIL),
            "reporter": clip(short_id(ev.reporter)),
        }
        for ev in latest
    ]
    return rows, dict(sorted(counts.items()))


def health_line(num_stages: int, stages: list[dict], holders: int, bottleneck: int | None) -> dict:
    """Is every stage served, and by how many peers: the one line at the top of the page."""
    empty = [st["stage"] for st in stages if st["serving"] == 0]
    peers = sum(st["peers_total"] for st in stages)
    ok = not empty and holders > 0
    if ok:
        line = f"healthy: all {num_stages} stages served by {peers} peers, {holders} holder(s)"
    elif empty:
        line = f"degraded: stage {', '.join(map(str, empty))} has no serving peer ({peers} peers in all)"
    else:
        line = f"degraded: no data holder online ({peers} stage peers)"
    if bottleneck is not None:
        line += f" · bottleneck stage {bottleneck}"
    return {
        "ok": ok,
        "line": line,
        "peers": peers,
        "holders": holders,
        "num_stages": num_stages,
        "stages_served": num_stages - len(empty),
        "empty_stages": empty,
        "bottleneck_stage": bottleneck,
    }


def build_state(records: RunRecords, now: float | None = None) -> tuple[dict, dict[int, list[dict]]]:
    """The JSON state of a run and every stage's full, ordered peer rows (for paging)."""
    now = time.time() if now is None else now
    m = records.manifest
    n = m.num_stages
    spare = {pid: rec.spare for pid, rec in records.flows.items()}
    rows = {
        s: _order([peer_row(p, now, spare.get(p.peer_id)) for p in records.peers.get(s, [])])
        for s in range(HOLDER_STAGE, n)
    }
    bottleneck = bottleneck_stage(records.peers, n, records.flows)
    graph = flow_graph(records, n)
    inflow: Counter[int] = Counter()
    columns = {node["id"]: node["column"] for node in graph["nodes"]}
    for e in graph["edges"]:
        inflow[columns[e["to"]]] += e["rate"] or 0.0
    stages = []
    for s in range(n):
        recs = records.peers.get(s, [])
        stages.append(
            {
                "stage": s,
                "blocks": list(m.layout[s]),
                "peers_total": len(recs),
                "serving": sum(p.serves for p in recs),
                "throughput": num(sum(p.throughput for p in recs)),
                "capacity": num(sum(p.capacity for p in recs)),
                "assigned": num(inflow.get(s, 0.0)),
                "bottleneck": s == bottleneck,
                "peers": rows[s][:PAGE],
                "truncated": len(recs) > PAGE,
            }
        )
    holders = rows[HOLDER_STAGE]
    names = {p.peer_id: p.name for recs in records.peers.values() for p in recs}
    events, counts = events_of(records, names)
    health = health_line(n, stages, len(holders), bottleneck)
    total = health["peers"] + len(holders)
    status = "ok" if total else "no_peers"
    cfg = m.model_config
    state = {
        **empty_state(status, m.run_id, health["line"] if total else "no peers in this run yet", now),
        "read_at": num(records.read_at, 3),
        "run": {
            "run_id": clip(m.run_id),
            "model": clip(cfg.get("_name_or_path") or cfg.get("model_type") or "?"),
            "model_type": clip(cfg.get("model_type", "?")),
            "layers": _count(cfg.get("num_hidden_layers", cfg.get("n_layer", 0))),
            "hidden_size": m.hidden_size,
            "num_stages": n,
            "microbatch_size": m.microbatch_size,
            "seq_len": m.seq_len,
            "data_id": clip(m.data_id),
            "initiator": clip(m.initiator),
            "protocol_version": m.protocol_version,
            "created_at": num(m.created_at, 3),
        },
        "health": health,
        "progress": progress_of(records),
        "loss_curve": loss_curve(records),
        "stages": stages,
        "holders": holders[:PAGE],
        "flow": graph,
        "events": events,
        "event_counts": counts,
        "rejected": {clip(k): _count(v) for k, v in records.rejected.items()},
    }
    return state, rows


def page(rows: dict[int, list[dict]], stage: int, offset: int, limit: int) -> dict:
    """One page of a stage's peers for `/api/v1/stages/{stage}/peers`."""
    offset, limit = max(0, offset), max(1, min(limit, MAX_PAGE))
    everyone = rows.get(stage, [])
    return {
        "stage": stage,
        "total": len(everyone),
        "offset": offset,
        "limit": limit,
        "peers": everyone[offset : offset + limit],
    }
