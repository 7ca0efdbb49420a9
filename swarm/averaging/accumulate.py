"""Order-independent gradient accumulation.

A stage adds microbatch gradients in whatever order the backward passes arrive, and a crash or a
reroute changes that order and how the microbatches are split among replicas. Float32 addition is
not associative, and Adam turns rounding noise on near-zero gradients (an attention key bias has a
true gradient of exactly zero) into full-size updates, so a swarm that merely adds in float32 drifts
away from the single-machine baseline. Summing in float64 and rounding once at the end makes the
result independent of order and partition (exact whenever the summed values span fewer than 2**29
binades, i.e. in practice always), so the swarm, the baseline and every replica get the same bits.
`exact=False` keeps the plain float32 path (half the gradient memory and averaging traffic).
"""

from __future__ import annotations

import torch
from torch import nn


class GradientAccumulator:
    """Moves each backward pass's `.grad` into a sum buffer; hands the rounded sum to the optimizer."""

    def __init__(self, module: nn.Module, exact: bool = True):
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.dtype = torch.float64 if exact else torch.float32
        self.numel = sum(p.numel() for p in self.params)
        self._sum: list[torch.Tensor | None] = [None] * len(self.params)

    def collect(self) -> None:
        """Call right after a backward pass: adds the fresh `.grad`s to the sums and clears them."""
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            grad = p.grad.detach().to(self.dtype)
            self._sum[i] = grad.clone() if self._sum[i] is None else self._sum[i].add_(grad)
            p.grad = None

    def flat(self) -> torch.Tensor:
        """The accumulated sum as one vector on the CPU (zeros where a parameter got no gradient)."""
        parts = [
            (s if s is not None else torch.zeros(p.shape, dtype=self.dtype)).reshape(-1).to("cpu", self.dtype)
            for s, p in zip(self._sum, self.params)
        ]
        return torch.cat(parts) if parts else torch.zeros(0, dtype=self.dtype)

    def apply(self, flat: torch.Tensor | None = None) -> None:
        """Set `.grad` (rounded to the parameter dtype) from `flat`, or from our own sums; then reset."""
        if flat is None:
            for p, s in zip(self.params, self._sum):
                p.grad = None if s is None else s.to(p.dtype)
        else:
            if flat.numel() != self.numel:
                raise ValueError(f"gradient vector has {flat.numel()} values, the module {self.numel}")
            offset = 0
            for p in self.params:
                n = p.numel()
                p.grad = flat[offset : offset + n].view(p.shape).to(p.device, p.dtype).clone()
                offset += n
        self.reset()

    def reset(self) -> None:
        self._sum = [None] * len(self.params)
