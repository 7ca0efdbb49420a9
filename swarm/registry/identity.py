"""Peer identities whose libp2p peer id and DHT signing key are the same RSA key.

hivemind's RSASignatureValidator proves that a record was written by the holder of the RSA key named
in its subkey, but by itself says nothing about *which peer* that is. When the p2p daemon runs on
the same RSA key (`identity_path`), the peer id is a hash of that key, so a reader can check that
a record claiming to come from peer P was signed by P's own key and nobody else's.
"""

from __future__ import annotations

import functools
import hashlib
import os
import re

import multihash
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.p2p import P2P, PeerID
from hivemind.proto import crypto_pb2
from hivemind.utils.crypto import RSAPrivateKey

OWNER_RE = re.compile(rb"\[owner:(.+?)\]", re.DOTALL)


def load_identity(path: str) -> RSAPrivateKey:
    """The RSA key of a libp2p identity file (hivemind's format), for signing DHT records."""
    with open(path, "rb") as f:
        proto = crypto_pb2.PrivateKey.FromString(f.read())
    if proto.key_type != crypto_pb2.KeyType.RSA:
        raise ValueError(f"identity {path} is not an RSA key; DHT records are signed with RSA keys")
    private = serialization.load_der_private_key(proto.data, password=None)
    if not isinstance(private, rsa.RSAPrivateKey):
        raise ValueError(f"identity {path} is not an RSA key")
    key = RSAPrivateKey.__new__(RSAPrivateKey)  # wrap without generating a fresh key
    key._private_key = private
    return key


def ensure_identity(path: str) -> RSAPrivateKey:
    """Load the identity at `path`, creating it first if it does not exist."""
    if not os.path.exists(path):
        P2P.generate_identity(path)
    return load_identity(path)


@functools.lru_cache(maxsize=4096)
def peer_id_of_public_key(ssh_public_key: bytes) -> str | None:
    """The libp2p peer id (base58) of an RSA public key in OpenSSH form, or None if unparsable."""
    try:
        key = serialization.load_ssh_public_key(ssh_public_key)
    except (ValueError, TypeError, IndexError):
        return None
    if not isinstance(key, rsa.RSAPublicKey):
        return None
    der = key.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    encoded = crypto_pb2.PublicKey(key_type=crypto_pb2.RSA, data=der).SerializeToString()
    digest = multihash.encode(hashlib.sha256(encoded).digest(), multihash.coerce_code("sha2-256"))
    return PeerID(digest).to_base58()


def split_subkey(subkey: object) -> tuple[str, bytes] | None:
    """(owner prefix, OpenSSH public key) of a protected subkey; None if it carries no owner marker."""
    if not isinstance(subkey, bytes):
        return None
    found = OWNER_RE.findall(subkey)
    if len(found) != 1 or not subkey.endswith(b"]"):
        return None
    prefix = subkey[: subkey.rindex(b"[owner:")]
    try:
        return prefix.decode("utf-8"), found[0]
    except UnicodeDecodeError:
        return None


def owner_subkey(prefix: str, validator: RSASignatureValidator) -> bytes:
    """A subkey only the validator's key can write under (hivemind's ownership marker)."""
    return prefix.encode("utf-8") + validator.local_public_key


def local_ssh_key(validator: RSASignatureValidator) -> bytes:
    found = OWNER_RE.findall(validator.local_public_key)
    return found[0] if found else b""
