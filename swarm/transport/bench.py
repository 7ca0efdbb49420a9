"""Loopback throughput of one activation hop, for `swarm bench transport`.

Measures both real data paths (framed stream over hivemind's P2P daemons, and the direct TCP path
peers use for bulk tensors), with the receiver decoding and validating the tensor as a peer does,
for each codec, beside a raw TCP socket moving the same bytes in the same run, so the figure is a
ratio that survives a noisy machine.
"""

from __future__ import annotations

import asyncio
import time

import torch
from hivemind.p2p import P2P

from swarm.transport.codec import decode_tensor, encode_tensor
from swarm.transport.direct import STREAM_LIMIT, DirectClient, DirectServer, parse_direct
from swarm.transport.framing import read_frame, write_frame
from swarm.transport.rpc import RpcServer, call


async def _raw_tcp(payload: bytes, repeats: int) -> float:
    """Bytes/s of length-prefixed frames over a plain loopback socket, acknowledged per frame."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                _, data = await read_frame(reader, len(payload) + 1)
            except (Exception, asyncio.CancelledError):  # noqa: BLE001 - the client closed
                break
            await write_frame(writer, {"ok": len(data)})
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, limit=STREAM_LIMIT)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=STREAM_LIMIT)
    await write_frame(writer, {}, payload)  # warm-up
    await read_frame(reader, 1 << 20)
    start = time.perf_counter()
    for _ in range(repeats):
        await write_frame(writer, {}, payload)
        await read_frame(reader, 1 << 20)
    seconds = time.perf_counter() - start
    writer.close()
    server.close()
    return len(payload) * repeats / seconds


async def run_transport_bench(shape: tuple[int, ...] = (8, 512, 512), repeats: int = 5) -> dict:
    tensor = torch.randn(*shape)
    raw_bytes = tensor.numel() * 4
    receiver = await P2P.create(host_maddrs=["/ip4/127.0.0.1/tcp/0"], startup_timeout=60)
    sender = await P2P.create(
        host_maddrs=["/ip4/127.0.0.1/tcp/0"], startup_timeout=60,
        initial_peers=[str(m) for m in await receiver.get_visible_maddrs()],
    )  # fmt: skip
    try:
        server = RpcServer(receiver, "bench")

        async def sink(header: dict, payload: bytes, peer) -> tuple[dict, bytes]:
            out = decode_tensor(header["t"], payload, expect_shape=list(shape))
            return {"ok": True, "numel": out.numel()}, b""

        await server.add("forward", sink)
        direct = DirectServer(server, "127.0.0.1")
        client = DirectClient(sender.peer_id.to_base58(), server.max_payload)
        client.addresses["receiver"] = parse_direct(await direct.start())
        paths = {
            "p2p": lambda h, p: call(sender, receiver.peer_id, "bench", "forward", h, p, timeout=300),
            "direct": lambda h, p: client.call("receiver", "forward", h, p, timeout=300),
        }
        tcp = await _raw_tcp(encode_tensor(tensor, "none")[1], repeats)
        results: dict[str, dict] = {}
        for path, send in paths.items():
            results[path] = {}
            for codec in ("none", "fp16", "int8"):
                await send(*_message(tensor, codec))  # warm-up
                start = time.perf_counter()
                wire = 0
                for _ in range(repeats):
                    header, payload = _message(tensor, codec)  # encoding is part of the hop's cost
                    wire += len(payload)
                    await send(header, payload)
                seconds = time.perf_counter() - start
                results[path][codec] = {
                    "activation_MB_s": round(raw_bytes * repeats / seconds / 1e6, 1),
                    "wire_MB_s": round(wire / seconds / 1e6, 1),
                    "wire_bytes_per_hop": wire // repeats,
                    "vs_raw_tcp": round(raw_bytes * repeats / seconds / tcp, 4),
                }
        client.close()
        direct.close()
        return {"tensor_shape": list(shape), "tensor_bytes": raw_bytes, "repeats": repeats,
                "raw_tcp_MB_s": round(tcp / 1e6, 1), **results}  # fmt: skip
    finally:
        await sender.shutdown()
        await receiver.shutdown()


def _message(tensor: torch.Tensor, codec: str) -> tuple[dict, bytes]:
    meta, payload = encode_tensor(tensor, codec)
    return {"t": meta}, payload
