"""Starting a hivemind DHT for a run: loopback by default, signed records, one RSA identity."""

from __future__ import annotations

import os
import tempfile
from typing import Any

import hivemind
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.utils.crypto import RSAPrivateKey

from swarm.registry.identity import ensure_identity


class RegistryError(RuntimeError):
    """The DHT could not be started or reached (bad multiaddr, unreachable peers, timeout)."""


def make_validators(private_key: RSAPrivateKey | None = None) -> list:
    """Record validators every DHT of a run must use (signatures on owner-marked subkeys)."""
    return [RSASignatureValidator(private_key)]


def _listen_maddr(host: str) -> str:
    return f"/ip6/{host}/tcp/0" if ":" in host else f"/ip4/{host}/tcp/0"


def create_dht(
    initial_peers: list[str],
    *,
    client_mode: bool = False,
    host: str = "127.0.0.1",
    identity_path: str | None = None,
    startup_timeout: float = 60,
    **dht_kwargs: Any,
) -> tuple[hivemind.DHT, RSASignatureValidator]:
    """Start a DHT whose peer id and record-signing key are one RSA identity.

    Without `identity_path` a fresh identity is made in a temporary file (removed once the daemon
    has read it). Raises RegistryError with one line when the DHT cannot start or join.
    """
    tmpdir = None
    fresh = identity_path is None or not os.path.exists(identity_path)
    if identity_path is None:
        tmpdir = tempfile.mkdtemp(prefix="swarm-id-")
        identity_path = os.path.join(tmpdir, "identity.key")
    dht = None
    try:
        validator = make_validators(ensure_identity(identity_path))[0]
        dht_kwargs.setdefault("host_maddrs", [_listen_maddr(host)])
        dht = hivemind.DHT(
            initial_peers=list(initial_peers) or None,
            start=True,
            await_ready=False,
            client_mode=client_mode,
            record_validators=[validator],
            identity_path=identity_path,
            check_if_identity_free=not fresh,
            startup_timeout=startup_timeout,
            **dht_kwargs,
        )
        dht.wait_until_ready(timeout=startup_timeout + 5)
        return dht, validator
    except Exception as exc:
        if dht is not None:
            dht.shutdown()
        where = f" via {', '.join(initial_peers)}" if initial_peers else ""
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RegistryError(f"could not start the DHT{where}: {reason}") from None
    finally:
        if tmpdir is not None:
            for name in os.listdir(tmpdir):
                os.remove(os.path.join(tmpdir, name))
            os.rmdir(tmpdir)
