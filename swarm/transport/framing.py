"""Length-prefixed frames on a byte stream: a msgpack header, then an optional binary payload.

Frames go over hivemind's binary P2P streams (libp2p via p2pd). Protobuf messages there are capped
near 2 MiB and cost a copy; a frame carries a tensor of any permitted size in one write.
"""

from __future__ import annotations

import asyncio
import struct

import msgpack

PREFIX = struct.Struct("!IQ")  # header length, payload length
MAX_HEADER = 1 << 20
WRITE_CHUNK = 1 << 22


class FrameError(ValueError):
    """A frame that cannot be read: too large, truncated, or a header that is not a msgpack map."""


async def write_frame(writer: asyncio.StreamWriter, header: dict, payload: bytes | memoryview = b"") -> None:
    head = msgpack.packb(header, use_bin_type=True)
    writer.write(PREFIX.pack(len(head), len(payload)) + head)
    view = memoryview(payload)
    for offset in range(0, len(view), WRITE_CHUNK):
        writer.write(view[offset : offset + WRITE_CHUNK])
        await writer.drain()
    await writer.drain()


async def read_frame(reader: asyncio.StreamReader, max_payload: int) -> tuple[dict, bytes]:
    try:
        prefix = await reader.readexactly(PREFIX.size)
    except asyncio.IncompleteReadError:
        raise FrameError("stream closed before a frame arrived") from None
    head_len, payload_len = PREFIX.unpack(prefix)
    if head_len > MAX_HEADER:
        raise FrameError(f"header of {head_len} bytes exceeds {MAX_HEADER}")
    if payload_len > max_payload:
        raise FrameError(f"payload of {payload_len} bytes exceeds the limit of {max_payload}")
    try:
        head = await reader.readexactly(head_len)
        payload = await reader.readexactly(payload_len) if payload_len else b""
    except asyncio.IncompleteReadError:
        raise FrameError("stream closed in the middle of a frame") from None
    try:
        header = msgpack.unpackb(head, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise FrameError(f"header is not msgpack: {exc}") from None
    if not isinstance(header, dict):
        raise FrameError("header must be a map")
    return header, payload
