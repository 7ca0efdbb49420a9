"""Tensors on the wire: raw bytes, fp16, or 8-bit blockwise quantization (bitsandbytes).

`none` sends the tensor's own bytes (bf16 included) with no copy through protobuf; hivemind's
serializer costs a copy and its blockwise 8-bit path fails with numpy 2, so we call bitsandbytes'
`quantize_blockwise` directly and send the absmax per block beside the codes. Every decode checks
what it receives before it allocates: codec, dtype, shape, byte count, size limit, finite values.
"""

from __future__ import annotations

import math

import numpy as np
import torch

CODECS = ("none", "fp16", "int8")
DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
INT8_BLOCK = 4096
DEFAULT_LIMIT = 512 * 1024 * 1024


class TensorSpecError(ValueError):
    """A tensor message that does not describe a valid tensor; the text goes back to the sender."""


def _raw_bytes(t: torch.Tensor) -> bytes:
    return t.detach().contiguous().reshape(-1).view(torch.uint8).cpu().numpy().tobytes()


def encode_tensor(t: torch.Tensor, codec: str = "none") -> tuple[dict, bytes]:
    """(meta, payload) for a floating tensor; meta travels in the frame header."""
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in DTYPES:
        raise TensorSpecError(f"cannot send dtype {dtype}")
    meta = {"shape": list(t.shape), "dtype": dtype, "codec": codec}
    if codec == "none":
        payload = _raw_bytes(t)
    elif codec == "fp16":
        payload = _raw_bytes(t.to(torch.float16))
    elif codec == "int8":
        import bitsandbytes.functional as bnbf

        flat = t.detach().reshape(-1).to(torch.float32).cpu()
        codes, state = bnbf.quantize_blockwise(flat, blocksize=INT8_BLOCK)
        absmax = state.absmax.to(torch.float32).numpy().tobytes()
        meta["absmax_bytes"] = len(absmax)
        payload = absmax + codes.numpy().tobytes()
    else:
        raise TensorSpecError(f"unknown codec {codec!r} (use one of {', '.join(CODECS)})")
    meta["nbytes"] = len(payload)
    return meta, payload


def _check_meta(meta: dict, limit: int) -> tuple[list[int], torch.dtype, int]:
    if not isinstance(meta, dict):
        raise TensorSpecError("tensor meta must be a map")
    codec, dtype_name, shape = meta.get("codec"), meta.get("dtype"), meta.get("shape")
    if codec not in CODECS:
        raise TensorSpecError(f"unknown codec {codec!r}")
    if dtype_name not in DTYPES:
        raise TensorSpecError(f"unsupported dtype {dtype_name!r}")
    if not isinstance(shape, list) or len(shape) > 8 or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise TensorSpecError(f"bad shape {shape!r}")
    numel = math.prod(shape)
    if numel * 4 > limit:
        raise TensorSpecError(f"tensor of {numel} elements exceeds the {limit}-byte limit")
    return shape, DTYPES[dtype_name], numel


def decode_tensor(
    meta: dict,
    payload: bytes,
    *,
    limit: int = DEFAULT_LIMIT,
    expect_shape: list[int] | tuple[int, ...] | None = None,
    require_finite: bool = True,
) -> torch.Tensor:
    """The tensor `meta` + `payload` describe, or TensorSpecError saying what is wrong."""
    shape, dtype, numel = _check_meta(meta, limit)
    if expect_shape is not None and list(expect_shape) != shape:
        raise TensorSpecError(f"expected shape {list(expect_shape)}, got {shape}")
    codec = meta["codec"]
    if codec == "none":
        size = torch.empty((), dtype=dtype).element_size()
        if len(payload) != numel * size:
            raise TensorSpecError(f"payload has {len(payload)} bytes, shape {shape} needs {numel * size}")
        buf = (
            torch.frombuffer(bytearray(payload), dtype=torch.uint8)
            if payload
            else torch.empty(0, dtype=torch.uint8)
        )
        out = buf.view(dtype).reshape(shape)
    elif codec == "fp16":
        if len(payload) != numel * 2:
            raise TensorSpecError(f"payload has {len(payload)} bytes, fp16 shape {shape} needs {numel * 2}")
        out = torch.from_numpy(np.frombuffer(payload, dtype=np.float16).copy()).reshape(shape).to(dtype)
    else:
        import bitsandbytes.functional as bnbf

        blocks = math.ceil(numel / INT8_BLOCK)
        absmax_bytes = meta.get("absmax_bytes")
        if absmax_bytes != blocks * 4 or len(payload) != absmax_bytes + numel:
            raise TensorSpecError(f"int8 payload of {len(payload)} bytes does not match shape {shape}")
        absmax = torch.from_numpy(np.frombuffer(payload[:absmax_bytes], dtype=np.float32).copy())
        codes = torch.from_numpy(np.frombuffer(payload[absmax_bytes:], dtype=np.uint8).copy())
        flat = (
            bnbf.dequantize_blockwise(codes, absmax=absmax, blocksize=INT8_BLOCK) if numel else codes.float()
        )
        out = flat.reshape(shape).to(dtype)
    if require_finite and out.numel() and not torch.isfinite(out).all():
        raise TensorSpecError("tensor holds NaN or infinite values")
    return out
