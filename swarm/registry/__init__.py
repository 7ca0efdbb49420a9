"""The run's registry on the hivemind DHT: key layout, record schemas and signed DHT I/O."""

from swarm.registry.dht import Registry, RegistryError, create_dht, make_validators
from swarm.registry.keys import (
    HOLDER_STAGE,
    events_key,
    flow_key,
    links_key,
    manifest_key,
    progress_key,
    stage_key,
)
from swarm.registry.records import (
    EventRecord,
    FlowRecord,
    LinkRecord,
    Manifest,
    PeerRecord,
    ProgressRecord,
    RecordError,
    pack,
    unpack,
)

__all__ = [
    "HOLDER_STAGE",
    "EventRecord",
    "FlowRecord",
    "LinkRecord",
    "Manifest",
    "PeerRecord",
    "ProgressRecord",
    "RecordError",
    "Registry",
    "RegistryError",
    "create_dht",
    "events_key",
    "flow_key",
    "links_key",
    "make_validators",
    "manifest_key",
    "pack",
    "progress_key",
    "stage_key",
    "unpack",
]
