"""Schemas of the values stored on the DHT (DESIGN.md section 3): pure, no I/O.

Every value another peer wrote is untrusted input. Records validate themselves on construction, so
`from_dict` of anything malformed (wrong type, out of range, oversized) raises `RecordError` and a
reader can skip it instead of crashing. Values travel as msgpack maps with a schema version `"v"`
and a `"type"` tag, readable by any msgpack client.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import msgpack

SCHEMA_VERSION = 1
MAX_NAME = 128  # peer ids, names, regions, versions, run ids
MAX_DETAIL = 1024  # free text (event detail)
MAX_ADDRESSES = 16
MAX_ADDRESS = 512
MAX_STAGES = 1024
MAX_BLOCK = 1 << 20
MAX_ENTRIES = 1024  # labels / cheapest / worst / routes / extra entries
MAX_RECORD_BYTES = 256 * 1024  # a packed value (the manifest with its model config is the largest)
MAX_INT = 2**62

ROLES = ("stage", "holder")
STATES = ("loading", "serving", "waiting", "moving", "leaving")
SERVING_STATES = ("serving", "moving")  # "moving": a move announced, not committed; it serves on
EVENT_KINDS = ("join", "leave", "crash", "reroute", "reexecute")


class RecordError(ValueError):
    """A DHT value that does not match its schema; the message names the field and the problem."""


def _fail(cls: str, name: str, problem: str) -> RecordError:
    return RecordError(f"{cls}.{name}: {problem}")


def _str(cls: str, name: str, value: Any, *, limit: int = MAX_NAME, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise _fail(cls, name, f"expected a string, got {type(value).__name__}")
    if len(value) > limit:
        raise _fail(cls, name, f"longer than {limit} characters ({len(value)})")
    if not value and not empty:
        raise _fail(cls, name, "must not be empty")
    return value


def _int(cls: str, name: str, value: Any, lo: int = 0, hi: int = MAX_INT) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(cls, name, f"expected an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        raise _fail(cls, name, f"{value} is outside [{lo}, {hi}]")
    return value


def _float(
    cls: str, name: str, value: Any, lo: float = 0.0, hi: float = math.inf, finite: bool = True
) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(cls, name, f"expected a number, got {type(value).__name__}")
    value = float(value)
    if math.isnan(value) or math.isinf(value):
        if finite:
            raise _fail(cls, name, f"must be finite, got {value}")
        return value
    if not lo <= value <= hi:
        raise _fail(cls, name, f"{value} is outside [{lo}, {hi}]")
    return value


def _choice(cls: str, name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise _fail(cls, name, f"expected one of {', '.join(choices)}, got {value!r}")
    return value


def _mapping(cls: str, name: str, value: Any, check_value, *, limit: int = MAX_ENTRIES) -> dict:
    """A str-keyed dict with bounded size whose values pass `check_value(key, value)`."""
    if not isinstance(value, dict):
        raise _fail(cls, name, f"expected a map, got {type(value).__name__}")
    if len(value) > limit:
        raise _fail(cls, name, f"more than {limit} entries ({len(value)})")
    out = {}
    for key, item in value.items():
        _str(cls, f"{name} key", key)
        out[key] = check_value(key, item)
    return out


def _free_dict(cls: str, name: str, value: Any, *, limit_bytes: int = 64 * 1024) -> dict:
    """A str-keyed dict of plain msgpack data (model config, train config, extras), size-bounded."""
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _fail(cls, name, "expected a map with string keys")
    try:
        size = len(msgpack.packb(value, use_bin_type=True))
    except (TypeError, ValueError, OverflowError) as exc:
        raise _fail(cls, name, f"not plain msgpack data ({exc})") from None
    if size > limit_bytes:
        raise _fail(cls, name, f"{size} bytes packed, more than {limit_bytes}")
    return dict(value)


def _pair(cls: str, name: str, value: Any) -> tuple[int, int]:
    """A block range [start, end) with start < end."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise _fail(cls, name, f"expected [start, end], got {value!r}")
    start = _int(cls, name, value[0], 0, MAX_BLOCK)
    end = _int(cls, name, value[1], 0, MAX_BLOCK)
    if start >= end:
        raise _fail(cls, name, f"empty block range [{start}, {end})")
    return (start, end)


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)


