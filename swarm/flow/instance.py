"""A routing instance: stages, peers, data holders and the links between them.

Pure data plus validation. The live swarm builds an `Instance` from DHT records, the simulator from
a scenario, the benchmark from a JSON file; every routing function takes one.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

INF = float("inf")

GIB = float(1 << 30)
MB = 1e6


class InstanceError(ValueError):
    """An instance (file, dict or event) that cannot be routed; the message says why."""


@dataclass(frozen=True)
class PeerSpec:
    """A stage server: serves one stage, carries `capacity` microbatches/s, `compute_s` per microbatch."""

    id: str
    stage: int
    capacity: float
    compute_s: float
    region: str | None = None


@dataclass(frozen=True)
class HolderSpec:
    """A data holder: source and sink of its own microbatches, wants `demand` microbatches/s."""

    id: str
    demand: float
    compute_s: float
    region: str | None = None


@dataclass(frozen=True)
class Link:
    """One direction of a link: one-way latency in seconds and bandwidth in bytes/s."""

    latency_s: float
    bandwidth_bytes_s: float


@dataclass(frozen=True)
class GeoMatrix:
    """Measured latency/bandwidth between cloud regions (swarm/data/geo_regions.json)."""

    regions: tuple[str, ...]
    same_region: Link
    pairs: Mapping[tuple[str, str], Link]

    def link(self, a: str, b: str) -> Link:
        if a == b:
            return self.same_region
        return self.pairs[(a, b)]


@lru_cache(maxsize=1)
def geo_matrix() -> GeoMatrix:
    """Load the 12-region matrix shipped with the package.

    The source lists NL-London at 0.000237 GiB/s, a thousand times below every neighbouring European
    link (~0.24 GiB/s). We treat it as a typo in the published table and use 0.237 GiB/s.
    """
    raw = json.loads(resources.files("swarm.data").joinpath("geo_regions.json").read_text())
    same = Link(raw["same_region"]["latency_ms"] / 1e3, raw["same_region"]["bandwidth_gib_s"] * GIB)
    pairs: dict[tuple[str, str], Link] = {}
    for entry in raw["links"]:
        bandwidth = entry["bandwidth_gib_s"]
        if {entry["a"], entry["b"]} == {"NL", "London"} and bandwidth < 0.001:
            bandwidth *= 1000.0  # typo in the source table, see the docstring
        link = Link(entry["latency_ms"] / 1e3, bandwidth * GIB)
        pairs[(entry["a"], entry["b"])] = link
        pairs[(entry["b"], entry["a"])] = link
    return GeoMatrix(tuple(raw["regions"]), same, pairs)


def known_region(region: str) -> bool:
    """Whether `region` is one of the geo matrix's regions (swarm/data/geo_regions.json)."""
    return region in geo_matrix().regions


def link_cost(compute_a: float, compute_b: float, ab: Link, ba: Link, activation_bytes: float) -> float:
    """GWTF's edge cost d(a,b) in seconds: compute, latency and transfer, averaged fwd/bwd (the
    routing engine's instances and the live peers' measured neighbours both use this)."""
    return (
        (compute_a + compute_b) / 2.0
        + (ab.latency_s + ba.latency_s) / 2.0
        + 2.0 * activation_bytes / (ab.bandwidth_bytes_s + ba.bandwidth_bytes_s)
    )


def link_rate(ab: Link, ba: Link, activation_bytes: float, stages: int) -> float:
    """Microbatches/s an edge over links ab (activations) and ba (gradients back) can carry: the
    slower direction bounds it. With a single stage a microbatch crosses the same pair of links twice
    (holder -> peer, then peer -> holder back to its own holder), so each edge gets half of it."""
    shared = 2.0 if stages == 1 else 1.0
    return min(ab.bandwidth_bytes_s, ba.bandwidth_bytes_s) / activation_bytes / shared


