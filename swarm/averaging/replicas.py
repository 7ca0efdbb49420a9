"""Gradient averaging among the live replicas of one stage, weighted by microbatches carried.

Every replica that carried microbatches sends its accumulated gradient (the sum over the
microbatches it carried, each already scaled by 1/M at the holder) to every member of the stage.
Each member adds the contributions in one canonical order (sorted peer ids), in float64 unless the
run opted out (see accumulate.py), so all replicas get the same bits, then takes the same optimizer
step: replicas stay identical. The sum of the carried gradients is the microbatch-weighted average
of the replicas' mean gradients times the microbatch count, i.e. exactly the gradient of the mean
loss over the global batch that the baseline computes.

We exchange directly among the known replicas instead of hivemind's DecentralizedAverager: the set of
replicas is known from the iteration's recorded paths, and matchmaking would cost its minimum wait
on every iteration (see REFERENCES.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import torch

from swarm.averaging.accumulate import GradientAccumulator

Send = Callable[[str, int, int, torch.Tensor], Awaitable[None]]


class ReplicaAverager:
    """Collects the contributions of one iteration and produces the agreed gradient."""

    def __init__(self, me: str, accumulator: GradientAccumulator):
        self.me = me
        self.accumulator = accumulator
        self.numel = accumulator.numel
        self._inbox: dict[int, dict[str, tuple[int, torch.Tensor]]] = {}
        self._arrived = asyncio.Event()

    def receive(self, iteration: int, sender: str, count: int, flat: torch.Tensor) -> None:
        """A stage mate's contribution (validated by the caller: shape and finiteness)."""
        if flat.numel() != self.numel:
            raise ValueError(f"gradient of {flat.numel()} values, this stage has {self.numel}")
        self._inbox.setdefault(iteration, {})[sender] = (count, flat)
        self._arrived.set()

    async def average(
        self,
        iteration: int,
        members: list[str],
        contributors: dict[str, int],
        send: Send,
        timeout: float,
    ) -> dict[str, int]:
        """Exchange with the stage mates, set `.grad` to the agreed sum; returns who was included.

        A contributor that does not deliver within `timeout` is left out (its microbatches are
        reported as lost gradients by the caller), so one crash cannot hang the step.
        """
        mine = self.accumulator.flat()
        own_count = contributors.get(self.me, 0)
        if own_count:
            others = [m for m in members if m != self.me]
            results = await asyncio.gather(
                *(send(m, iteration, own_count, mine) for m in others), return_exceptions=True
            )
            del results  # a mate that cannot be reached simply does not get our share
        expected = {p for p, c in contributors.items() if c > 0 and p != self.me}
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            got = set(self._inbox.get(iteration, {}))
            if expected <= got:
                break
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            self._arrived.clear()
            try:
                await asyncio.wait_for(self._arrived.wait(), min(left, 1.0))
            except asyncio.TimeoutError:
                pass
        inbox = self._inbox.pop(iteration, {})
        included = {p: c for p, c in contributors.items() if c > 0 and (p == self.me or p in inbox)}
        total = torch.zeros(self.numel, dtype=self.accumulator.dtype)
        for peer in sorted(included):
            total += mine if peer == self.me else inbox[peer][1].to(total.dtype)
        self.accumulator.apply(total)
        for old in [i for i in self._inbox if i < iteration]:
            del self._inbox[old]
        return included