R = TypeVar("R", bound="_Record")


class _Record:
    """Shared (de)serialisation: field dicts in, validated frozen record out."""

    TYPE: ClassVar[str] = ""

    def to_dict(self) -> dict:
        """Plain msgpack-ready dict (tuples become lists)."""
        return _plain(dataclasses.asdict(self))  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls: type[R], raw: Any) -> R:
        """Validate an untrusted dict; unknown keys are ignored so newer writers stay readable."""
        if not isinstance(raw, dict):
            raise RecordError(f"{cls.__name__}: expected a map, got {type(raw).__name__}")
        kwargs = {}
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            if f.name in raw:
                kwargs[f.name] = raw[f.name]
            elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise RecordError(f"{cls.__name__}.{f.name}: missing")
        try:
            return cls(**kwargs)
        except RecordError:
            raise
        except (TypeError, ValueError, KeyError) as exc:  # defensive: never leak other errors
            raise RecordError(f"{cls.__name__}: {exc}") from None


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Manifest(_Record):
    """What a run is: written once by the initiator, read by every peer before it joins."""

    TYPE: ClassVar[str] = "manifest"

    run_id: str
    protocol_version: int
    model_config: dict
    layout: list[tuple[int, int]]
    microbatch_size: int
    seq_len: int
    hidden_size: int
    train: dict
    data_id: str
    seed: int
    initiator: str
    created_at: float

    def __post_init__(self) -> None:
        c = "Manifest"
        _str(c, "run_id", self.run_id)
        _int(c, "protocol_version", self.protocol_version, 0, 1 << 16)
        _set(self, "model_config", _free_dict(c, "model_config", self.model_config, limit_bytes=128 * 1024))
        if not isinstance(self.layout, (list, tuple)) or not 1 <= len(self.layout) <= MAX_STAGES:
            raise _fail(c, "layout", f"expected 1..{MAX_STAGES} block ranges")
        layout = [_pair(c, f"layout[{i}]", item) for i, item in enumerate(self.layout)]
        for i in range(1, len(layout)):
            if layout[i][0] != layout[i - 1][1]:
                raise _fail(c, "layout", f"stage {i} starts at block {layout[i][0]}, not {layout[i - 1][1]}")
        _set(self, "layout", layout)
        _int(c, "microbatch_size", self.microbatch_size, 1, 1 << 20)
        _int(c, "seq_len", self.seq_len, 1, 1 << 24)
        _int(c, "hidden_size", self.hidden_size, 1, 1 << 20)
        _set(self, "train", _free_dict(c, "train", self.train))
        _str(c, "data_id", self.data_id, limit=MAX_DETAIL)
        _int(c, "seed", self.seed, -MAX_INT, MAX_INT)
        _str(c, "initiator", self.initiator)
        _set(self, "created_at", _float(c, "created_at", self.created_at))

    @property
    def num_stages(self) -> int:
        return len(self.layout)


