"""The stage modules composed equal transformers' full model: logits and every gradient."""

from __future__ import annotations

import pytest
import torch
from transformers import GPT2Config, LlamaConfig

from models.partition import PartitionError, partition, split_blocks
from models.staged import build_full_model, build_holder, build_stage

SEED = 7


def gpt2_config(tied: bool) -> GPT2Config:
    config = GPT2Config(
        vocab_size=97, n_positions=64, n_embd=32, n_layer=5, n_head=4, tie_word_embeddings=tied
    )
    config._attn_implementation = "sdpa"
    return config


def llama_config(tied: bool) -> LlamaConfig:
    # grouped-query attention: 2 key/value heads for 4 query heads
    config = LlamaConfig(
        vocab_size=97,
        hidden_size=32,
        intermediate_size=80,
        num_hidden_layers=5,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        tie_word_embeddings=tied,
    )
    config._attn_implementation = "sdpa"
    return config


CONFIGS = {
    "gpt2-tied": lambda: gpt2_config(True),
    "gpt2-untied": lambda: gpt2_config(False),
    "llama-gqa-tied": lambda: llama_config(True),
    "llama-gqa-untied": lambda: llama_config(False),
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("num_stages", [1, 2, 3, 4])  # 5 blocks: 2, 3 and 4 stages are uneven
def test_composition_matches_full_model(name: str, num_stages: int) -> None:
    config = CONFIGS[name]()
    full = build_full_model(config, SEED).eval()
    holder = build_holder(config, SEED).eval()
    stages = [
        build_stage(config, spec, SEED).eval() for spec in partition(config.num_hidden_layers, num_stages)
    ]

    full_params = dict(full.named_parameters())
    parts = [holder, *stages]
    for part in parts:  # same deterministic initialisation, parameter by parameter
        for local, param in part.named_parameters():
            assert torch.equal(param, full_params[part.full_name(local)]), local

    ids = torch.randint(0, config.vocab_size, (3, 17), generator=torch.Generator().manual_seed(0))
    reference = full(input_ids=ids, labels=ids)
    reference.loss.backward()

    hidden = holder.embed_tokens(ids)
    for stage in stages:
        hidden = stage(hidden)
    logits = holder.logits(hidden)
    loss = holder.loss(hidden, ids)
    loss.backward()

    assert torch.allclose(logits, reference.logits, rtol=1e-5, atol=1e-6)
    assert torch.allclose(loss, reference.loss, rtol=1e-6, atol=1e-7)
    covered = set()
    for part in parts:
        for local, param in part.named_parameters():
            full_name = part.full_name(local)
            covered.add(full_name)
            ref_grad = full_params[full_name].grad
            assert torch.allclose(param.grad, ref_grad, rtol=1e-4, atol=1e-7), full_name
    tied_head = {"lm_head.weight"} if config.tie_word_embeddings else set()
    assert covered | tied_head == set(full_params) | tied_head


def test_stage_holds_only_its_blocks() -> None:
    config = llama_config(False)
    spec = partition(5, 3)[1]
    stage = build_stage(config, spec)
    names = {stage.full_name(n) for n, _ in stage.named_parameters()}
    assert {n.split(".")[2] for n in names} == {str(i) for i in spec.blocks}
    assert all(n.startswith("model.layers.") for n in names)


def test_partition_is_balanced_and_contiguous() -> None:
    assert [(s.start, s.end) for s in partition(7, 3)] == [(0, 3), (3, 5), (5, 7)]
    assert [(s.start, s.end) for s in partition(4, 4)] == [(0, 1), (1, 2), (2, 3), (3, 4)]
    # one heavy block gets a stage of its own
    assert [(s.start, s.end) for s in split_blocks([1, 1, 6, 1, 1], 3)] == [(0, 2), (2, 3), (3, 5)]


def test_more_stages_than_blocks_is_a_clear_error() -> None:
    with pytest.raises(PartitionError, match="cannot cut 4 transformer blocks into 5 stages"):
        partition(4, 5)
