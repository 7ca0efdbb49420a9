"""`swarm train --local`: it learns, and bad input gets one clear line and a non-zero exit."""

from __future__ import annotations

import json

import pytest


def test_local_training_loss_falls_over_50_iterations(swarm_cli, tmp_path) -> None:
    metrics = tmp_path / "m.jsonl"
    result = swarm_cli(
        "train", "--local", "--model", "llama-tiny", "--iterations", "50", "--metrics-out", str(metrics)
    )
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    assert [r["iteration"] for r in rows] == list(range(50))
    assert all({"iteration", "loss", "tokens", "seconds"} <= set(r) for r in rows)
    first = sum(r["loss"] for r in rows[:5]) / 5
    last = sum(r["loss"] for r in rows[-5:]) / 5
    assert last < first - 1.0, (first, last)  # a real decrease: bytes start near ln(264) = 5.6
    assert "done: 50 iterations" in result.stderr


def test_adamw8bit_runs(swarm_cli, tmp_path) -> None:
    result = swarm_cli(
        "train", "--local", "--model", "gpt2-tiny", "--iterations", "2", "--optimizer", "adamw8bit",
        "--batch-size", "4", "--microbatch-size", "2", "--seq-len", "32", "--save", str(tmp_path / "c"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "c" / "model.safetensors").exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--model", "no-such-preset"], "unknown model 'no-such-preset'"),
        (["--data", "/no/such/path"], "data path /no/such/path does not exist"),
        (["--stages", "9"], "cannot cut 4 transformer blocks into 9 stages"),
        (["--batch-size", "10", "--microbatch-size", "4"], "microbatch size 4 does not divide batch size 10"),
        (["--optimizer", "sgd"], "unknown optimizer 'sgd'"),
        (["--seq-len", "100000"], "--seq-len must be between 2"),
        (["--region", "Mars"], "unknown region 'Mars' (known: Australia"),
        (["--min-peers", "-1"], "--min-peers must be >= 0, got -1"),
    ],
)
def test_bad_input_is_one_clear_line(swarm_cli, args, message) -> None:
    result = swarm_cli("train", "--local", "--iterations", "1", *args)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr


def test_empty_data_and_bad_config_files(swarm_cli, tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt").write_text("")
    (tmp_path / "bert.json").write_text('{"model_type": "bert"}')
    (tmp_path / "broken.json").write_text("{not json")
    cases = [
        (["--data", str(tmp_path / "empty")], "is empty"),
        (["--model", str(tmp_path / "bert.json")], "model_type 'bert' is not supported"),
        (["--model", str(tmp_path / "broken.json")], "cannot read model config"),
    ]
    for args, message in cases:
        result = swarm_cli("train", "--local", "--iterations", "1", *args)
        assert result.returncode != 0 and "Traceback" not in result.stderr
        assert message in result.stderr, result.stderr


def test_unknown_option_is_rejected(swarm_cli) -> None:
    result = swarm_cli("train", "--local", "--no-such-option")
    assert result.returncode == 2 and "No such option" in result.stderr
