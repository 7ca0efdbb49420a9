"""Tensors on the wire: round trips for each codec, and every malformed message refused clearly."""

from __future__ import annotations

import asyncio

import pytest
import torch

from swarm.transport import TensorSpecError, decode_tensor, encode_tensor
from swarm.transport.framing import FrameError, read_frame, write_frame
from swarm.wire import WireError, parse_hop


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("codec, tol", [("none", 0.0), ("fp16", 2e-3), ("int8", 3e-2)])
def test_round_trip(dtype, codec, tol) -> None:
    t = torch.randn(2, 16, 33, generator=torch.Generator().manual_seed(0)).to(dtype)
    meta, payload = encode_tensor(t, codec)
    out = decode_tensor(meta, payload, expect_shape=[2, 16, 33])
    assert out.dtype == dtype and out.shape == t.shape
    if codec == "none":
        assert torch.equal(out, t)  # bf16 travels bit-exact
    else:
        assert (out.float() - t.float()).abs().max() <= tol * t.float().abs().max() + 1e-2
    if codec != "none":
        assert len(payload) < t.numel() * t.element_size() or dtype != torch.float32


def test_compression_ratios() -> None:
    t = torch.randn(4, 128, 256)
    sizes = {c: len(encode_tensor(t, c)[1]) for c in ("none", "fp16", "int8")}
    assert sizes["fp16"] * 2 == sizes["none"] and sizes["int8"] < sizes["none"] / 3.9


@pytest.mark.parametrize(
    "meta, payload, message",
    [
        ({"shape": [2], "dtype": "float32", "codec": "none"}, b"\x00\x00\xc0\x7f" * 2, "NaN"),
        ({"shape": [3], "dtype": "float32", "codec": "none"}, b"\x00" * 8, "needs 12"),
        ({"shape": [2], "dtype": "int64", "codec": "none"}, b"\x00" * 16, "unsupported dtype"),
        ({"shape": [2], "dtype": "float32", "codec": "zip"}, b"", "unknown codec"),
        ({"shape": "2", "dtype": "float32", "codec": "none"}, b"", "bad shape"),
        ({"shape": [1 << 20, 1 << 20], "dtype": "float32", "codec": "none"}, b"", "exceeds"),
        ({"shape": [5000], "dtype": "float32", "codec": "int8", "absmax_bytes": 4}, b"\x00" * 5004, "int8"),
    ],
)
def test_malformed_tensors_are_refused(meta, payload, message) -> None:
    with pytest.raises(TensorSpecError, match=message):
        decode_tensor(meta, payload)


def test_wrong_shape_is_refused() -> None:
    meta, payload = encode_tensor(torch.zeros(2, 3))
    with pytest.raises(TensorSpecError, match="expected shape"):
        decode_tensor(meta, payload, expect_shape=[3, 2])


def test_frames_round_trip_and_limits() -> None:
    async def scenario():
        reader = asyncio.StreamReader()

        class Writer:
            def write(self, data):
                reader.feed_data(bytes(data))

            async def drain(self):
                pass

        await write_frame(Writer(), {"a": 1}, b"x" * 100)
        header, payload = await read_frame(reader, max_payload=1000)
        assert header == {"a": 1} and payload == b"x" * 100
        await write_frame(Writer(), {"a": 2}, b"x" * 100)
        with pytest.raises(FrameError, match="exceeds the limit"):
            await read_frame(reader, max_payload=10)
        reader2 = asyncio.StreamReader()
        reader2.feed_data(b"\x00\x00\x00\x05\x00\x00\x00\x00\x00\x00\x00\x00\xc1\xc1\xc1\xc1\xc1")
        with pytest.raises(FrameError, match="msgpack|map"):
            await read_frame(reader2, max_payload=10)

    asyncio.run(scenario())


def test_hop_headers_are_checked() -> None:
    good = {"run": "r", "iteration": 0, "mb": 1, "holder": "h", "path": ["h"], "stage": 0, "t": {}}
    assert parse_hop(good, run="r", stages=3, microbatches=4).key == ("h", 0, 1)
    bad_cases = [
        ({**good, "run": "other"}, "unknown run"),
        ({**good, "mb": 9}, "unknown microbatch id 9"),
        ({**good, "mb": "1"}, "must be an integer"),
        ({**good, "stage": 7}, "outside"),
        ({**good, "path": ["x"]}, "start at the microbatch's holder"),
        ({**good, "path": ["h"] * 9}, "at most"),
        ({k: v for k, v in good.items() if k != "t"}, "no tensor"),
    ]
    for header, message in bad_cases:
        with pytest.raises(WireError, match=message):
            parse_hop(header, run="r", stages=3, microbatches=4)
