"""The data plane's wire records, in one place: what a hop message carries and how it is checked.

A microbatch travels the ring holder -> stage 0 -> ... -> stage S-1 -> holder. A `forward` message
carries its activations to `stage` (S means: back to the holder), a `backward` message the gradient
of those activations to the previous hop (stage -1 means: back to the holder). `path` lists who
carried it so far, holder first, so the gradient can retrace it: a forward message's path ends with
its sender, a backward message's path ends with its receiver.
"""

from __future__ import annotations

from dataclasses import dataclass

MAX_ID = 128


class WireError(ValueError):
    """A message that does not fit the run; the text is sent back to its sender."""


@dataclass(frozen=True)
class Hop:
    run: str
    iteration: int
    microbatch: int
    holder: str
    path: tuple[str, ...]
    stage: int

    def header(self, tensor_meta: dict, **extra) -> dict:
        return {
            "run": self.run, "iteration": self.iteration, "mb": self.microbatch, "holder": self.holder,
            "path": list(self.path), "stage": self.stage, "t": tensor_meta, **extra,
        }  # fmt: skip

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.holder, self.iteration, self.microbatch)


def _int(header: dict, key: str) -> int:
    value = header.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise WireError(f"{key!r} must be an integer")
    return value


def _id(value: object, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID:
        raise WireError(f"{what} must be a peer id string")
    return value


def parse_hop(header: dict, *, run: str, stages: int, microbatches: int) -> Hop:
    """Check a forward/backward header against the run's shape; raises WireError."""
    if header.get("run") != run:
        raise WireError(f"unknown run {header.get('run')!r} (this peer serves {run!r})")
    iteration, microbatch, stage = _int(header, "iteration"), _int(header, "mb"), _int(header, "stage")
    if iteration < 0:
        raise WireError("iteration must be >= 0")
    if not 0 <= microbatch < microbatches:
        raise WireError(f"unknown microbatch id {microbatch} (the run has {microbatches})")
    if not -1 <= stage <= stages:  # -1: a gradient back to the holder; S: an output back to it
        raise WireError(f"stage {stage} outside -1..{stages}")
    path = header.get("path")
    if not isinstance(path, list) or len(path) > stages + 1:
        raise WireError("path must be a list of at most stages + 1 peer ids")
    path = tuple(_id(p, "path entry") for p in path)
    holder = _id(header.get("holder"), "holder")
    if not path or path[0] != holder:
        raise WireError("path must start at the microbatch's holder")
    if not isinstance(header.get("t"), dict):
        raise WireError("message carries no tensor description 't'")
    return Hop(run, iteration, microbatch, holder, path, stage)
