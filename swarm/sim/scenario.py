"""Scenarios: what a simulated run is made of, from a JSON/TOML file or a built-in name.

Validation happens here, once, with one-line messages that name the offending key, so the CLI can
print them as they are and the simulator can trust its input.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import tomllib

from swarm.flow.instance import geo_matrix
from swarm.routing.demand import POLICIES
from swarm.sim.allreduce import AVERAGING
from swarm.sim.hardware import DEFAULT_MFU, PRESETS, HardwareError, ModelSpec, gpu, model_from_raw


class ScenarioError(ValueError):
    """A scenario that cannot be simulated; the message says which key and why."""


@dataclass(frozen=True)
class PeerEntry:
    """One explicitly listed peer; `stage=None` lets the placement rule pick."""

    gpu: str
    region: str
    stage: int | None = None


@dataclass(frozen=True)
class Scenario:
    name: str
    model: ModelSpec
    stages: int
    peer_count: int
    regions: tuple[str, ...]
    gpu_mix: tuple[tuple[str, float], ...]
    holder_regions: tuple[str, ...]
    holder_gpu: str
    failure_rate_h: float
    join_rate_h: float
    iterations: int
    global_batch: int  # microbatches per iteration, split evenly over the holders
    max_time_s: float | None
    mfu: float
    seed: int
    explicit_peers: tuple[PeerEntry, ...] = ()
    averaging: str = "direct"  # how replicas exchange gradients (swarm/sim/allreduce.py)
    holder_demand: str = "all"  # what holders ask the routing for (swarm/routing/demand.py)
    link_capacity: bool = True  # the routing knows links carry at most bandwidth / activation bytes
    # The flow-graph figure shows the first iteration that starts at or after this simulated second
    # (None: the middle of the run, by iterations or by `max_time_s`, whichever comes first).
    flow_graph_at_s: float | None = None

    def with_(self, **changes: Any) -> Scenario:
        return replace(self, **changes)


_TOP = {
    "name", "model", "stages", "peers", "holders", "churn", "training", "mfu", "seed", "averaging",
    "holder_demand", "link_capacity", "flow_graph_at_s",
}  # fmt: skip
GEO10 = ("Belgium", "Canada", "Germany", "Iowa", "Japan", "LA", "London", "NL", "Oregon", "Singapore")
HETERO_MIX = {"A100-80GB": 0.1, "A100-40GB": 0.1, "L4": 0.2, "RTX-4090": 0.2, "RTX-3090": 0.2, "T4": 0.2}


def _keys(raw: Any, allowed: set[str], where: str) -> Mapping[str, Any]:
    if not isinstance(raw, Mapping):
        raise ScenarioError(f"{where} must be an object")
    unknown = sorted(set(raw) - allowed)
    if unknown:
        raise ScenarioError(f"{where}: unknown key {unknown[0]!r} (allowed: {', '.join(sorted(allowed))})")
    return raw


def _int(raw: Mapping[str, Any], key: str, where: str, default: int | None = None, low: int = 1) -> int:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ScenarioError(f"{where}: {key!r} must be an integer >= {low}, got {value!r}")
    return value


def _float(raw: Mapping[str, Any], key: str, where: str, default: float | None = None) -> float:
    value = raw.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
        raise ScenarioError(f"{where}: {key!r} must be a number >= 0, got {value!r}")
    if value == float("inf"):
        raise ScenarioError(f"{where}: {key!r} must be finite")
    return float(value)


def _region(value: Any, where: str) -> str:
    known = geo_matrix().regions
    if value not in known:
        raise ScenarioError(f"{where}: unknown region {value!r} (known: {', '.join(known)})")
    return value


def _gpu(value: Any, where: str) -> str:
    try:
        return gpu(value).name
    except (HardwareError, TypeError) as exc:
        raise ScenarioError(f"{where}: {exc}") from None


def _regions(raw: Any, where: str) -> tuple[str, ...]:
    if raw == "geo-10":
        return GEO10
    if not isinstance(raw, list) or not raw:
        raise ScenarioError(f"{where}: 'regions' must be a non-empty list of regions or \"geo-10\"")
    return tuple(_region(r, where) for r in raw)


def _peers(raw: Any, stages: int) -> tuple[int, tuple[str, ...], tuple[tuple[str, float], ...], tuple]:
    if isinstance(raw, list):
        entries = []
        for i, p in enumerate(raw):
            where = f"peers[{i}]"
            p = _keys(p, {"gpu", "region", "stage"}, where)
            stage = p.get("stage")
            if stage is not None:
                stage = _int(p, "stage", where, low=0)
                if stage >= stages:
                    raise ScenarioError(f"{where}: stage {stage} outside 0..{stages - 1}")
            entries.append(PeerEntry(_gpu(p.get("gpu"), where), _region(p.get("region"), where), stage))
        if not entries:
            raise ScenarioError("peers: the list is empty")
        regions = tuple(dict.fromkeys(e.region for e in entries))
        mix = tuple((g, 1.0) for g in dict.fromkeys(e.gpu for e in entries))
        return len(entries), regions, mix, tuple(entries)
    raw = _keys(raw, {"count", "regions", "gpus"}, "peers")
    count = _int(raw, "count", "peers")
    regions = _regions(raw.get("regions", ["Iowa"]), "peers")
    gpus = raw.get("gpus", {"A100-80GB": 1.0})
    if isinstance(gpus, str):
        gpus = {gpus: 1.0}
    if not isinstance(gpus, Mapping) or not gpus:
        raise ScenarioError("peers: 'gpus' must be a GPU name or an object {gpu: weight}")
    mix = tuple((_gpu(name, "peers.gpus"), _float(gpus, name, "peers.gpus")) for name in gpus)
    if sum(w for _, w in mix) <= 0:
        raise ScenarioError("peers.gpus: the weights must not all be zero")
    return count, regions, mix, ()


def scenario_from_dict(raw: Any, default_name: str = "scenario") -> Scenario:
    """Parse and validate the documented scenario format (README, "Scenario file")."""
    raw = _keys(raw, _TOP, "scenario")
    for key in ("model", "stages", "peers"):
        if key not in raw:
            raise ScenarioError(f"scenario is missing {key!r}")
    try:
        model = model_from_raw(raw["model"])
    except HardwareError as exc:
        raise ScenarioError(str(exc)) from None
    stages = _int(raw, "stages", "scenario")
    if stages > model.layers:
        raise ScenarioError(f"stages: {stages} stages but the model has only {model.layers} layers")
    count, regions, mix, entries = _peers(raw["peers"], stages)
    holders = _keys(raw.get("holders", {}), {"regions", "gpu"}, "holders")
    holder_regions = _regions(holders.get("regions", [regions[0]]), "holders")
    churn = _keys(raw.get("churn", {}), {"failure_rate_per_hour", "join_rate_per_hour"}, "churn")
    fail = _float(churn, "failure_rate_per_hour", "churn", 0.0)
    join = _float(churn, "join_rate_per_hour", "churn", fail)
    if fail > 0 and join <= 0:
        raise ScenarioError("churn: a run with failures needs join_rate_per_hour > 0, or it may never finish")
    training = _keys(raw.get("training", {}), {"iterations", "global_batch", "max_time_s"}, "training")
    max_time = training.get("max_time_s")
    if max_time is not None:
        max_time = _float(training, "max_time_s", "training")
        if max_time <= 0:
            raise ScenarioError("training: 'max_time_s' must be positive")
    mfu = _float(raw, "mfu", "scenario", DEFAULT_MFU)
    if not 0 < mfu <= 1:
        raise ScenarioError(f"scenario: 'mfu' must be in (0, 1], got {mfu}")
    averaging = raw.get("averaging", "direct")
    if averaging not in AVERAGING:
        raise ScenarioError(f"scenario: 'averaging' must be one of {', '.join(AVERAGING)}, got {averaging!r}")
    demand = raw.get("holder_demand", "all")
    if demand not in POLICIES:
        raise ScenarioError(f"scenario: 'holder_demand' must be one of {', '.join(POLICIES)}, got {demand!r}")
    link_capacity = raw.get("link_capacity", True)
    if not isinstance(link_capacity, bool):
        raise ScenarioError(f"scenario: 'link_capacity' must be true or false, got {link_capacity!r}")
    graph_at = None if raw.get("flow_graph_at_s") is None else _float(raw, "flow_graph_at_s", "scenario")
    name = raw.get("name", default_name)
    if not isinstance(name, str) or not name:
        raise ScenarioError("scenario: 'name' must be a non-empty string")
    return Scenario(
        name=name,
        model=model,
        stages=stages,
        peer_count=count,
        regions=regions,
        gpu_mix=mix,
        holder_regions=holder_regions,
        holder_gpu=_gpu(holders.get("gpu", "A100-80GB"), "holders"),
        failure_rate_h=fail,
        join_rate_h=join,
        iterations=_int(training, "iterations", "training", 10),
        global_batch=_int(training, "global_batch", "training", 64),
        max_time_s=max_time,
        mfu=mfu,
        seed=_int(raw, "seed", "scenario", 0, low=0),
        explicit_peers=entries,
        averaging=averaging,
        holder_demand=demand,
        link_capacity=link_capacity,
        flow_graph_at_s=graph_at,
    )


def load_scenario_file(path: str | Path) -> Scenario:
    """Read a .json or .toml scenario; every problem is a one-line `ScenarioError`."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ScenarioError(f"cannot read scenario file {path}: {exc.strerror}") from None
    try:
        if path.suffix == ".toml":
            raw = tomllib.loads(text)
        else:
            raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ScenarioError(f"{path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path} is not valid TOML: {exc}") from None
    return scenario_from_dict(raw, default_name=path.stem)