@dataclass
class Instance:
    """Everything the routing engine needs to know about a swarm at one moment.

    Links are looked up by node id: either from the regions of the two nodes (`geo=True`) or from
    explicit per-pair links. Explicit links are symmetric unless both directions are given.
    """

    stages: int
    activation_bytes: float
    holders: tuple[HolderSpec, ...]
    peers: tuple[PeerSpec, ...]
    geo: bool = True
    explicit_links: dict[tuple[str, str], Link] = field(default_factory=dict)
    link_capacity: bool = False  # links carry at most bandwidth / activation_bytes microbatches/s

    def __post_init__(self) -> None:
        self._by_id: dict[str, PeerSpec | HolderSpec] = {}
        self._by_stage: list[list[PeerSpec]] = [[] for _ in range(max(self.stages, 0))]
        self.validate()
        self._cost_cache: dict[tuple[str, str], float] = {}
        self._cap_cache: dict[tuple[str, str], float] = {}

    # ------------------------------------------------------------------ lookups
    def node(self, node_id: str) -> PeerSpec | HolderSpec:
        try:
            return self._by_id[node_id]
        except KeyError:
            raise InstanceError(f"unknown node id {node_id!r}") from None

    def peers_of(self, stage: int) -> list[PeerSpec]:
        return self._by_stage[stage]

    def holder_ids(self) -> list[str]:
        return [h.id for h in self.holders]

    def link(self, a: str, b: str) -> Link:
        """The directed link a -> b."""
        if self.geo:
            ra, rb = self.node(a).region, self.node(b).region
            return geo_matrix().link(ra, rb)  # regions validated in validate()
        if (a, b) in self.explicit_links:
            return self.explicit_links[(a, b)]
        if (b, a) in self.explicit_links:
            return self.explicit_links[(b, a)]
        raise InstanceError(f"no link given between {a!r} and {b!r}")

    def edge_cost(self, a: str, b: str) -> float:
        """GWTF's edge cost d(a,b) in seconds: compute, latency and transfer, averaged fwd/bwd."""
        key = (a, b) if a <= b else (b, a)
        cached = self._cost_cache.get(key)
        if cached is not None:
            return cached
        na, nb = self.node(a), self.node(b)
        cost = link_cost(na.compute_s, nb.compute_s, self.link(a, b), self.link(b, a), self.activation_bytes)
        self._cost_cache[key] = cost
        return cost

    def edge_capacity(self, a: str, b: str) -> float:
        """Microbatches/s the edge a -> b can carry (`link_rate`; inf without link limits)."""
        if not self.link_capacity:
            return INF
        key = (a, b) if a <= b else (b, a)
        cached = self._cap_cache.get(key)
        if cached is None:
            rate = link_rate(self.link(a, b), self.link(b, a), self.activation_bytes, self.stages)
            cached = self._cap_cache[key] = rate
        return cached

    # ------------------------------------------------------------ modification
    def replace(
        self,
        *,
        peers: Sequence[PeerSpec] | None = None,
        holders: Sequence[HolderSpec] | None = None,
        explicit_links: Mapping[tuple[str, str], Link] | None = None,
    ) -> Instance:
        """A new instance with other peers, holders or links (churn), same shape."""
        return Instance(
            stages=self.stages,
            activation_bytes=self.activation_bytes,
            holders=tuple(self.holders if holders is None else holders),
            peers=tuple(self.peers if peers is None else peers),
            geo=self.geo,
            explicit_links=dict(self.explicit_links if explicit_links is None else explicit_links),
            link_capacity=self.link_capacity,
        )

    def links_like(self, mate: str, newcomer: str) -> dict[tuple[str, str], Link]:
        """The explicit links of `mate`, copied for `newcomer`: where links are given per pair (not by
        region), a peer that joins churn scenarios stands where a stage mate stands."""
        copied = {}
        for (a, b), link in self.explicit_links.items():
            if mate in (a, b):
                copied[(newcomer if a == mate else a, newcomer if b == mate else b)] = link
        return copied

    # -------------------------------------------------------------- validation
    def validate(self) -> None:
        if not isinstance(self.stages, int) or self.stages < 1:
            raise InstanceError(f"stages must be a positive integer, got {self.stages!r}")
        if not (self.activation_bytes > 0):
            raise InstanceError(f"activation_bytes must be positive, got {self.activation_bytes!r}")
        if not self.holders:
            raise InstanceError("an instance needs at least one data holder")
        regions = set(geo_matrix().regions)
        for node in (*self.holders, *self.peers):
            if not node.id or not isinstance(node.id, str):
                raise InstanceError(f"node id must be a non-empty string, got {node.id!r}")
            if node.id in self._by_id:
                raise InstanceError(f"duplicate node id {node.id!r}")
            self._by_id[node.id] = node
            if not (node.compute_s >= 0) or node.compute_s == float("inf"):
                raise InstanceError(f"{node.id}: compute_s must be a finite number >= 0")
            if self.geo and node.region not in regions:
                raise InstanceError(
                    f"{node.id}: unknown region {node.region!r} (known: {', '.join(sorted(regions))})"
                )
        for holder in self.holders:
            if not (holder.demand >= 0) or holder.demand == float("inf"):
                raise InstanceError(f"{holder.id}: demand must be a finite number >= 0")
        for peer in self.peers:
            if not isinstance(peer.stage, int) or not 0 <= peer.stage < self.stages:
                raise InstanceError(f"{peer.id}: stage {peer.stage!r} outside 0..{self.stages - 1}")
            if not (peer.capacity >= 0) or peer.capacity == float("inf"):
                raise InstanceError(f"{peer.id}: capacity must be a finite number >= 0")
            self._by_stage[peer.stage].append(peer)
        empty = [s for s, peers in enumerate(self._by_stage) if not peers]
        if empty:
            raise InstanceError(f"stage(s) {empty} have no peers")
        for (a, b), link in self.explicit_links.items():
            for end in (a, b):
                if end not in self._by_id:
                    raise InstanceError(f"link names unknown node {end!r}")
            if not (link.latency_s >= 0) or not (link.bandwidth_bytes_s > 0):
                raise InstanceError(f"link {a}-{b}: latency must be >= 0 and bandwidth > 0")
        if not self.geo:
            self._check_explicit_links_cover_graph()

    def _check_explicit_links_cover_graph(self) -> None:
        ends = [[h.id for h in self.holders], *([p.id for p in s] for s in self._by_stage)]
        ends.append(ends[0])
        for left, right in zip(ends, ends[1:]):
            for a in left:
                for b in right:
                    if (a, b) not in self.explicit_links and (b, a) not in self.explicit_links:
                        raise InstanceError(f"no link given between {a!r} and {b!r}")


