"""`swarm join`: lend this machine to a run, serving one stage (or holding data) until Ctrl-C."""

from __future__ import annotations

import typer

from cli.errors import check_region, fail, user_errors
from cli.live import run_async, setup_logging


def register(app: typer.Typer) -> None:
    @app.command()
    @user_errors()
    def join(
        initial_peers: list[str] = typer.Option(
            ..., "--initial-peers", help="Multiaddr of any peer of the run."
        ),
        run: str = typer.Option("swarm", "--run", help="Run id."),
        stage: str = typer.Option("auto", help="'auto' (the bottleneck stage) or a stage index."),
        role: str = typer.Option("stage", help="'stage' (serve blocks) or 'holder' (hold data)."),
        device: str = typer.Option("cpu", help="cpu or cuda."),
        region: str = typer.Option(
            "",
            help="Where this machine is: one of the geo matrix's regions. Shown to others; between two "
            "peers that both name one, routing costs and link bounds follow the matrix.",
        ),
        name: str = typer.Option("", help="A name shown on the dashboard."),
        host: str = typer.Option("127.0.0.1", help="Address to listen on (0.0.0.0 for a public peer)."),
        threads: int = typer.Option(0, help="torch threads (0: torch's default)."),
        capacity: float = typer.Option(0.0, help="Lend at most this many microbatches/s (0: measured)."),
        manifest_timeout: float = typer.Option(60.0, help="Seconds to wait for the run's manifest."),
        rebalance_every: float | None = typer.Option(
            None,
            help="Seconds between checks whether moving to another stage raises throughput (0: never). "
            "Default: 30 with --stage auto; a peer given an explicit --stage stays there.",
        ),
        verbose: bool = typer.Option(False, "--verbose", "-v"),
    ) -> None:
        """Join a run as a volunteer: measure, pick a stage, load it, serve until Ctrl-C."""
        if role not in ("stage", "holder"):
            fail(f"--role must be 'stage' or 'holder', got {role!r}")
        check_region(region)
        if stage != "auto" and not stage.isdigit():
            fail(f"--stage must be 'auto' or a stage index, got {stage!r}")
        if rebalance_every is None:
            rebalance_every = 30.0 if stage == "auto" else 0.0
        if rebalance_every < 0:
            fail(f"--rebalance-every must be >= 0, got {rebalance_every}")
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                fail("--device cuda asked for, but torch sees no CUDA device")
        setup_logging(verbose)
        from swarm.node import SwarmNode
        from swarm.runner import JoinError, run_volunteer

        async def main(stop):
            node = SwarmNode(run, list(initial_peers), host=host)
            try:
                await node.start()
            except Exception as exc:  # noqa: BLE001 - hivemind raises many kinds here
                fail(f"cannot reach the swarm at {', '.join(initial_peers)}: {exc}")
            try:
                await run_volunteer(
                    node, stage=None if stage == "auto" else int(stage), role=role, device=device,
                    region=region, name=name, stop=stop, manifest_timeout=manifest_timeout,
                    capacity=capacity or None, rebalance_every_s=rebalance_every,
                    on_ready=lambda text: typer.echo(f"swarm join: {text}", err=True),
                )  # fmt: skip
            except JoinError as exc:
                fail(str(exc))
            finally:
                await node.shutdown()
            typer.echo("swarm join: left the swarm cleanly", err=True)

        run_async(main, threads or None)
