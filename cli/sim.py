"""`swarm sim`: the discrete-event simulator (swarm/sim): GWTF routing against SWARM and an oracle."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import typer

from cli.errors import UserError, user_errors
from swarm.flow.instance import InstanceError
from swarm.routing.demand import POLICIES
from swarm.sim.hardware import PRESETS, HardwareError

ROUTER_CHOICES = ("gwtf", "swarm", "oracle", "all")


class _Reporter:
    """Says on stderr how far a long simulation is, at most every PRINT_S seconds of wall time (the
    simulation reads no clock: it reports every few thousand events and this edge throttles)."""

    PRINT_S = 5.0

    def __init__(self, sc) -> None:
        self.sc = sc

    def __call__(self, router: str):
        sc, start, last = self.sc, time.monotonic(), [-math.inf]

        def report(phase: str, t: float, res, messages: int) -> None:
            now = time.monotonic()
            if phase != "done" and now - last[0] < self.PRINT_S:
                return
            last[0] = now
            parts = [f"{sc.name} / {router}: {phase}"]
            if phase == "routing setup":
                parts.append(f"protocol time {t:.1f} s")
            else:
                limit = f" of {sc.max_time_s:,.0f}" if sc.max_time_s is not None else ""
                parts.append(f"simulated {t:,.0f} s{limit}")
                parts.append(
                    f"iteration {res.iterations}" + (f" of {sc.iterations}" if sc.iterations < 10**6 else "")
                )
                parts.append(f"{res.completed:,} microbatches done")
                parts.append(f"{res.crashes} crashes, {res.joins} joins")
            if messages:
                parts.append(f"{messages:,} protocol messages")
            parts.append(f"{now - start:,.0f} s wall")
            typer.echo(", ".join(parts), err=True)

        return report


# The gwtf router runs every protocol message of every peer (README, "Results (issue 6)"): at 200
# peers a simulated hour takes tens of minutes of wall time, at 1,000 peers its first convergence
# alone about a quarter of an hour and the hour several hours on 2 cores.
SLOW_GWTF_PEERS = 200


def gwtf_scale_warning(peers: int, routers: tuple[str, ...]) -> str | None:
    """What a user should know before a gwtf run that will take long (None: nothing)."""
    if "gwtf" not in routers or peers < SLOW_GWTF_PEERS:
        return None
    return (
        f"note: the gwtf router simulates every protocol message; with {peers} peers this takes "
        "from tens of minutes to hours of wall time (--progress shows how far it is; "
        "--router swarm or oracle, or fewer --peers, run in seconds to minutes)"
    )


def _format_row(router: str, summary: dict) -> str:
    cells = "  ".join(f"{k}={v}" for k, v in summary.items())
    return f"  {router:<7} {cells}"


def _override(
    sc,
    model: str | None,
    peers: int | None,
    stages: int | None,
    hours: float | None,
    demand: str | None = None,
    no_link_capacity: bool = False,
):
    """The scenario with the command line's overrides applied (and named after them)."""
    from swarm.sim.scenario import ScenarioError

    tags = []
    if model is not None:
        sc, tags = sc.with_(model=PRESETS[model]), [*tags, model]
    if peers is not None:
        if sc.explicit_peers:
            raise ScenarioError(f"{sc.name}: --peers needs a generated swarm, not an explicit peer list")
        sc, tags = sc.with_(peer_count=peers), [*tags, f"{peers}p"]
    if stages is not None:
        sc, tags = sc.with_(stages=stages), [*tags, f"{stages}s"]
    if hours is not None:
        sc, tags = sc.with_(max_time_s=hours * 3600.0, iterations=10**9), [*tags, f"{hours:g}h"]
    if demand is not None and demand != sc.holder_demand:
        sc, tags = sc.with_(holder_demand=demand), [*tags, f"demand-{demand}"]
    if no_link_capacity and sc.link_capacity:
        sc, tags = sc.with_(link_capacity=False), [*tags, "no-link-capacity"]
    return sc.with_(name=":".join([sc.name, *tags])) if tags else sc


