"""Checkpoint round trip: train, save, reload with transformers, same logits, generate() works."""

from __future__ import annotations

import json

import torch
from transformers import AutoModelForCausalLM

from models.checkpoint import load_part
from models.staged import build_holder, build_stage
from swarm.config import TrainConfig
from swarm.trainer.local import LocalTrainer, train_local


def test_train_save_reload_generate(tmp_path) -> None:
    cfg = TrainConfig(model="gpt2-tiny", stages=3, iterations=2, batch_size=4, microbatch_size=2, seq_len=32)
    trainer = LocalTrainer(cfg)
    train_local(trainer, save=str(tmp_path / "ckpt"))
    assert json.loads((tmp_path / "ckpt" / "swarm_state.json").read_text())["iteration"] == 2

    model = AutoModelForCausalLM.from_pretrained(tmp_path / "ckpt").eval()
    for part in trainer.parts:
        part.eval()
    ids = torch.randint(0, 256, (2, 24), generator=torch.Generator().manual_seed(1))
    hidden = trainer.holder.embed_tokens(ids)
    for stage in trainer.stages:
        hidden = stage(hidden)
    with torch.no_grad():
        assert torch.equal(model(ids).logits, trainer.holder.logits(hidden))
        out = model.generate(ids[:1, :8], max_new_tokens=5, do_sample=False)
    assert out.shape == (1, 13)

    # a volunteer loads only its own stage back from the checkpoint
    stage = load_part(tmp_path / "ckpt", build_stage(trainer.config, trainer.layout[1], seed=999))
    for (name, a), b in zip(stage.state_dict().items(), trainer.stages[1].state_dict().values()):
        assert torch.equal(a, b), name
    holder = load_part(tmp_path / "ckpt", build_holder(trainer.config, seed=999))
    assert torch.equal(holder.embed.weight, trainer.holder.embed.weight)


def test_llama_checkpoint_untied(tmp_path) -> None:
    cfg = TrainConfig(model="llama-tiny", stages=2, iterations=1, batch_size=2, microbatch_size=1, seq_len=16)
    trainer = LocalTrainer(cfg)
    trainer.step()
    trainer.save(tmp_path)
    model = AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    sd = model.state_dict()
    assert torch.equal(sd["lm_head.weight"], trainer.holder.lm_head.weight)
    assert torch.equal(
        sd["model.layers.3.mlp.up_proj.weight"], trainer.stages[1].blocks[1].mlp.up_proj.weight
    )