# ---------------------------------------------------------------- JSON format
def _number(raw: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InstanceError(f"{where}: {key!r} must be a number, got {value!r}")
    return float(value)


def instance_from_dict(raw: Any) -> Instance:
    """Parse the documented JSON instance format (see README, "Instance format (JSON)")."""
    if not isinstance(raw, Mapping):
        raise InstanceError("an instance must be a JSON object")
    for key in ("stages", "activation_bytes", "holders", "peers"):
        if key not in raw:
            raise InstanceError(f"instance is missing {key!r}")
    stages = raw["stages"]
    if isinstance(stages, bool) or not isinstance(stages, int):
        raise InstanceError(f"'stages' must be an integer, got {stages!r}")
    holders_raw, peers_raw = raw["holders"], raw["peers"]
    if not isinstance(holders_raw, list) or not isinstance(peers_raw, list):
        raise InstanceError("'holders' and 'peers' must be lists")
    holders = []
    for i, h in enumerate(holders_raw):
        if not isinstance(h, Mapping) or "id" not in h:
            raise InstanceError(f"holder #{i} must be an object with an 'id'")
        where = f"holder {h['id']!r}"
        holders.append(
            HolderSpec(
                id=str(h["id"]),
                demand=_number(h, "demand", where),
                compute_s=_number(h, "compute_s", where, 0.0),
                region=h.get("region"),
            )
        )
    peers = []
    for i, p in enumerate(peers_raw):
        if not isinstance(p, Mapping) or "id" not in p:
            raise InstanceError(f"peer #{i} must be an object with an 'id'")
        where = f"peer {p['id']!r}"
        stage = p.get("stage")
        if isinstance(stage, bool) or not isinstance(stage, int):
            raise InstanceError(f"{where}: 'stage' must be an integer, got {stage!r}")
        peers.append(
            PeerSpec(
                id=str(p["id"]),
                stage=stage,
                capacity=_number(p, "capacity", where),
                compute_s=_number(p, "compute_s", where, 0.0),
                region=p.get("region"),
            )
        )
    links = raw.get("links", "geo")
    explicit: dict[tuple[str, str], Link] = {}
    if links == "geo":
        geo = True
    elif isinstance(links, list):
        geo = False
        for i, entry in enumerate(links):
            if not isinstance(entry, Mapping) or "a" not in entry or "b" not in entry:
                raise InstanceError(f"link #{i} must be an object with 'a' and 'b'")
            where = f"link {entry['a']}-{entry['b']}"
            explicit[(str(entry["a"]), str(entry["b"]))] = Link(
                _number(entry, "latency_ms", where) / 1e3,
                _number(entry, "bandwidth_mb_s", where) * MB,
            )
    else:
        raise InstanceError(f"'links' must be \"geo\" or a list of links, got {links!r}")
    link_capacity = raw.get("link_capacity", False)
    if not isinstance(link_capacity, bool):
        raise InstanceError(f"'link_capacity' must be true or false, got {link_capacity!r}")
    return Instance(
        stages=stages,
        activation_bytes=_number(raw, "activation_bytes", "instance"),
        holders=tuple(holders),
        peers=tuple(peers),
        geo=geo,
        explicit_links=explicit,
        link_capacity=link_capacity,
    )


def load_instance(path: str | Path) -> Instance:
    """Read an instance file; every problem becomes an `InstanceError` with a one-line message."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise InstanceError(f"cannot read instance file {path}: {exc.strerror}") from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InstanceError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    return instance_from_dict(raw)
