"""`swarm bench transport` and `swarm bench swarm`: figures of the live data plane, as JSON."""

from __future__ import annotations

import asyncio
import json

import typer

from cli.bench import bench_app
from cli.errors import UserError, user_errors


@bench_app.command("transport")
@user_errors()
def transport(
    repeats: int = typer.Option(5, help="Hops timed per codec."),
    shape: str = typer.Option("8,512,512", help="Activation shape (microbatch, seq, hidden)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Activation bytes/s over one loopback hop per codec, beside a raw TCP socket."""
    try:
        dims = tuple(int(x) for x in shape.split(","))
    except ValueError:
        raise UserError(f"--shape must be comma-separated integers, got {shape!r}") from None
    if repeats < 1 or not dims or min(dims) < 1:
        raise UserError("--repeats and every dimension of --shape must be positive")
    from swarm.transport.bench import run_transport_bench

    result = asyncio.run(run_transport_bench(dims, repeats))
    typer.echo(json.dumps(result, indent=None if as_json else 2))


@bench_app.command("swarm")
@user_errors()
def swarm_bench(
    peers: int = typer.Option(4, help="Stage volunteers of the local swarm."),
    stages: int = typer.Option(2, help="Pipeline stages."),
    iterations: int = typer.Option(20, help="Iterations to run (the first 3 are warm-up)."),
    model: str = typer.Option("llama-small-cpu"),
    batch_size: int = typer.Option(16),
    microbatch_size: int = typer.Option(2),
    seq_len: int = typer.Option(64),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """End-to-end microbatches/s of a local swarm against its slowest stage's measured throughput."""
    import statistics
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    if iterations < 5 or peers < stages:
        raise UserError("need --iterations >= 5 and at least one volunteer per stage")
    with tempfile.TemporaryDirectory() as tmp:
        metrics = Path(tmp) / "m.jsonl"
        run = subprocess.run(
            [sys.executable, "-m", "cli.main", "train", "--local-swarm", str(peers), "--stages", str(stages),
             "--iterations", str(iterations), "--model", model, "--batch-size", str(batch_size),
             "--microbatch-size", str(microbatch_size), "--seq-len", str(seq_len), "--run", "benchswarm",
             "--metrics-out", str(metrics), "--log-dir", str(Path(tmp) / "logs")],
            capture_output=True, text=True,
        )  # fmt: skip
        if run.returncode != 0:
            raise UserError(f"the local swarm failed: {run.stderr.strip().splitlines()[-1:]}")
        rows = [json.loads(line) for line in metrics.read_text().splitlines()][3:]
    rates = [r["microbatches"] / r["seconds"] for r in rows]
    slowest = statistics.median(r["slowest_stage_mb_s"] for r in rows)
    result = {
        "model": model, "stages": stages, "volunteers": peers, "iterations_measured": len(rows),
        "microbatches_per_s": round(statistics.median(rates), 3),
        "slowest_stage_microbatches_per_s": round(slowest, 3),
        "ratio": round(statistics.median(rates) / slowest, 4) if slowest > 0 else None,
        "tokens_per_s": round(statistics.median(r["tokens_per_s"] for r in rows), 1),
    }  # fmt: skip
    typer.echo(json.dumps(result, indent=None if as_json else 2))
