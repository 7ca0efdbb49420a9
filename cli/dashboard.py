"""`swarm dashboard`: serve the live page, `/api/v1/state` and `/metrics` of a run (read-only).

It joins the DHT as a client (it serves nothing and writes nothing), reads the run's records in
the background and keeps serving while peers or the DHT come and go: an unreachable DHT or an
empty run is shown on the page, not turned into an exit.
"""

from __future__ import annotations

import typer

from cli.errors import UserError, user_errors


def _check(initial_peers: list[str], run: str) -> None:
    from hivemind.utils.multiaddr import Multiaddr

    from swarm.registry.keys import check_run_id

    if not initial_peers:
        raise UserError("--initial-peers is required (the multiaddr printed by `swarm train`)")
    for maddr in initial_peers:
        try:
            Multiaddr(maddr)
        except Exception:  # noqa: BLE001 - the multiaddr library raises several types
            raise UserError(f"not a multiaddr: {maddr!r}") from None
    try:
        check_run_id(run)
    except ValueError as exc:
        raise UserError(str(exc)) from None


def serve(
    initial_peers: list[str], run: str, host: str, port: int, interval: float, log_level: str = "warning"
) -> None:
    """Run the dashboard until interrupted."""
    import uvicorn

    from swarm.dashboard import Collector, create_app

    _check(initial_peers, run)
    app = create_app(Collector(initial_peers, run, interval=interval))
    typer.echo(f"swarm dashboard: run {run} on http://{host}:{port}/ (metrics at /metrics)", err=True)
    uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False)


def register(app: typer.Typer) -> None:
    @app.command("dashboard")
    @user_errors()
    def dashboard(
        initial_peers: list[str] = typer.Option(
            [], "--initial-peers", help="Multiaddr of any peer of the swarm (repeatable)."
        ),
        run: str = typer.Option("swarm", "--run", help="Run id."),
        host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on (0.0.0.0: public)."),
        port: int = typer.Option(8080, "--port", min=0, max=65535, help="HTTP port."),
        interval: float = typer.Option(3.0, "--interval", min=0.5, help="Seconds between DHT reads."),
    ) -> None:
        """Serve a live, read-only web dashboard of the run: page, /api/v1/state and /metrics."""
        serve(initial_peers, run, host, port, interval)
