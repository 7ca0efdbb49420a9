"""`swarm bench ...`: benchmark commands that print JSON figures."""

from __future__ import annotations

import typer

bench_app = typer.Typer(help="Benchmarks that print JSON figures.", no_args_is_help=True)
