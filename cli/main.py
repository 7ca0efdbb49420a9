"""Entry point of the `swarm` console script: each sub-command lives in its own module."""

from __future__ import annotations

import typer

from cli import bench, bench_churn, bench_live, dashboard, join, sim, status, train

app = typer.Typer(
    name="swarm",
    help="Train one language model together over volunteer GPUs (GWTF routing over a hivemind DHT).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(bench.bench_app, name="bench")
del bench_live, bench_churn  # they register their commands on bench_app
train.register(app)
join.register(app)
status.register(app)
dashboard.register(app)
sim.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
