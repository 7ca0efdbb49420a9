"""The `swarm` command line (typer): train, join, status, bench, sim, dashboard."""