# ---------------------------------------------------------------- built-ins
def _base(name: str, **over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": name,
        "model": "gpt-500m",
        "stages": 8,
        "peers": {"count": 80, "regions": ["Iowa"], "gpus": HETERO_MIX},
        "holders": {"regions": ["Iowa", "Iowa", "Iowa", "Iowa"], "gpu": "A100-80GB"},
        "training": {"iterations": 40, "global_batch": 128},
    }
    raw.update(over)
    return raw


_GEO_HOLDERS = {"regions": ["Iowa", "Germany", "Japan", "Oregon"], "gpu": "A100-80GB"}
_GEO_PEERS = {"count": 80, "regions": "geo-10", "gpus": HETERO_MIX}


def _geo(name: str, rate: float) -> dict[str, Any]:
    churn = {"failure_rate_per_hour": rate, "join_rate_per_hour": rate}
    return _base(name, peers=_GEO_PEERS, holders=_GEO_HOLDERS, churn=churn)


BUILTIN: dict[str, dict[str, Any]] = {
    "homogeneous-single-region": _base(
        "homogeneous-single-region", peers={"count": 80, "regions": ["Iowa"], "gpus": "A100-80GB"}
    ),
    "heterogeneous-single-region": _base("heterogeneous-single-region"),
    "geo-10-regions-no-churn": _geo("geo-10-regions-no-churn", 0.0),
    "geo-10-regions-low-churn": _geo("geo-10-regions-low-churn", 0.10),
    "geo-10-regions-high-churn": _geo("geo-10-regions-high-churn", 0.33),
    "scale-1000x16": {
        **_geo("scale-1000x16", 0.33),
        "model": "gpt-1.5b",
        "stages": 16,
        "peers": {**_GEO_PEERS, "count": 1000},
        "holders": {"regions": list(GEO10), "gpu": "A100-80GB"},
        "training": {"iterations": 1_000_000, "global_batch": 512, "max_time_s": 3600.0},
    },
}
PAPER_SCENARIOS = tuple(n for n in BUILTIN if not n.startswith("scale"))


