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
