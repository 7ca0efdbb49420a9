"""What every live peer has: a hivemind DHT node, its P2P daemon, the registry and an RPC server.

Each peer (initiator, data holder, stage server) is its own process with its own DHT and p2pd.
Blocking DHT calls run in a thread so the event loop (uvloop) keeps serving streams.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from hivemind.p2p import PeerID

from swarm.registry import Registry, create_dht
from swarm.transport import call as rpc_call
from swarm.transport.direct import DIRECT_HANDLERS, SUFFIX, DirectClient, DirectServer, parse_direct
from swarm.transport.rpc import RpcServer

log = logging.getLogger(__name__)


class SwarmNode:
    """One process's presence in the swarm."""

    def __init__(self, run_id: str, initial_peers: list[str], host: str = "127.0.0.1", port: int = 0,
                 identity_path: str | None = None, client_mode: bool = False):  # fmt: skip
        self.run_id = run_id
        self.initial_peers = initial_peers
        self.host, self.port = host, port
        self.identity_path = identity_path
        self.client_mode = client_mode
        self.started_at = time.time()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.dht, self.validator = await loop.run_in_executor(
            None,
            lambda: create_dht(
                self.initial_peers,
                client_mode=self.client_mode,
                host=self.host,
                identity_path=self.identity_path,
            ),  # fmt: skip
        )
        self.p2p = await self.dht.replicate_p2p()
        self.peer_id = self.dht.peer_id.to_base58()
        self.registry = Registry(self.dht, self.run_id)
        self.rpc = RpcServer(self.p2p, f"swarm.{self.run_id}")
        self.direct_client = DirectClient(self.peer_id, self.rpc.max_payload)
        self.direct = None
        self.direct_address: str | None = None
        if not self.client_mode:
            self.direct = DirectServer(self.rpc, self.host)
            self.direct_address = await self.direct.start()
            if self.host in ("0.0.0.0", "::"):  # advertise an address others can dial
                visible = next((m for m in self.maddrs() if m.startswith("/ip4/")), None)
                if visible:
                    ip = visible.split("/")[2]
                    self.direct_address = f"/ip4/{ip}/tcp/{self.direct.port}{SUFFIX}"

    def maddrs(self) -> list[str]:
        return [str(m) for m in self.dht.get_visible_maddrs()]

    def advertised(self) -> list[str]:
        """What goes into the peer record: the direct data address first, then P2P multiaddrs."""
        return ([self.direct_address] if self.direct_address else []) + self.maddrs()[:3]

    def learn_addresses(self, peer: str, addresses) -> None:
        """Remember a peer's direct data address from its (signed) record."""
        for address in addresses:
            parsed = parse_direct(address)
            if parsed and peer != self.peer_id:
                self.direct_client.addresses[peer] = parsed

    async def blocking(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run a blocking call (DHT get/store, torch compute setup) off the event loop."""
        return await asyncio.get_running_loop().run_in_executor(None, fn, *args)

    async def call(self, peer: str, name: str, header: dict, payload: bytes = b"", timeout: float = 60.0):
        if name in DIRECT_HANDLERS and self.direct_client.knows(peer):
            try:
                return await self.direct_client.call(peer, name, header, payload, timeout)
            except (ConnectionError, OSError) as exc:
                log.info("direct path to %s failed (%s); using P2P", peer, exc)
                self.direct_client.addresses.pop(peer, None)
        return await rpc_call(
            self.p2p, PeerID.from_base58(peer), f"swarm.{self.run_id}", name, header, payload, timeout=timeout
        )

    async def shutdown(self) -> None:
        if getattr(self, "direct", None) is not None:
            self.direct.close()
        if getattr(self, "direct_client", None) is not None:
            self.direct_client.close()
        try:
            await self.p2p.shutdown()
        except Exception:  # noqa: BLE001 - shutting down anyway
            pass
        await self.blocking(self.dht.shutdown)
