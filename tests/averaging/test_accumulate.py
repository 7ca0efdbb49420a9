"""Exact accumulation: the summed gradient does not depend on the order or the split of microbatches."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from swarm.averaging.accumulate import GradientAccumulator


def microbatch_grads(count: int) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    # mixed magnitudes and near-cancelling noise, as a key bias's gradient has
    return [torch.randn(64, generator=gen) * 10.0 ** float(i % 5 - 8) for i in range(count)]


def accumulate(grads: list[torch.Tensor], exact: bool) -> torch.Tensor:
    layer = nn.Linear(64, 1, bias=False)
    acc = GradientAccumulator(layer, exact=exact)
    for g in grads:
        layer.weight.grad = g.view(1, 64).clone()
        acc.collect()
    acc.apply()
    return layer.weight.grad.view(-1).clone()


def test_every_order_gives_the_same_bits() -> None:
    grads = microbatch_grads(5)
    orders = itertools.permutations(grads)
    results = {accumulate(list(order), exact=True).numpy().tobytes() for order in orders}
    assert len(results) == 1


def test_float32_accumulation_depends_on_order() -> None:
    """Why exact accumulation exists: plain float32 sums differ with the order."""
    grads = microbatch_grads(5)
    orders = itertools.permutations(grads)
    results = {accumulate(list(order), exact=False).numpy().tobytes() for order in orders}
    assert len(results) > 1


def test_split_among_replicas_gives_the_same_bits() -> None:
    """Partial sums of two replicas, added in float64, equal one replica summing everything."""
    grads = microbatch_grads(6)
    whole = accumulate(grads, exact=True)
    layer = nn.Linear(64, 1, bias=False)
    partials = []
    for share in (grads[::2], grads[1::2]):
        acc = GradientAccumulator(layer, exact=True)
        for g in share:
            layer.weight.grad = g.view(1, 64).clone()
            acc.collect()
        partials.append(acc.flat())
    acc = GradientAccumulator(layer, exact=True)
    acc.apply(partials[1] + partials[0])
    assert torch.equal(layer.weight.grad.view(-1), whole)


def test_parameters_without_gradient_stay_none() -> None:
    layer = nn.Linear(4, 4)
    acc = GradientAccumulator(layer)
    layer.weight.grad = torch.ones(4, 4)
    acc.collect()
    assert acc.flat().numel() == 20 and acc.flat().dtype == torch.float64
    acc.apply()
    assert layer.bias.grad is None and torch.equal(layer.weight.grad, torch.ones(4, 4))