def builtin_names() -> list[str]:
    """Every built-in name: the base names (default model gpt-500m) and NAME:PRESET for each preset."""
    return [*BUILTIN, *(f"{n}:{p}" for n in PAPER_SCENARIOS for p in PRESETS)]


def builtin_scenario(name: str) -> Scenario:
    """`NAME` or `NAME:PRESET` (the same scenario with another model preset)."""
    base, _, preset = name.partition(":")
    if base not in BUILTIN:
        known = ", ".join(BUILTIN)
        raise ScenarioError(f"unknown scenario {name!r} (built-in: {known}; or a .json/.toml file)")
    raw = dict(BUILTIN[base])
    if preset:
        if preset not in PRESETS:
            raise ScenarioError(f"unknown model preset {preset!r} (known: {', '.join(PRESETS)})")
        raw["model"] = preset
        raw["name"] = name
    return scenario_from_dict(raw)


def resolve_scenario(name_or_path: str) -> Scenario:
    """A built-in name, or a path to a scenario file."""
    if name_or_path.partition(":")[0] in BUILTIN:
        return builtin_scenario(name_or_path)
    path = Path(name_or_path)
    if path.suffix in (".json", ".toml") or path.exists():
        return load_scenario_file(path)
    return builtin_scenario(name_or_path)
