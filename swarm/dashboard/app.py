"""The dashboard's ASGI app: a static page, the JSON state, paging per stage and Prometheus metrics.

Read-only by construction: only GET routes, no handler writes to the DHT. The page is served from
the package (no CDN) under a strict Content-Security-Policy, so even a bug in the page's escaping
could not run a script injected through a peer's name.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from swarm.dashboard.collector import Collector
from swarm.dashboard.metrics import CONTENT_TYPE, render_metrics
from swarm.dashboard.state import PAGE, page

STATIC = Path(str(resources.files("swarm.dashboard") / "static"))
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]


class SecurityHeaders:
    """Adds the CSP and friends to every response (pure ASGI, so static files get them too)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


def _int_arg(request: Request, name: str, default: int) -> int:
    try:
        return int(request.query_params.get(name, default))
    except ValueError:
        return default


def create_app(collector: Collector, *, start: bool = True) -> Starlette:
    """The app over `collector`; with `start` its background reads run for the app's lifetime."""

    @contextlib.asynccontextmanager
    async def lifespan(_: Starlette) -> AsyncIterator[None]:
        if start:
            collector.start()
        try:
            yield
        finally:
            if start:
                await collector.stop()

    async def index(_: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-cache"})

    async def state(_: Request) -> Response:
        body = {**collector.state, "now": round(time.time(), 3)}
        return JSONResponse(body, headers={"cache-control": "no-store"})

    async def stage_peers(request: Request) -> Response:
        stage = request.path_params["stage"]
        result = page(collector.rows, stage, _int_arg(request, "offset", 0), _int_arg(request, "limit", PAGE))
        return JSONResponse(result, headers={"cache-control": "no-store"})

    async def metrics(_: Request) -> Response:
        return Response(render_metrics(collector.state), media_type=CONTENT_TYPE)

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": collector.state["status"], "reads": collector.reads})

    app = Starlette(
        routes=[
            Route("/", index),
            Route("/api/v1/state", state),
            Route("/api/v1/stages/{stage:int}/peers", stage_peers),
            Route("/metrics", metrics),
            Route("/healthz", healthz),
            Mount("/static", StaticFiles(directory=STATIC), name="static"),
        ],
        lifespan=lifespan,
    )
    app.add_middleware(SecurityHeaders)
    return app