@dataclass(frozen=True)
class PeerRecord(_Record):
    """One peer's announcement under its stage key, refreshed well within its TTL."""

    TYPE: ClassVar[str] = "peer"

    peer_id: str
    role: str
    stage: int
    blocks: tuple[int, int]
    throughput: float
    capacity: float
    free_memory: int
    region: str
    version: str
    protocol_version: int
    addresses: tuple[str, ...]
    joined_at: float
    state: str
    iteration: int
    name: str = ""

    def __post_init__(self) -> None:
        c = "PeerRecord"
        _str(c, "peer_id", self.peer_id)
        _choice(c, "role", self.role, ROLES)
        _int(c, "stage", self.stage, -1, MAX_STAGES)
        if (self.role == "holder") != (self.stage == -1):
            raise _fail(c, "stage", f"a {self.role} cannot announce stage {self.stage} (holders use -1)")
        if self.role == "holder" and isinstance(self.blocks, (list, tuple)) and len(self.blocks) == 2:
            blocks = (_int(c, "blocks", self.blocks[0], 0, MAX_BLOCK), _int(c, "blocks", self.blocks[1], 0))
        else:
            blocks = _pair(c, "blocks", self.blocks)
        _set(self, "blocks", blocks)
        _set(self, "throughput", _float(c, "throughput", self.throughput, 0.0, 1e9))
        _set(self, "capacity", _float(c, "capacity", self.capacity, 0.0, 1e9))
        _int(c, "free_memory", self.free_memory, 0, 1 << 60)
        _str(c, "region", self.region, empty=True)
        _str(c, "version", self.version, empty=True)
        _int(c, "protocol_version", self.protocol_version, 0, 1 << 16)
        if not isinstance(self.addresses, (list, tuple)) or len(self.addresses) > MAX_ADDRESSES:
            raise _fail(c, "addresses", f"expected a list of at most {MAX_ADDRESSES} multiaddrs")
        _set(
            self,
            "addresses",
            tuple(_str(c, "addresses", a, limit=MAX_ADDRESS) for a in self.addresses),
        )
        _set(self, "joined_at", _float(c, "joined_at", self.joined_at))
        _choice(c, "state", self.state, STATES)
        _int(c, "iteration", self.iteration)
        _str(c, "name", self.name, empty=True)

    @property
    def serves(self) -> bool:
        """Whether senders may route to this peer (it serves, or has only announced a move)."""
        return self.state in SERVING_STATES


@dataclass(frozen=True)
class ProgressRecord(_Record):
    """A data holder's view of training progress, for `swarm status` and the initiator's display."""

    TYPE: ClassVar[str] = "progress"

    holder: str
    iteration: int
    microbatches: int
    loss: float
    tokens_per_s: float
    seconds: float
    updated_at: float
    extra: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        c = "ProgressRecord"
        _str(c, "holder", self.holder)
        _int(c, "iteration", self.iteration)
        _int(c, "microbatches", self.microbatches)
        _set(self, "loss", _float(c, "loss", self.loss, -math.inf, math.inf, finite=False))
        _set(self, "tokens_per_s", _float(c, "tokens_per_s", self.tokens_per_s))
        _set(self, "seconds", _float(c, "seconds", self.seconds))
        _set(self, "updated_at", _float(c, "updated_at", self.updated_at))
        _set(self, "extra", _free_dict(c, "extra", self.extra, limit_bytes=16 * 1024))


def _rate(cls: str, name: str):
    return lambda key, value: _float(cls, f"{name}[{key}]", value, -1e12, 1e12)


@dataclass(frozen=True)
class FlowRecord(_Record):
    """A peer's routing state (swarm/flow): height labels, costs to the sink and its routes."""

    TYPE: ClassVar[str] = "flow"

    peer_id: str
    version: int
    spare: float
    labels: dict[str, int]
    cheapest: dict[str, float]
    worst: dict[str, float]
    routes: dict[str, dict[str, float]]

    def __post_init__(self) -> None:
        c = "FlowRecord"
        _str(c, "peer_id", self.peer_id)
        _int(c, "version", self.version)
        _set(self, "spare", _float(c, "spare", self.spare, -1e12, 1e12))
        _set(self, "labels", _mapping(c, "labels", self.labels, lambda k, v: _int(c, f"labels[{k}]", v)))
        _set(self, "cheapest", _mapping(c, "cheapest", self.cheapest, _rate(c, "cheapest")))
        _set(self, "worst", _mapping(c, "worst", self.worst, _rate(c, "worst")))
        routes = _mapping(
            c, "routes", self.routes, lambda k, v: _mapping(c, f"routes[{k}]", v, _rate(c, f"routes[{k}]"))
        )
        if sum(len(v) for v in routes.values()) > MAX_ENTRIES:
            raise _fail(c, "routes", f"more than {MAX_ENTRIES} (holder, next hop) entries")
        _set(self, "routes", routes)


