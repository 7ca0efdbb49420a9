"""Request/response over hivemind binary P2P streams: one frame in, one frame out.

A handler that raises a `ValueError` (bad input) answers `{"error": text}`: the sender learns what
was wrong and this peer keeps serving. Anything else is logged and answered as an internal error.
hivemind's streamed stubs take no timeout, so every call here is wrapped in one.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from hivemind.p2p import P2P, PeerID

from swarm.transport.framing import FrameError, read_frame, write_frame

log = logging.getLogger(__name__)

Handler = Callable[[dict, bytes, PeerID], Awaitable[tuple[dict, bytes]]]
DEFAULT_MAX_PAYLOAD = 256 * 1024 * 1024
CLOSE_WAIT_S = 10.0


class RemoteError(RuntimeError):
    """The remote peer answered with an error (bad input or its own failure)."""


class RpcServer:
    """Registers named handlers on a P2P instance and counts what it served and refused."""

    def __init__(self, p2p: P2P, prefix: str, max_payload: int = DEFAULT_MAX_PAYLOAD):
        self.p2p, self.prefix, self.max_payload = p2p, prefix, max_payload
        self.served: dict[str, int] = {}
        self.refused: dict[str, int] = {}
        self.bytes_in = 0
        self.bytes_out = 0
        self.bytes_in_by: dict[str, dict[str, int]] = {}  # handler -> sender -> payload bytes
        self.handlers: dict[str, Handler] = {}

    async def add(self, name: str, handler: Handler) -> None:
        """Serve `name` with `handler`; adding a name again swaps the handler (a peer changing stage)."""
        first = name not in self.handlers
        self.handlers[name] = handler
        if not first:
            return

        async def on_stream(info, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                try:
                    header, payload = await read_frame(reader, self.max_payload)
                except FrameError as exc:
                    self.refused[name] = self.refused.get(name, 0) + 1
                    reply, out = {"error": str(exc)[:1000]}, b""
                else:
                    reply, out = await self.process(name, header, payload, info.peer_id)
                await write_frame(writer, reply, out)
                # Closing our end at once can reset the libp2p stream before the daemon has
                # delivered the reply; the caller closes first once it has read it.
                try:
                    await asyncio.wait_for(reader.read(1), CLOSE_WAIT_S)
                except asyncio.TimeoutError:
                    pass
            except (ConnectionError, asyncio.IncompleteReadError):
                pass  # the caller went away; nothing to answer
            finally:
                writer.close()

        await self.p2p.add_binary_stream_handler(f"{self.prefix}.{name}", on_stream)

    async def process(self, name: str, header: dict, payload: bytes, sender: PeerID) -> tuple[dict, bytes]:
        """Run one request through its handler; bad input becomes an error reply, never a crash."""
        handler = self.handlers.get(name)
        try:
            if handler is None:
                raise ValueError(f"no handler {name!r}")
            self.bytes_in += len(payload)
            by = self.bytes_in_by.setdefault(name, {})
            by[sender.to_base58()] = by.get(sender.to_base58(), 0) + len(payload)
            reply, out = await handler(header, payload, sender)
            self.served[name] = self.served.get(name, 0) + 1
        except ValueError as exc:
            self.refused[name] = self.refused.get(name, 0) + 1
            reply, out = {"error": str(exc)[:1000]}, b""
        except Exception as exc:  # noqa: BLE001 - a peer must survive its own bugs
            log.exception("handler %s failed", name)
            reply, out = {"error": f"internal error: {type(exc).__name__}: {exc}"[:1000]}, b""
        self.bytes_out += len(out)
        return reply, out


async def call(
    p2p: P2P,
    peer_id: PeerID,
    prefix: str,
    name: str,
    header: dict,
    payload: bytes = b"",
    *,
    timeout: float = 60.0,
    max_payload: int = DEFAULT_MAX_PAYLOAD,
) -> tuple[dict, bytes]:
    """Send one request and wait for the reply; raises RemoteError, TimeoutError or ConnectionError."""

    async def roundtrip() -> tuple[dict, bytes]:
        _, reader, writer = await p2p.call_binary_stream_handler(peer_id, f"{prefix}.{name}")
        try:
            await write_frame(writer, header, payload)
            return await read_frame(reader, max_payload)
        finally:
            writer.close()

    try:
        reply, out = await asyncio.wait_for(roundtrip(), timeout)
    except FrameError as exc:
        raise ConnectionError(f"{name} to {peer_id}: {exc}") from None
    if "error" in reply:
        raise RemoteError(str(reply["error"]))
    return reply, out
