"""The simulator's mutable records of nodes and microbatches."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Mapping


class Node:
    """A data holder (stage -1) or a stage server, with its serial compute queue."""

    __slots__ = (
        "id",
        "stage",
        "region",
        "gpu",
        "compute_s",
        "fwd_s",
        "bwd_s",
        "alive",
        "ready_s",
        "died_s",
        "free_at",
        "hold_s",
        "last_bwd",
        "busy_s",
        "resident",
        "stash",
        "carried",
        "samples",
    )

    def __init__(self, id: str, stage: int, region: str, gpu: str, compute_s: float, fwd_share: float):
        self.id, self.stage, self.region, self.gpu = id, stage, region, gpu
        self.compute_s = compute_s
        self.fwd_s = compute_s * fwd_share
        self.bwd_s = compute_s - self.fwd_s
        self.alive = True
        self.ready_s: float | None = None  # serving since (None: still downloading state)
        self.died_s: float | None = None
        self.free_at = 0.0
        self.hold_s = 0.0  # no compute before this: the stage is still averaging the last iteration
        self.last_bwd = 0.0  # its last backward of the current iteration (when its gradient is ready)
        self.busy_s = 0.0
        self.resident: set[int] = set()  # microbatches in flight to, queued at or computing here
        self.stash: set[int] = set()  # forward done here, backward not yet: activations kept
        self.carried: set[int] = set()  # backward done here this iteration: gradient accumulated
        self.samples: deque[float] = deque(maxlen=32)  # measured hop times as a sender

    def run(self, now: float, seconds: float) -> tuple[float, float]:
        """Queue `seconds` of compute (FIFO); returns (start, end)."""
        start = max(self.free_at, now, self.hold_s)
        end = start + seconds
        self.free_at = end
        self.busy_s += seconds
        return start, end


class Microbatch:
    __slots__ = (
        "id",
        "holder",
        "path",
        "pos",
        "backward",
        "gen",
        "sender",
        "sent_at",
        "task",
        "compute",
        "holder_compute",
        "lost",
    )

    def __init__(self, id: int, holder: str, stages: int):
        self.id, self.holder = id, holder
        self.path: list[str] = []  # peer of stage k at index k (the recorded path)
        self.pos = 0  # stage of the current hop
        self.backward = False
        self.gen = 0  # bumped when the microbatch is taken off a dead peer: stale events drop
        self.sender = holder
        self.sent_at = 0.0
        self.task: tuple[str, float, float] | None = None  # (peer, start, end) of current compute
        self.compute = [0.0] * stages  # seconds spent on this microbatch per stage
        self.holder_compute = 0.0
        self.lost = False


class LoadView(Mapping[str, int]):
    """Queued microbatches per peer, read lazily (what a sender learns from its neighbours' acks)."""

    def __init__(self, nodes: dict[str, Node]) -> None:
        self._nodes = nodes

    def __getitem__(self, key: str) -> int:
        return len(self._nodes[key].resident)

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)
