"""`swarm sim`: the discrete-event simulator (swarm/sim)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the `sim` command to the app (lands with the simulator issue)."""
