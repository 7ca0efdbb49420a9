"""Cut a model into the holder part and S stages of contiguous transformer blocks.

Pure: only the config's shape is read. As in GWTF the data holder is source and sink: it keeps the
embeddings, the final norm and the LM head (so labels never leave it and tied embeddings stay in one
place); the stages hold blocks only.
"""

from __future__ import annotations

from dataclasses import dataclass


class PartitionError(ValueError):
    """A partition that cannot be made (more stages than blocks, no stages)."""


@dataclass(frozen=True)
class StageSpec:
    """Stage `index` serves blocks `start` .. `end - 1` (global block indices)."""

    index: int
    start: int
    end: int

    @property
    def blocks(self) -> range:
        return range(self.start, self.end)

    def to_dict(self) -> dict:
        return {"index": self.index, "start": self.start, "end": self.end}


def split_blocks(block_costs: list[float], num_stages: int) -> list[StageSpec]:
    """Contiguous split of blocks into stages minimising the most expensive stage (exact DP).

    Costs are per block (parameters or FLOPs); equal blocks give sizes differing by at most one, with
    the larger stages first.
    """
    n = len(block_costs)
    if num_stages < 1:
        raise PartitionError(f"need at least one stage, got {num_stages}")
    if num_stages > n:
        raise PartitionError(f"cannot cut {n} transformer blocks into {num_stages} stages (at most {n})")
    prefix = [0.0]
    for c in block_costs:
        prefix.append(prefix[-1] + c)
    inf = (float("inf"), float("inf"))
    # best[k][i]: (max stage cost, sum of squared stage costs) of the first i blocks in k stages;
    # the second key picks the most even split among those with the same bottleneck.
    best = [[inf] * (n + 1) for _ in range(num_stages + 1)]
    cut = [[0] * (n + 1) for _ in range(num_stages + 1)]
    best[0][0] = (0.0, 0.0)
    for k in range(1, num_stages + 1):
        for i in range(k, n - (num_stages - k) + 1):
            for j in range(k - 1, i):
                stage = prefix[i] - prefix[j]
                prev = best[k - 1][j]
                value = (round(max(prev[0], stage), 9), round(prev[1] + stage * stage, 9))
                if value < best[k][i] or (value == best[k][i] and j > cut[k][i]):
                    best[k][i], cut[k][i] = value, j
    bounds = [n]
    for k in range(num_stages, 0, -1):
        bounds.append(cut[k][bounds[-1]])
    bounds.reverse()
    return [StageSpec(s, bounds[s], bounds[s + 1]) for s in range(num_stages)]


def partition(num_blocks: int, num_stages: int) -> list[StageSpec]:
    """Stages for a model of identical blocks (GPT-2 and Llama): balanced by parameter count."""
    return split_blocks([1.0] * num_blocks, num_stages)
