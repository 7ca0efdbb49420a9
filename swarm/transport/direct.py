"""A direct TCP path for bulk tensors (forward, backward, fetch), beside the P2P daemon.

hivemind's P2P streams go through two p2pd daemons (unix socket, yamux, noise) and move ~100-180
MB/s on this machine, where a plain socket moves GB/s. Bulk activations therefore take a direct TCP
connection to the address the peer advertises in its DHT record, when it has one, and fall back to
P2P otherwise. Only handlers that do not rely on who the sender is are served here (forward,
backward and fetch check everything in the message itself); gradients for averaging and routing
messages stay on P2P, where libp2p authenticates the sender.
"""

from __future__ import annotations

import asyncio
import logging

from hivemind.p2p import PeerID

from swarm.transport.framing import FrameError, read_frame, write_frame
from swarm.transport.rpc import RemoteError, RpcServer

log = logging.getLogger(__name__)
DIRECT_HANDLERS = frozenset({"forward", "backward", "fetch"})
SUFFIX = "/swarm-direct"
STREAM_LIMIT = 1 << 26  # let a whole activation sit in the buffer instead of pausing every MiB


class DirectServer:
    def __init__(self, rpc: RpcServer, host: str):
        self.rpc, self.host = rpc, host
        self.server: asyncio.AbstractServer | None = None
        self.port = 0

    async def start(self) -> str:
        self.server = await asyncio.start_server(self._serve, self.host, 0, limit=STREAM_LIMIT)
        self.port = self.server.sockets[0].getsockname()[1]
        proto = "ip6" if ":" in self.host else "ip4"
        return f"/{proto}/{self.host}/tcp/{self.port}{SUFFIX}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    header, payload = await read_frame(reader, self.rpc.max_payload)
                except FrameError as exc:
                    if "closed before" not in str(exc):
                        await write_frame(writer, {"error": str(exc)[:1000]})
                    return
                name, sender = header.pop("_h", None), header.pop("_from", None)
                if name not in DIRECT_HANDLERS:
                    await write_frame(writer, {"error": f"{name!r} is not served on the direct path"})
                    continue
                try:
                    peer = PeerID.from_base58(sender)
                except Exception:  # noqa: BLE001 - a malformed claim
                    await write_frame(writer, {"error": "'_from' must be a peer id"})
                    continue
                reply, out = await self.rpc.process(name, header, payload, peer)
                await write_frame(writer, reply, out)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
            pass  # the caller went away, or we are shutting down
        finally:
            writer.close()

    def close(self) -> None:
        if self.server is not None:
            self.server.close()


def parse_direct(address: str) -> tuple[str, int] | None:
    """(host, port) of an advertised direct address, None for anything else."""
    if not address.endswith(SUFFIX):
        return None
    parts = address[: -len(SUFFIX)].split("/")
    if len(parts) != 5 or parts[1] not in ("ip4", "ip6") or parts[3] != "tcp" or not parts[4].isdigit():
        return None
    return parts[2], int(parts[4])


class DirectClient:
    """One pooled connection per peer; requests on a connection run one at a time."""

    def __init__(self, me: str, max_payload: int):
        self.me, self.max_payload = me, max_payload
        self.addresses: dict[str, tuple[str, int]] = {}
        self._pool: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    def knows(self, peer: str) -> bool:
        return peer in self.addresses

    async def call(
        self, peer: str, name: str, header: dict, payload: bytes, timeout: float
    ) -> tuple[dict, bytes]:
        async def roundtrip() -> tuple[dict, bytes]:
            idle = self._pool.setdefault(peer, [])
            if idle:
                reader, writer = idle.pop()
            else:
                reader, writer = await asyncio.open_connection(*self.addresses[peer], limit=STREAM_LIMIT)
            try:
                await write_frame(writer, {**header, "_h": name, "_from": self.me}, payload)
                reply = await read_frame(reader, self.max_payload)
            except BaseException:
                writer.close()
                raise
            idle.append((reader, writer))
            return reply

        try:
            reply, out = await asyncio.wait_for(roundtrip(), timeout)
        except FrameError as exc:
            raise ConnectionError(f"{name} to {peer}: {exc}") from None
        if "error" in reply:
            raise RemoteError(str(reply["error"]))
        return reply, out

    def close(self) -> None:
        for conns in self._pool.values():
            for _, writer in conns:
                writer.close()
        self._pool.clear()
