"""`swarm join` refuses bad arguments with one clear line, before it starts any daemon."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    "args, message",
    [
        (["--region", "Mars"], "unknown region 'Mars' (known: Australia, Belgium"),
        (["--role", "boss"], "--role must be 'stage' or 'holder'"),
        (["--stage", "first"], "--stage must be 'auto' or a stage index"),
    ],
)
def test_bad_join_arguments_are_one_clear_line(swarm_cli, args, message) -> None:
    result = swarm_cli("join", "--initial-peers", "/ip4/127.0.0.1/tcp/9/p2p/QmNone", *args, timeout=120)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr + result.stdout
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and message in errors[0], result.stderr
