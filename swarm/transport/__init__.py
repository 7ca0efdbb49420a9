"""Peer-to-peer data plane: tensor codecs, framed binary streams over hivemind's P2P, small RPCs."""

from swarm.transport.codec import CODECS, TensorSpecError, decode_tensor, encode_tensor
from swarm.transport.framing import FrameError, read_frame, write_frame
from swarm.transport.rpc import RemoteError, RpcServer, call

__all__ = [
    "CODECS",
    "FrameError",
    "RemoteError",
    "RpcServer",
    "TensorSpecError",
    "call",
    "decode_tensor",
    "encode_tensor",
    "read_frame",
    "write_frame",
]