@dataclass(frozen=True)
class EventRecord(_Record):
    """One entry of the churn timeline; `reporter` is who saw it (a crash is reported by a neighbour)."""

    TYPE: ClassVar[str] = "event"

    kind: str
    peer_id: str
    stage: int
    at: float
    detail: str = ""
    reporter: str = ""

    def __post_init__(self) -> None:
        c = "EventRecord"
        _choice(c, "kind", self.kind, EVENT_KINDS)
        _str(c, "peer_id", self.peer_id)
        _int(c, "stage", self.stage, -1, MAX_STAGES)
        _set(self, "at", _float(c, "at", self.at))
        _str(c, "detail", self.detail, limit=MAX_DETAIL, empty=True)
        _str(c, "reporter", self.reporter, empty=True)


@dataclass(frozen=True)
class LinkRecord(_Record):
    """A link measurement from the writing peer to `other` (for the GWTF edge cost)."""

    TYPE: ClassVar[str] = "link"

    peer_id: str
    other: str
    latency_s: float
    bandwidth: float  # bytes/s
    measured_at: float

    def __post_init__(self) -> None:
        c = "LinkRecord"
        _str(c, "peer_id", self.peer_id)
        _str(c, "other", self.other)
        _set(self, "latency_s", _float(c, "latency_s", self.latency_s, 0.0, 3600.0))
        _set(self, "bandwidth", _float(c, "bandwidth", self.bandwidth, 0.0, 1e15))
        _set(self, "measured_at", _float(c, "measured_at", self.measured_at))


RECORD_TYPES: dict[str, type[_Record]] = {
    cls.TYPE: cls for cls in (Manifest, PeerRecord, ProgressRecord, FlowRecord, EventRecord, LinkRecord)
}
TOMBSTONE = "tombstone"


def pack(record: _Record) -> bytes:
    """msgpack bytes of the record with its schema version and type tag."""
    return msgpack.packb({"v": SCHEMA_VERSION, "type": record.TYPE, **record.to_dict()}, use_bin_type=True)


def pack_tombstone(owner: str, at: float) -> bytes:
    """The value a peer stores over its own record to withdraw it before the TTL runs out."""
    return msgpack.packb({"v": SCHEMA_VERSION, "type": TOMBSTONE, "owner": owner, "at": at})


def _load(raw: Any) -> dict:
    if not isinstance(raw, (bytes, bytearray)):
        raise RecordError(f"expected packed bytes, got {type(raw).__name__}")
    if len(raw) > MAX_RECORD_BYTES:
        raise RecordError(f"value of {len(raw)} bytes is larger than {MAX_RECORD_BYTES}")
    try:
        data = msgpack.unpackb(bytes(raw), raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises many types (ExtraData, FormatError, ValueError, ...)
        raise RecordError(f"not a msgpack value ({type(exc).__name__})") from None
    if not isinstance(data, dict):
        raise RecordError(f"expected a map, got {type(data).__name__}")
    if data.get("v") != SCHEMA_VERSION:
        raise RecordError(f"unsupported schema version {data.get('v')!r} (this peer reads {SCHEMA_VERSION})")
    return data


def is_tombstone(raw: Any) -> bool:
    """True for a withdrawn record (not an error: the owner left cleanly)."""
    try:
        return _load(raw).get("type") == TOMBSTONE
    except RecordError:
        return False


def unpack(cls: type[R], raw: Any) -> R:
    """Validated record of type `cls` from untrusted bytes; RecordError on anything malformed."""
    data = _load(raw)
    kind = data.get("type")
    if kind != cls.TYPE:
        raise RecordError(f"expected a {cls.TYPE} record, got {kind!r}")
    return cls.from_dict({k: v for k, v in data.items() if k not in ("v", "type")})
