"""`swarm status`: the live swarm as read from the DHT (peers per stage, routes, bottleneck, progress).

It joins as a DHT client only (it serves nothing), reads the run's signed records with bounded
timeouts and leaves; unreachable peers or an unknown run give one `error:` line and exit code 2.
"""

from __future__ import annotations

import json
import math
from typing import Any

import typer
from rich.console import Console
from rich.table import Table

from cli.errors import UserError, user_errors

STATUS_TIMEOUT = 15.0


def _short(peer_id: str) -> str:
    return peer_id if len(peer_id) <= 12 else f"…{peer_id[-8:]}"


def _finite(value: Any) -> Any:
    """JSON has no NaN/inf: report them as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def read_status(initial_peers: list[str], run_id: str, timeout: float = STATUS_TIMEOUT) -> dict:
    """Join the DHT as a client, read run `run_id` and return its snapshot (UserError if unreachable)."""
    from swarm.dashboard.records import read_run
    from swarm.registry import Registry, RegistryError, create_dht
    from swarm.registry.keys import check_run_id
    from swarm.registry.view import snapshot

    try:
        check_run_id(run_id)
    except ValueError as exc:
        raise UserError(str(exc)) from None
    if not initial_peers:
        raise UserError("--initial-peers is required (the multiaddr printed by `swarm train`)")
    try:
        dht, _ = create_dht(initial_peers, client_mode=True, startup_timeout=timeout)
    except RegistryError as exc:
        raise UserError(str(exc)) from None
    try:
        r = read_run(Registry(dht, run_id, timeout=timeout))
        if r is None:
            raise UserError(f"no run {run_id!r} found on the DHT via {', '.join(initial_peers)}")
        snap = snapshot(r.manifest, r.peers, r.progress, r.flows, r.rejected)
        snap["read_at"] = r.read_at
        return snap
    except RegistryError as exc:
        raise UserError(str(exc)) from None
    finally:
        dht.shutdown()


def render(snap: dict, console: Console) -> None:
    """Rich tables of a snapshot, for people."""
    head = (
        f"run [bold]{snap['run_id']}[/] · {snap['num_stages']} stages · initiator {_short(snap['initiator'])}"
    )
    if snap["iteration"] is not None:
        loss = snap["loss"]
        head += f" · iteration {snap['iteration']} · loss {'n/a' if loss is None else f'{loss:.4f}'}"
        if snap["tokens_per_s"] is not None:
            head += f" · {snap['tokens_per_s']:.0f} tokens/s"
    console.print(head)

    table = Table(title="peers per stage")
    for col in ("stage", "blocks", "peer", "name", "state", "throughput mb/s", "capacity", "region", "iter"):
        table.add_column(col, justify="right" if col in ("throughput mb/s", "capacity", "iter") else "left")
    rows = [("holder", "-", p) for p in snap["holders"]]
    for st in snap["stages"]:
        mark = " *" if st["stage"] == snap["bottleneck_stage"] else ""
        blocks = f"{st['blocks'][0]}-{st['blocks'][1] - 1}"
        if not st["peers"]:
            table.add_row(f"{st['stage']}{mark}", blocks, "(none)", "", "", "0", "0", "", "")
        rows += [(f"{st['stage']}{mark}", blocks, p) for p in st["peers"]]
    for stage, blocks, p in rows:
        table.add_row(
            stage,
            blocks,
            _short(p["peer_id"]),
            p["name"],
            p["state"],
            f"{p['throughput']:.2f}",
            f"{p['capacity']:.2f}",
            p["region"],
            str(p["iteration"]),
        )
    console.print(table)
    if snap["bottleneck_stage"] is not None:
        console.print(f"bottleneck stage: [bold]{snap['bottleneck_stage']}[/] (marked *)")

    if snap["routes"]:
        routes = Table(title="routes (holder: peer -> next hop)")
        for col in ("holder", "stage", "peer", "next hop", "rate"):
            routes.add_column(col, justify="right" if col == "rate" else "left")
        for r in snap["routes"]:
            stage = "?" if r["stage"] is None else str(r["stage"])
            routes.add_row(
                _short(r["holder"]), stage, _short(r["peer"]), _short(r["next"]), f"{r['rate']:.2f}"
            )
        console.print(routes)
    if snap["rejected"]:
        bad = ", ".join(f"{k} {v}" for k, v in sorted(snap["rejected"].items()))
        console.print(f"[yellow]ignored records: {bad}[/]")


def register(app: typer.Typer) -> None:
    @app.command("status")
    @user_errors()
    def status(
        initial_peers: list[str] = typer.Option(
            [], "--initial-peers", help="Multiaddr of any peer of the swarm (repeatable)."
        ),
        run: str = typer.Option("swarm", "--run", help="Run id."),
        as_json: bool = typer.Option(False, "--json", help="Print the snapshot as JSON."),
        timeout: float = typer.Option(STATUS_TIMEOUT, "--timeout", min=1.0, help="Seconds per DHT step."),
    ) -> None:
        """Show the live swarm: peers per stage, throughput, routes, bottleneck, iteration and loss."""
        snap = read_status(initial_peers, run, timeout)
        if as_json:
            typer.echo(json.dumps(_finite(snap), indent=2, sort_keys=True))
        else:
            render(snap, Console())
