"""Background reader of the DHT: the dashboard serves the latest state, never waits on the network.

A client-mode DHT node is started (and restarted after failures, with backoff) in a worker thread;
every `interval` seconds the run's records are read and turned into the JSON state. HTTP handlers
only read `state` / `rows`, so a slow or unreachable DHT never blocks a page load.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from swarm.dashboard.records import read_run
from swarm.dashboard.state import build_state, empty_state
from swarm.registry import Registry, RegistryError, create_dht

log = logging.getLogger(__name__)
DhtFactory = Callable[[list[str]], Any]


def _client_dht(initial_peers: list[str], startup_timeout: float) -> Any:
    dht, _ = create_dht(initial_peers, client_mode=True, startup_timeout=startup_timeout)
    return dht


class Collector:
    """Keeps `state` (the JSON of docs/dashboard.md) and `rows` (all peers per stage) current."""

    def __init__(
        self,
        initial_peers: list[str],
        run_id: str,
        *,
        interval: float = 3.0,
        timeout: float = 10.0,
        startup_timeout: float = 15.0,
        dht_factory: DhtFactory | None = None,
    ) -> None:
        self.initial_peers = list(initial_peers)
        self.run_id = run_id
        self.interval = interval
        self.timeout = timeout
        self.dht_factory = dht_factory or (lambda peers: _client_dht(peers, startup_timeout))
        self.dht: Any = None
        self.state: dict = empty_state("starting", run_id, "connecting to the DHT…")
        self.rows: dict[int, list[dict]] = {}
        self.reads = 0  # successful reads, for tests and /healthz
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        await asyncio.to_thread(self._shutdown_dht)

    def _shutdown_dht(self) -> None:
        if self.dht is not None:
            try:
                self.dht.shutdown()
            finally:
                self.dht = None

    def _unreachable(self, reason: str) -> None:
        """Keep the last data (marked stale) or show the empty state: never an error page."""
        message = f"DHT unreachable: {reason}"
        if self.state["status"] in ("ok", "no_peers"):
            self.state = {**self.state, "stale": True, "status": "unreachable", "message": message}
        else:
            self.state = empty_state("unreachable", self.run_id, message)
            self.rows = {}

    def read_once(self) -> None:
        """One blocking read of the run (called in a worker thread)."""
        if self.dht is None:
            self.dht = self.dht_factory(self.initial_peers)
        registry = Registry(self.dht, self.run_id, timeout=self.timeout)
        records = read_run(registry, events=True)
        if records is None:
            self.state = empty_state(
                "no_run", self.run_id, f"no run {self.run_id!r} on the DHT (no manifest, no peers)"
            )
            self.rows = {}
        else:
            self.state, self.rows = build_state(records)
        self.reads += 1

    async def _loop(self) -> None:
        failures = 0
        while True:
            started = time.monotonic()
            try:
                await asyncio.to_thread(self.read_once)
                failures = 0
            except RegistryError as exc:
                failures += 1
                self._unreachable(str(exc).splitlines()[0])
                if failures >= 3:  # the node itself may be wedged: start a fresh one
                    await asyncio.to_thread(self._shutdown_dht)
            except Exception as exc:  # noqa: BLE001 - the page must keep serving whatever happens
                failures += 1
                log.exception("dashboard read failed")
                self._unreachable(f"{type(exc).__name__}: {str(exc)[:200]}")
            backoff = min(self.interval * 2 ** max(0, failures - 1), 30.0)
            await asyncio.sleep(max(0.2, backoff - (time.monotonic() - started)))
