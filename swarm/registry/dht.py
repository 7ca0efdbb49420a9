"""DHT I/O of one run: signed writes of our own records, validated reads of everyone's.

Every record sits under a subkey `<owner>[owner:<RSA public key>]`, hivemind's ownership marker, so
the DHT itself refuses changes not signed by that key. On top of that, readers check that the
owner named in the record is the one in the subkey and (`strict_identity`) that the signing key is
the peer's own libp2p key, so one peer cannot speak for another. Whatever fails is skipped and
counted in `Registry.rejected`; a bad record never raises out of a reader.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import dataclasses
import uuid
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import hivemind
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.utils import get_dht_time

from swarm.registry import keys
from swarm.registry.identity import (
    local_ssh_key,
    owner_subkey,
    peer_id_of_public_key,
    split_subkey,
)
from swarm.registry.node import RegistryError, create_dht, make_validators
from swarm.registry.records import (
    EventRecord,
    FlowRecord,
    LinkRecord,
    Manifest,
    PeerRecord,
    ProgressRecord,
    RecordError,
    is_tombstone,
    pack,
    pack_tombstone,
    unpack,
)

__all__ = ["Registry", "RegistryError", "create_dht", "make_validators"]

T = TypeVar("T")
Raw = Any  # what hivemind's DHT.get returns: None or ValueWithExpiration


def _find_validator(dht: hivemind.DHT) -> RSASignatureValidator:
    composite = getattr(dht, "_record_validator", None)
    for validator in getattr(composite, "_validators", []):
        if isinstance(validator, RSASignatureValidator):
            return validator
    raise ValueError("the DHT has no RSASignatureValidator; start it with swarm.registry.create_dht")


@dataclasses.dataclass
class _Entry:
    owner: str  # the subkey's owner prefix
    signer: str | None  # peer id derived from the signing key (None: not an RSA libp2p key)
    value: Any
    expiration: float


class Registry:
    """The records of run `run_id` on a hivemind DHT; blocking methods and `a...` async twins."""

    def __init__(
        self,
        dht: hivemind.DHT,
        run_id: str,
        *,
        validator: RSASignatureValidator | None = None,
        strict_identity: bool = True,
        timeout: float = 20.0,
    ) -> None:
        self.dht = dht
        self.run_id = keys.check_run_id(run_id)
        self.validator = validator or _find_validator(dht)
        self.peer_id = dht.peer_id.to_base58()
        self.strict_identity = strict_identity
        self.timeout = timeout
        self.rejected: collections.Counter[str] = collections.Counter()
        self.identity_bound = peer_id_of_public_key(local_ssh_key(self.validator)) == self.peer_id
        self._expirations: dict[tuple[str, bytes], float] = {}

    # ---- low level ----------------------------------------------------------------------------
    def _store_future(self, key: str, prefix: str, value: bytes, expiration: float):
        subkey = owner_subkey(prefix, self.validator)
        self._expirations[key, subkey] = max(expiration, self._expirations.get((key, subkey), 0.0))
        return self.dht.store(key, value, expiration, subkey=subkey, return_future=True)

    def _get_future(self, key: str):
        return self.dht.get(key, latest=True, return_future=True)

    def _wait(self, future) -> Any:
        try:
            return future.result(timeout=self.timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise RegistryError(f"the DHT did not answer within {self.timeout:g} s") from None

    async def _await(self, future) -> Any:
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), self.timeout)
        except asyncio.TimeoutError:
            raise RegistryError(f"the DHT did not answer within {self.timeout:g} s") from None

    def _entries(self, raw: Raw) -> list[_Entry]:
        """Owner-marked entries of a dictionary value; everything else is counted as unsigned."""
        if raw is None:
            return []
        if not isinstance(raw.value, dict):
            self.rejected["unsigned"] += 1
            return []
        out = []
        for subkey, item in raw.value.items():
            parts = split_subkey(subkey)
            if parts is None:
                self.rejected["unsigned"] += 1
                continue
            owner, ssh_key = parts
            if is_tombstone(item.value):
                continue
            out.append(_Entry(owner, peer_id_of_public_key(ssh_key), item.value, item.expiration_time))
        return out

    def _owned(self, entry: _Entry, claimed: str) -> bool:
        """Whether `claimed` (the record's author) may have written this entry."""
        if entry.owner != claimed or (self.strict_identity and entry.signer != claimed):
            self.rejected["foreign"] += 1
            return False
        return True

    def _parse(self, cls: type[T], entry: _Entry) -> T | None:
        try:
            return unpack(cls, entry.value)  # type: ignore[arg-type]
        except RecordError:
            self.rejected["malformed"] += 1
            return None

    def _expiry(self, ttl_s: float) -> float:
        if not ttl_s > 0:
            raise ValueError(f"ttl must be positive, got {ttl_s}")
        return get_dht_time() + ttl_s

    def _own(self, who: str, what: str) -> None:
        if who != self.peer_id:
            raise RecordError(f"this peer ({self.peer_id}) cannot publish {what} of {who}")

    # ---- parsers (pure given the raw DHT answer) ----------------------------------------------
    def _manifest_from(self, raw: Raw, initiator: str | None) -> Manifest | None:
        found = []
        for entry in self._entries(raw):
            m = self._parse(Manifest, entry)
            if m is None or not self._owned(entry, m.initiator):
                continue
            if m.run_id != self.run_id:
                self.rejected["misplaced"] += 1
            elif initiator is None or m.initiator == initiator:
                found.append(m)
        # Several initiators claiming one run id: the first one wins, the same everywhere.
        return min(found, key=lambda m: (m.created_at, m.initiator), default=None)

    def _peers_from(self, raw: Raw, stage: int) -> list[PeerRecord]:
        best: dict[str, tuple[float, PeerRecord]] = {}
        for entry in self._entries(raw):
            rec = self._parse(PeerRecord, entry)
            if rec is None or not self._owned(entry, rec.peer_id):
                continue
            if rec.stage != stage:
                self.rejected["misplaced"] += 1
                continue
            if rec.peer_id not in best or entry.expiration > best[rec.peer_id][0]:
                best[rec.peer_id] = (entry.expiration, rec)
        return [best[p][1] for p in sorted(best)]

    def _flow_from(self, raw: Raw, peer_id: str) -> FlowRecord | None:
        best: tuple[float, FlowRecord] | None = None
        for entry in self._entries(raw):
            rec = self._parse(FlowRecord, entry)
            if rec is None or not self._owned(entry, rec.peer_id):
                continue
            if rec.peer_id != peer_id:
                self.rejected["misplaced"] += 1
            elif best is None or entry.expiration > best[0]:
                best = (entry.expiration, rec)
        return best[1] if best else None

    def _progress_from(self, raw: Raw) -> list[ProgressRecord]:
        recs = [
            rec
            for e in self._entries(raw)
            if (rec := self._parse(ProgressRecord, e)) is not None and self._owned(e, rec.holder)
        ]
        return sorted(recs, key=lambda r: r.holder)

    def _events_from(self, raw: Raw) -> list[EventRecord]:
        out = []
        for entry in self._entries(raw):
            ev = self._parse(EventRecord, entry)
            reporter = entry.owner.split("/", 1)[0]
            if ev is None or not self._owned(dataclasses.replace(entry, owner=reporter), ev.reporter):
                continue
            out.append(ev)
        return sorted(out, key=lambda e: (e.at, e.peer_id, e.kind))

    def _links_from(self, raw: Raw, peer_id: str) -> list[LinkRecord]:
        out = []
        for entry in self._entries(raw):
            rec = self._parse(LinkRecord, entry)
            writer = dataclasses.replace(entry, owner=entry.owner.split("/", 1)[0])
            if rec is None or not self._owned(writer, rec.peer_id):
                continue
            if rec.peer_id != peer_id:
                self.rejected["misplaced"] += 1
            else:
                out.append(rec)
        return sorted(out, key=lambda r: r.other)

    # ---- writes: (key, subkey prefix, value, expiration) ----------------------------------------
    def _manifest_args(self, m: Manifest, expiration_s: float) -> tuple:
        self._own(m.initiator, "the manifest")
        if m.run_id != self.run_id:
            raise RecordError(f"manifest of run {m.run_id!r} does not belong to run {self.run_id!r}")
        return keys.manifest_key(self.run_id), m.initiator, pack(m), self._expiry(expiration_s)

    def _peer_args(self, rec: PeerRecord, ttl_s: float) -> tuple:
        self._own(rec.peer_id, "a peer record")
        return keys.stage_key(self.run_id, rec.stage), rec.peer_id, pack(rec), self._expiry(ttl_s)

    def _flow_args(self, rec: FlowRecord, ttl_s: float) -> tuple:
        self._own(rec.peer_id, "the flow state")
        return keys.flow_key(self.run_id, rec.peer_id), rec.peer_id, pack(rec), self._expiry(ttl_s)

    def _progress_args(self, rec: ProgressRecord, ttl_s: float) -> tuple:
        self._own(rec.holder, "progress")
        return keys.progress_key(self.run_id), rec.holder, pack(rec), self._expiry(ttl_s)

    def _event_args(self, ev: EventRecord, ttl_s: float) -> tuple:
        if ev.reporter:
            self._own(ev.reporter, "an event")
        ev = dataclasses.replace(ev, reporter=self.peer_id)
        prefix = f"{self.peer_id}/{uuid.uuid4().hex[:16]}"
        return keys.events_key(self.run_id), prefix, pack(ev), self._expiry(ttl_s)

    def _link_args(self, rec: LinkRecord, ttl_s: float) -> tuple:
        self._own(rec.peer_id, "a link measurement")
        prefix = f"{rec.peer_id}/{rec.other}"
        return keys.links_key(self.run_id, rec.peer_id), prefix, pack(rec), self._expiry(ttl_s)

    def _tombstone_args(self, peer_id: str, stage: int, current: Raw) -> tuple:
        key = keys.stage_key(self.run_id, stage)
        subkey = owner_subkey(peer_id, self.validator)
        # hivemind keeps the later expiration of a subkey, so the tombstone must outlive the record.
        latest = self._expirations.get((key, subkey), 0.0)
        if current is not None and isinstance(current.value, dict) and subkey in current.value:
            latest = max(latest, current.value[subkey].expiration_time)
        expiration = max(get_dht_time() + 1.0, latest + 1.0)
        return key, peer_id, pack_tombstone(peer_id, get_dht_time()), expiration

    # ---- blocking API ---------------------------------------------------------------------------
    def _put(self, args: tuple) -> bool:
        return bool(self._wait(self._store_future(*args)))

    def _fetch(self, key: str) -> Raw:
        return self._wait(self._get_future(key))

    def publish_manifest(self, m: Manifest, expiration_s: float) -> bool:
        return self._put(self._manifest_args(m, expiration_s))

    def get_manifest(self, initiator: str | None = None) -> Manifest | None:
        """The run's manifest, signed by its initiator (optionally: only from this initiator)."""
        return self._manifest_from(self._fetch(keys.manifest_key(self.run_id)), initiator)

    def publish_peer(self, rec: PeerRecord, ttl_s: float = 30) -> bool:
        return self._put(self._peer_args(rec, ttl_s))

    def withdraw_peer(self, peer_id: str, stage: int) -> bool:
        """Overwrite our record with a tombstone so readers drop us now rather than at TTL expiry."""
        self._own(peer_id, "a withdrawal")
        current = self._fetch(keys.stage_key(self.run_id, stage))
        return self._put(self._tombstone_args(peer_id, stage, current))

    def get_stage_peers(self, stage: int) -> list[PeerRecord]:
        return self._peers_from(self._fetch(keys.stage_key(self.run_id, stage)), stage)

    def get_all_peers(self, num_stages: int) -> dict[int, list[PeerRecord]]:
        """Peers of stages 0..num_stages-1 and the holders (-1), fetched in parallel."""
        stages = range(keys.HOLDER_STAGE, num_stages)
        futures = [self._get_future(keys.stage_key(self.run_id, s)) for s in stages]
        return {s: self._peers_from(self._wait(f), s) for s, f in zip(stages, futures)}

    def publish_flow(self, rec: FlowRecord, ttl_s: float = 30) -> bool:
        return self._put(self._flow_args(rec, ttl_s))

    def get_flow(self, peer_id: str) -> FlowRecord | None:
        return self._flow_from(self._fetch(keys.flow_key(self.run_id, peer_id)), peer_id)

    def get_flows(self, peer_ids: Iterable[str]) -> dict[str, FlowRecord]:
        peer_ids = list(peer_ids)
        futures = [self._get_future(keys.flow_key(self.run_id, p)) for p in peer_ids]
        found = {p: self._flow_from(self._wait(f), p) for p, f in zip(peer_ids, futures)}
        return {p: rec for p, rec in found.items() if rec is not None}

    def publish_progress(self, rec: ProgressRecord, ttl_s: float = 60) -> bool:
        return self._put(self._progress_args(rec, ttl_s))

    def get_progress(self) -> list[ProgressRecord]:
        return self._progress_from(self._fetch(keys.progress_key(self.run_id)))

    def publish_event(self, ev: EventRecord, ttl_s: float = 3600) -> bool:
        return self._put(self._event_args(ev, ttl_s))

    def get_events(self) -> list[EventRecord]:
        return self._events_from(self._fetch(keys.events_key(self.run_id)))

    def publish_link(self, rec: LinkRecord, ttl_s: float = 60) -> bool:
        return self._put(self._link_args(rec, ttl_s))

    def get_links(self, peer_id: str) -> list[LinkRecord]:
        return self._links_from(self._fetch(keys.links_key(self.run_id, peer_id)), peer_id)

    # ---- async API (for code inside a running event loop) ---------------------------------------
    async def _aput(self, args: tuple) -> bool:
        return bool(await self._await(self._store_future(*args)))

    async def _afetch(self, key: str) -> Raw:
        return await self._await(self._get_future(key))

    async def _afetch_many(self, keys_: list[str], parse: Callable[[Raw, int], T]) -> list[T]:
        raws = await asyncio.gather(*(self._afetch(k) for k in keys_))
        return [parse(raw, i) for i, raw in enumerate(raws)]

    async def apublish_manifest(self, m: Manifest, expiration_s: float) -> bool:
        return await self._aput(self._manifest_args(m, expiration_s))

    async def aget_manifest(self, initiator: str | None = None) -> Manifest | None:
        return self._manifest_from(await self._afetch(keys.manifest_key(self.run_id)), initiator)

    async def apublish_peer(self, rec: PeerRecord, ttl_s: float = 30) -> bool:
        return await self._aput(self._peer_args(rec, ttl_s))

    async def awithdraw_peer(self, peer_id: str, stage: int) -> bool:
        self._own(peer_id, "a withdrawal")
        current = await self._afetch(keys.stage_key(self.run_id, stage))
        return await self._aput(self._tombstone_args(peer_id, stage, current))

    async def aget_stage_peers(self, stage: int) -> list[PeerRecord]:
        return self._peers_from(await self._afetch(keys.stage_key(self.run_id, stage)), stage)

    async def aget_all_peers(self, num_stages: int) -> dict[int, list[PeerRecord]]:
        stages = list(range(keys.HOLDER_STAGE, num_stages))
        found = await self._afetch_many(
            [keys.stage_key(self.run_id, s) for s in stages], lambda raw, i: self._peers_from(raw, stages[i])
        )
        return dict(zip(stages, found))

    async def apublish_flow(self, rec: FlowRecord, ttl_s: float = 30) -> bool:
        return await self._aput(self._flow_args(rec, ttl_s))

    async def aget_flow(self, peer_id: str) -> FlowRecord | None:
        return self._flow_from(await self._afetch(keys.flow_key(self.run_id, peer_id)), peer_id)

    async def aget_flows(self, peer_ids: Iterable[str]) -> dict[str, FlowRecord]:
        peer_ids = list(peer_ids)
        keys_ = [keys.flow_key(self.run_id, p) for p in peer_ids]
        found = await self._afetch_many(keys_, lambda raw, i: self._flow_from(raw, peer_ids[i]))
        return {p: rec for p, rec in zip(peer_ids, found) if rec is not None}

    async def apublish_progress(self, rec: ProgressRecord, ttl_s: float = 60) -> bool:
        return await self._aput(self._progress_args(rec, ttl_s))

    async def aget_progress(self) -> list[ProgressRecord]:
        return self._progress_from(await self._afetch(keys.progress_key(self.run_id)))

    async def apublish_event(self, ev: EventRecord, ttl_s: float = 3600) -> bool:
        return await self._aput(self._event_args(ev, ttl_s))

    async def aget_events(self) -> list[EventRecord]:
        return self._events_from(await self._afetch(keys.events_key(self.run_id)))

    async def apublish_link(self, rec: LinkRecord, ttl_s: float = 60) -> bool:
        return await self._aput(self._link_args(rec, ttl_s))

    async def aget_links(self, peer_id: str) -> list[LinkRecord]:
        return self._links_from(await self._afetch(keys.links_key(self.run_id, peer_id)), peer_id)
