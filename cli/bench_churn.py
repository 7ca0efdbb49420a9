"""`swarm bench churn`: a local swarm under a seeded kill/join schedule against the same run
without churn. Real processes, real SIGKILLs; at least one peer per stage is always kept alive."""

from __future__ import annotations

import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import typer

from cli.bench import bench_app
from cli.errors import UserError, user_errors
from cli.processes import die_with_parent, stop_processes


def _spawn(args: list[str], log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "cli.main", *args], stdout=open(log, "w"),
                            stderr=subprocess.STDOUT, start_new_session=True,
                            preexec_fn=die_with_parent)  # fmt: skip


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def run_churn(common: list[str], volunteers: int, stages: int, iterations: int, kill_fraction: float,
              seed: int, workdir: Path) -> dict:  # fmt: skip
    """One run with churn; returns its metrics rows, wall time and what was done to it."""
    rng = random.Random(seed)
    metrics = workdir / "churn.jsonl"
    init = _spawn(["train", *common, "--iterations", str(iterations), "--run", "benchchurn",
                   "--metrics-out", str(metrics)], workdir / "init.log")  # fmt: skip
    procs, kills, joins = [init], 0, 0
    start = time.monotonic()
    try:
        deadline = time.monotonic() + 120
        maddr = None
        while maddr is None and time.monotonic() < deadline:
            found = re.search(r"(/ip4/127\.0\.0\.1/tcp/\d+/p2p/\w+)", (workdir / "init.log").read_text())
            maddr = found.group(1) if found else None
            time.sleep(0.5)
        if maddr is None:
            raise UserError("the initiator did not start")
        join = ["join", "--initial-peers", maddr, "--run", "benchchurn", "--threads", "1"]
        live: dict[int, list[subprocess.Popen]] = {s: [] for s in range(stages)}
        for i in range(volunteers):
            stage = i % stages
            live[stage].append(_spawn([*join, "--stage", str(stage)], workdir / f"v{i}.log"))
        procs += [p for peers in live.values() for p in peers]
        to_kill = max(1, round(kill_fraction * volunteers))
        # kills at seeded moments spread over the run (by iterations done), each followed by a join
        marks = sorted(rng.sample(range(2, max(3, iterations - 1)), k=min(to_kill, max(1, iterations - 3))))
        while init.poll() is None:
            done = len(_rows(metrics))
            if marks and done >= marks[0]:
                marks.pop(0)
                candidates = [s for s, peers in live.items() if sum(p.poll() is None for p in peers) >= 2]
                if candidates:
                    stage = rng.choice(candidates)
                    victim = rng.choice([p for p in live[stage] if p.poll() is None])
                    time.sleep(rng.uniform(0.0, 0.5))  # land anywhere in forward or backward
                    os.killpg(victim.pid, signal.SIGKILL)
                    kills += 1
                    joins += 1
                    newcomer = _spawn([*join, "--stage", str(stage)], workdir / f"join{joins}.log")
                    live[stage].append(newcomer)
                    procs.append(newcomer)
            time.sleep(0.2)
        code = init.wait()
    finally:
        stop_processes(procs)
    if code != 0:
        raise UserError(f"the churn run failed (exit {code}); logs in {workdir}")
    return {"rows": _rows(metrics), "seconds": time.monotonic() - start, "kills": kills, "joins": joins}


@bench_app.command("churn")
@user_errors()
def churn(
    volunteers: int = typer.Option(6, help="Stage volunteers at the start."),
    stages: int = typer.Option(3),
    iterations: int = typer.Option(30),
    kill_fraction: float = typer.Option(0.3, help="Fraction of volunteers killed over the run."),
    seed: int = typer.Option(0),
    model: str = typer.Option("gpt2-tiny"),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Training under a seeded kill/join schedule against the same run without churn."""
    if volunteers < 2 * stages or not 0 < kill_fraction < 1 or iterations < 5:
        raise UserError("need >= 2 volunteers per stage, 0 < --kill-fraction < 1 and --iterations >= 5")
    common = ["--model", model, "--stages", str(stages), "--seed", str(seed), "--batch-size", "8",
              "--microbatch-size", "2", "--seq-len", "32"]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        started = time.monotonic()
        calm = subprocess.run(
            [sys.executable, "-m", "cli.main", "train", "--local-swarm", str(volunteers), *common,
             "--iterations", str(iterations), "--run", "benchcalm", "--metrics-out", str(work / "calm.jsonl"),
             "--log-dir", str(work / "calm")], capture_output=True, text=True,
        )  # fmt: skip
        calm_seconds = time.monotonic() - started
        if calm.returncode != 0:
            raise UserError("the run without churn failed")
        calm_rows = _rows(work / "calm.jsonl")
        stormy = run_churn(common, volunteers, stages, iterations, kill_fraction, seed, work)
    rows = stormy["rows"]
    expected = iterations * (8 // 2)
    final = sum(r["loss"] for r in rows[-3:]) / 3
    final_calm = sum(r["loss"] for r in calm_rows[-3:]) / 3
    compute = sum(r["seconds"] * r["peers"] for r in rows)
    result = {
        "iterations_completed": len(rows), "kills": stormy["kills"], "joins": stormy["joins"],
        "microbatches_lost": expected - sum(r["microbatches"] for r in rows),
        "reexecuted": sum(r["reexecuted"] for r in rows), "rerouted": sum(r["rerouted"] for r in rows),
        "gradients_lost": sum(r["gradients_lost"] for r in rows),
        "wasted_compute_fraction": round(sum(r["wasted_compute_s"] for r in rows) / max(compute, 1e-9), 4),
        "final_loss": round(final, 4), "final_loss_no_churn": round(final_calm, 4),
        "final_loss_ratio": round(final / final_calm, 4),
        "wall_time_ratio": round(stormy["seconds"] / calm_seconds, 3),
    }  # fmt: skip
    typer.echo(json.dumps(result, indent=None if as_json else 2))


@bench_app.command("recovery")
@user_errors()
def recovery(
    model: str = typer.Option("llama-small-cpu"),
    stages: int = typer.Option(4),
    lost: int = typer.Option(1, help="The stage that loses every replica."),
    iterations: int = typer.Option(150),
    at: int = typer.Option(100, help="The iteration at which the stage is lost."),
    age: int = typer.Option(10, help="Iterations since the latest checkpoint."),
    seed: int = typer.Option(0),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """What losing a whole stage costs in loss: checkpoint restore vs neighbours (CheckFree) vs re-init."""
    from swarm.config import TrainConfig
    from swarm.recovery.cost import recovery_cost

    if not 0 <= lost < stages or not 0 < age <= at < iterations:
        raise UserError("need 0 <= --lost < --stages and 0 < --age <= --at < --iterations")
    cfg = TrainConfig(model=model, stages=stages, iterations=iterations, seed=seed, batch_size=8,
                      microbatch_size=4, seq_len=64)  # fmt: skip
    cfg.validate()
    figures = recovery_cost(cfg, lost, at, age)
    if as_json:
        typer.echo(json.dumps(figures))
    else:
        for key, value in figures.items():
            typer.echo(f"{key}: {value}")
