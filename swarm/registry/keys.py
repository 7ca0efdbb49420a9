"""DHT key names of one run (DESIGN.md section 3): every key is prefixed by the run id.

Pure string functions, shared by writers, readers and outside tools, so the layout is defined once.
"""

from __future__ import annotations

import re

HOLDER_STAGE = -1  # stage number under which data holders announce themselves
MAX_RUN_ID = 64
_RUN_RE = re.compile(r"^[A-Za-z0-9_\-]+$")


def check_run_id(run_id: str) -> str:
    """Reject run ids that would make ambiguous keys (dots separate key parts)."""
    if not isinstance(run_id, str) or not run_id or len(run_id) > MAX_RUN_ID or not _RUN_RE.match(run_id):
        raise ValueError(
            f"run id must be 1-{MAX_RUN_ID} characters of letters, digits, '_' or '-', got {run_id!r}"
        )
    return run_id


def manifest_key(run_id: str) -> str:
    """The run manifest, written once by the initiator."""
    return f"{check_run_id(run_id)}.manifest"


def stage_key(run_id: str, stage: int) -> str:
    """Peer records of one stage; stage -1 (HOLDER_STAGE) holds the data holders."""
    if isinstance(stage, bool) or not isinstance(stage, int) or stage < HOLDER_STAGE:
        raise ValueError(f"stage must be an int >= {HOLDER_STAGE}, got {stage!r}")
    if stage == HOLDER_STAGE:
        return f"{check_run_id(run_id)}.holders"
    return f"{check_run_id(run_id)}.stage.{stage}"


def flow_key(run_id: str, peer_id: str) -> str:
    """Routing state (labels, assignments) of one peer."""
    return f"{check_run_id(run_id)}.flow.{peer_id}"


def links_key(run_id: str, peer_id: str) -> str:
    """Link measurements (latency, bandwidth) made by one peer, subkey = the other peer."""
    return f"{check_run_id(run_id)}.links.{peer_id}"


def progress_key(run_id: str) -> str:
    """Training progress, one subkey per data holder."""
    return f"{check_run_id(run_id)}.progress"


def events_key(run_id: str) -> str:
    """Churn timeline (joins, leaves, crashes, reroutes), one subkey per event."""
    return f"{check_run_id(run_id)}.events"