def register(app: typer.Typer) -> None:
    """Add the `sim` command to the app."""

    @app.command()
    @user_errors(InstanceError, HardwareError)
    def sim(
        scenario: list[str] = typer.Option(
            [],
            "--scenario",
            "-s",
            help="Built-in name (see --list), NAME:PRESET, or a .json/.toml scenario file; repeatable.",
        ),
        router: str = typer.Option("all", help="gwtf, swarm, oracle or all."),
        seed: int | None = typer.Option(None, help="Override the scenario's seed."),
        model: str | None = typer.Option(None, help=f"Override the model preset ({', '.join(PRESETS)})."),
        peers: int | None = typer.Option(None, help="Override the number of peers (generated swarms only)."),
        stages: int | None = typer.Option(None, help="Override the number of pipeline stages."),
        hours: float | None = typer.Option(
            None, help="Simulate this many hours instead of a number of iterations (stops at the limit)."
        ),
        holder_demand: str | None = typer.Option(
            None,
            help="What holders ask the routing for: all (as much as the swarm carries) or adaptive "
            "(twice the rate they measured last iteration); overrides the scenario's.",
        ),
        no_link_capacity: bool = typer.Option(
            False,
            "--no-link-capacity",
            help="Route as if links carried any rate (only GPUs limit the flow); overrides the scenario's.",
        ),
        progress: bool | None = typer.Option(
            None,
            "--progress/--no-progress",
            help="Say on stderr how far each run is, every 5 s of wall time "
            "(default: when stderr is a terminal).",
        ),
        as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of text."),
        plot: Path | None = typer.Option(None, help="Write PNG figures into this directory."),
        plot_at: float | None = typer.Option(
            None,
            help="The flow-graph figure shows the first iteration that starts at or after this "
            "simulated second (default: the middle of the run); overrides the scenario's flow_graph_at_s.",
        ),
        list_: bool = typer.Option(False, "--list", help="List the built-in scenarios and exit."),
    ) -> None:
        """Simulate a training run and print, per router, training time, throughput, idle and wasted
        GPU time, lost and re-executed microbatches (simulated seconds, deterministic per seed)."""
        from swarm.sim import compare, ratios, resolve_scenario
        from swarm.sim.scenario import ScenarioError, builtin_names

        if list_:
            typer.echo("\n".join(builtin_names()))
            return
        if not scenario:
            raise UserError("give a scenario: --scenario NAME|FILE (see --list)")
        if router not in ROUTER_CHOICES:
            raise UserError(f"unknown router {router!r} (choose from {', '.join(ROUTER_CHOICES)})")
        if model is not None and model not in PRESETS:
            raise UserError(f"unknown model preset {model!r} (known: {', '.join(PRESETS)})")
        if seed is not None and seed < 0:
            raise UserError(f"--seed must be >= 0, got {seed}")
        if plot is not None and plot.exists() and not plot.is_dir():
            raise UserError(f"--plot {plot} exists and is not a directory")
        for flag, value in (("--peers", peers), ("--stages", stages), ("--hours", hours)):
            if value is not None and not value > 0:
                raise UserError(f"{flag} must be positive, got {value}")
        if plot_at is not None and not 0 <= plot_at < math.inf:
            raise UserError(f"--plot-at must be a number of simulated seconds >= 0, got {plot_at}")
        if holder_demand is not None and holder_demand not in POLICIES:
            raise UserError(f"--holder-demand must be one of {', '.join(POLICIES)}, got {holder_demand!r}")
        routers = ("gwtf", "swarm", "oracle") if router == "all" else (router,)
        try:
            scenarios = [
                _override(
                    resolve_scenario(name), model, peers, stages, hours, holder_demand, no_link_capacity
                )
                for name in scenario
            ]
            if plot_at is not None:  # (a figure's moment: the results do not change, the name stays)
                scenarios = [sc.with_(flow_graph_at_s=plot_at) for sc in scenarios]
        except ScenarioError as exc:
            raise UserError(str(exc)) from None
        show_progress = sys.stderr.isatty() if progress is None else progress
        table = {}
        report = []
        for sc in scenarios:
            if sc.stages > sc.model.layers:
                raise UserError(
                    f"{sc.name}: {sc.stages} stages but {sc.model.name} has {sc.model.layers} layers"
                )
            warning = gwtf_scale_warning(sc.peer_count, routers)
            if warning is not None:
                typer.secho(warning, fg=typer.colors.YELLOW, err=True)
            results = compare(sc, routers, seed, _Reporter(sc) if show_progress else None)
            table[sc.name] = results
            entry = {
                "scenario": sc.name,
                "model": sc.model.name,
                "seed": sc.seed if seed is None else seed,
                "results": {name: {**r.summary(), **r.details()} for name, r in results.items()},
                "ratios": ratios(results),
            }
            report.append(entry)
            if not as_json:
                typer.echo(f"{sc.name} (model {sc.model.name}, seed {entry['seed']})")
                for name, r in results.items():
                    typer.echo(_format_row(name, r.summary()))
                for key, value in entry["ratios"].items():
                    typer.echo(f"  {key}={value}")
        if plot is not None:
            from swarm.sim.plot import write_figures

            try:
                paths = write_figures(table, plot)
            except OSError as exc:
                raise UserError(f"cannot write figures to {plot}: {exc.strerror}") from None
            if not as_json:
                typer.echo(f"figures: {', '.join(str(p) for p in paths)}")
        if as_json:
            typer.echo(json.dumps({"scenarios": report}, indent=1))
