"""`swarm bench ...`: benchmark commands that print JSON figures."""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

import typer

from cli.errors import UserError, user_errors
from cli.speed_reference import reference_seconds
from swarm.flow.bus import MessageBus
from swarm.flow.churn import churn as apply_churn
from swarm.flow.generate import random_instance
from swarm.flow.instance import InstanceError, load_instance
from swarm.flow.reference import max_flow_value, with_optimal_demand
from swarm.flow.report import MaxFlowWatch, figures, sweep

bench_app = typer.Typer(help="Benchmarks that print JSON figures.", no_args_is_help=True)


@bench_app.command("flow")
@user_errors(InstanceError, ValueError)
def flow(
    instance: Path | None = typer.Option(None, "--instance", help="Instance JSON file (see README)."),
    random: bool = typer.Option(False, "--random", help="Generate a random geo instance instead."),
    peers: int = typer.Option(40, "--peers", help="Random: total stage peers."),
    stages: int = typer.Option(4, "--stages", help="Random: number of stages."),
    holders: int = typer.Option(1, "--holders", help="Random: number of data holders."),
    seed: int = typer.Option(0, "--seed", help="Seed of the instance, delays and churn."),
    bus_seed: int | None = typer.Option(
        None, "--bus-seed", help="Seed of the message delays alone (default: --seed); a sweep names it."
    ),
    churn: float = typer.Option(
        0.0, "--churn", help="After convergence remove this fraction of peers, add as many, re-converge."
    ),
    loss: float = typer.Option(0.0, "--loss", help="Message loss probability (the protocol retransmits)."),
    delay_min: float = typer.Option(0.01, "--delay-min", help="Minimum message delay, virtual seconds."),
    delay_max: float = typer.Option(0.05, "--delay-max", help="Maximum message delay, virtual seconds."),
    no_improve: bool = typer.Option(False, "--no-improve", help="Plain push-relabel, no local improvement."),
    link_capacity: bool = typer.Option(
        False, "--link-capacity", help="Links carry at most bandwidth / activation bytes microbatches/s."
    ),
    optimal_demand: bool = typer.Option(
        False,
        "--optimal-demand",
        help="Diagnostic: every holder asks for its share of the exact min-cost maximum flow.",
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Run the decentralized routing protocol and compare it with the exact optimum."""
    if (instance is None) == (not random):
        raise UserError("give exactly one of --instance FILE or --random")
    if not 0.0 <= churn < 1.0:
        raise UserError(f"--churn must be in [0, 1), got {churn}")
    if not 0.0 <= loss < 1.0:
        raise UserError(f"--loss must be in [0, 1), got {loss}")
    if not 0.0 <= delay_min <= delay_max:
        raise UserError("--delay-min and --delay-max must satisfy 0 <= min <= max")
    if optimal_demand and churn > 0:
        raise UserError("--optimal-demand hands over the split before churn: give it without --churn")
    inst = load_instance(instance) if instance is not None else random_instance(peers, stages, holders, seed)
    if link_capacity:
        inst = dataclasses.replace(inst, link_capacity=True)
    reference = inst
    if optimal_demand:
        inst = with_optimal_demand(inst)
    timing = seed if bus_seed is None else bus_seed
    bus = MessageBus(inst, seed=timing, delay=(delay_min, delay_max), loss=loss, improve=not no_improve)
    start = time.perf_counter()
    stats = bus.run_until_quiescent()
    seconds = time.perf_counter() - start
    out = figures(bus, stats, reference)
    out["seconds"] = round(seconds, 3)
    _against_reference(out)
    if churn > 0:
        removed, added = apply_churn(bus, churn, seed)
        start = time.perf_counter()
        restored = MaxFlowWatch(bus, max_flow_value(bus.instance))
        after = bus.run_until_quiescent(watch=restored, every=bus.retry_s)
        again = figures(bus, after)
        again["seconds"] = round(time.perf_counter() - start, 3)
        out["reconverge_rounds"] = after.rounds
        out["flow_restored_rounds"] = restored.rounds
        out["churn"] = {
            "removed": len(removed),
            "added": len(added),
            **{k: v for k, v in again.items() if k != "routes"},
            "seconds_over_reference": round(again["seconds"] / out["reference_seconds"], 1),
        }
        out["routes"] = again["routes"]
    if as_json:
        typer.echo(json.dumps(out, sort_keys=True))
        return
    for key, value in out.items():
        if key != "routes":
            typer.echo(f"{key}: {value}")


@bench_app.command("flow-sweep")
@user_errors(ValueError)
def flow_sweep(
    instances: int = typer.Option(30, "--instances", help="How many seeded random geo instances."),
    seed: int = typer.Option(0, "--seed", help="Seed of the sweep (sizes, instances, delays)."),
    max_stages: int = typer.Option(12, "--max-stages", help="Stages drawn from 4..this."),
    max_per_stage: int = typer.Option(20, "--max-per-stage", help="Peers per stage drawn from 3..this."),
    max_holders: int = typer.Option(1, "--max-holders", help="Data holders drawn from 1..this."),
    link_capacity: bool = typer.Option(
        False, "--link-capacity", help="Links carry at most bandwidth / activation bytes microbatches/s."
    ),
    activation_mb: float = typer.Option(4.0, "--activation-mb", help="MiB of activations per microbatch."),
    timings: int = typer.Option(
        1, "--timings", help="Run every instance under this many message timings (figures count runs)."
    ),
    polish: bool = typer.Option(
        False,
        "--polish-bound",
        help="Also report the max path after greedy exact-information exchanges from each run's routes.",
    ),
    optimal_demand: bool = typer.Option(
        False,
        "--optimal-demand",
        help="Diagnostic: every holder asks for its share of the exact min-cost maximum flow.",
    ),
    shared: bool = typer.Option(
        False,
        "--shared-plan-bound",
        help="Also report the paths after exact stage plans over every holder's flow from each run's routes.",
    ),
    chains: bool = typer.Option(
        False,
        "--chain-bound",
        help="Also report the paths after greedy hand-overs and make-room chains across holders from "
        "each run's routes.",
    ),
) -> None:
    """The routing protocol against the exact optimum over many random instances (JSON figures)."""
    if max_stages < 4 or max_per_stage < 3 or max_holders < 1 or timings < 1:
        raise UserError("--max-stages must be >= 4, --max-per-stage >= 3, --max-holders and --timings >= 1")
    if shared and link_capacity:
        raise UserError("--shared-plan-bound plans without link limits: not with --link-capacity")
    if chains and link_capacity:
        raise UserError("--chain-bound moves flow without link limits: not with --link-capacity")
    if not activation_mb > 0:
        raise UserError(f"--activation-mb must be positive, got {activation_mb}")
    start = time.perf_counter()
    out = sweep(
        instances,
        seed,
        (4, max_stages),
        (3, max_per_stage),
        (1, max_holders),
        link_capacity,
        activation_mb * 2**20,
        timings,
        polish,
        optimal_demand,
        shared,
        chains,
    )
    out["seconds"] = round(time.perf_counter() - start, 3)
    _against_reference(out)
    typer.echo(json.dumps(out, sort_keys=True))


def _against_reference(out: dict) -> None:
    """Add the reference workload's time on this machine now, and our seconds over it (see
    cli/speed_reference.py: comparable across machines and days, where wall times are not)."""
    ref = reference_seconds()
    out["reference_seconds"] = round(ref, 3)
    out["seconds_over_reference"] = round(out["seconds"] / ref, 1)


@bench_app.command("flow-events")
@user_errors(InstanceError, ValueError)
def flow_events(
    shapes: str = typer.Option(
        "4x8,8x8,16x8", "--shapes", help="STAGESxPEERS_PER_STAGE, comma-separated, smallest first."
    ),
    events: int = typer.Option(20, "--events", help="Single crashes and joins, in turn, per shape."),
    seed: int = typer.Option(0, "--seed", help="Seed of the instances, the events and the delays."),
    holders: int = typer.Option(1, "--holders", help="Data holders."),
    link_capacity: bool = typer.Option(
        False, "--link-capacity", help="Links carry at most bandwidth / activation bytes microbatches/s."
    ),
) -> None:
    """What one crash or join costs the converged protocol, per shape (JSON figures)."""
    from swarm.flow.event_cost import event_costs, parse_shapes

    start = time.perf_counter()
    out = event_costs(parse_shapes(shapes), events, seed, holders, link_capacity)
    out["seconds"] = round(time.perf_counter() - start, 3)
    _against_reference(out)
    typer.echo(json.dumps(out, sort_keys=True))
