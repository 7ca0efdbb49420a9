"""The HTTP surface in-process: routes, headers, paging, read-only, and the collector's empty states."""

from __future__ import annotations

import asyncio
import json

from dashboard_helpers import asgi_get, ring
from prometheus_client.parser import text_string_to_metric_families

from swarm.dashboard import Collector, create_app
from swarm.dashboard.state import build_state
from swarm.registry import RegistryError


def app_with_ring():
    collector = Collector(["/ip4/127.0.0.1/tcp/1/p2p/QmX"], "demo")
    collector.state, collector.rows = build_state(ring())
    return create_app(collector, start=False)


def test_routes_and_security_headers() -> None:
    app = app_with_ring()
    status, headers, body = asgi_get(app, "/api/v1/state")
    assert status == 200 and headers["content-type"].startswith("application/json")
    state = json.loads(body)
    assert state["status"] == "ok" and len(state["stages"]) == 3 and state["now"] > 0
    assert "script-src 'self'" in headers["content-security-policy"]
    assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"

    status, headers, body = asgi_get(app, "/")
    assert status == 200 and b'src="/static/app.js"' in body and b"http" not in body.split(b"<body>")[0]
    assert "content-security-policy" in headers
    for asset in ("/static/app.js", "/static/style.css"):
        status, headers, body = asgi_get(app, asset)
        assert status == 200 and body and "content-security-policy" in headers
    assert b"innerHTML" not in asgi_get(app, "/static/app.js")[2]  # peer data only via textContent

    status, headers, body = asgi_get(app, "/metrics")
    assert status == 200 and headers["content-type"].startswith("text/plain")
    names = {f.name for f in text_string_to_metric_families(body.decode())}
    assert {"swarm_stage_peers", "swarm_loss", "swarm_tokens_per_second", "swarm_events"} <= names

    status, _, body = asgi_get(app, "/api/v1/stages/0/peers?offset=1&limit=x")
    page = json.loads(body)
    assert status == 200 and page["total"] == 2 and [p["id"] for p in page["peers"]] == ["QmB"]
    assert asgi_get(app, "/api/v1/stages/9/peers")[0] == 200
    assert asgi_get(app, "/nope")[0] == 404


def test_read_only() -> None:
    app = app_with_ring()
    for path in ("/", "/api/v1/state", "/metrics", "/api/v1/stages/0/peers"):
        for method in ("POST", "PUT", "DELETE"):
            assert asgi_get(app, path, method)[0] == 405, (path, method)


def test_unreachable_dht_gives_empty_state_then_keeps_data_stale() -> None:
    calls = []

    def factory(peers):
        calls.append(peers)
        raise RegistryError("could not start the DHT via x: failed to connect to bootstrap peers")

    async def scenario():
        collector = Collector(["/ip4/127.0.0.1/tcp/9/p2p/QmX"], "demo", interval=0.05, dht_factory=factory)
        collector.start()
        while len(calls) < 2:
            await asyncio.sleep(0.02)
        await collector.stop()
        return collector.state

    first = asyncio.run(scenario())
    assert first["status"] == "unreachable" and first["message"].startswith("DHT unreachable: could not")
    assert first["stages"] == [] and not first["stale"]

    collector = Collector([], "demo")
    collector.state, collector.rows = build_state(ring())  # a read had succeeded, then the DHT went away
    collector._unreachable("timeout")
    later = collector.state
    assert later["status"] == "unreachable" and later["stale"] and len(later["stages"]) == 3
