"""`swarm train` without --local: the initiator of a live swarm (optionally with a local swarm)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console
from rich.live import Live
from rich.table import Table

from cli.errors import fail
from cli.live import LocalSwarm, run_async, setup_logging
from swarm.config import TrainConfig


def _carried(m) -> str:
    """Microbatches each peer carried, peers of a stage by commas, stages by bars."""
    return " | ".join(",".join(str(c) for c in m.per_stage[s].values()) for s in sorted(m.per_stage))


def _view(cfg: TrainConfig, rows: list, status: str) -> Table:
    table = Table(title=f"run {cfg.run_id}: {cfg.model}, {cfg.stages} stages", expand=False)
    for col in (
        "iteration",
        "loss",
        "tokens/s",
        "s/iter",
        "peers",
        "carried per stage",
        "bottleneck",
        "rerouted",
        "re-executed",
    ):
        table.add_column(col)
    for m in rows[-8:]:
        table.add_row(str(m.iteration), f"{m.loss:.4f}", f"{m.tokens / m.seconds:,.0f}", f"{m.seconds:.2f}",
                      str(m.peers), _carried(m), f"stage {m.bottleneck_stage}", str(m.rerouted),
                      str(m.reexecuted))  # fmt: skip
    table.caption = status
    return table


def _line(m) -> str:
    """One iteration as a log line, for output that is not a terminal (a file, a pipe, CI)."""
    return (f"iteration {m.iteration}  loss {m.loss:.4f}  tokens/s {m.tokens / m.seconds:,.0f}  "
            f"s/iter {m.seconds:.2f}  peers {m.peers}  carried per stage {_carried(m)}  "
            f"bottleneck stage {m.bottleneck_stage}  rerouted {m.rerouted}  "
            f"re-executed {m.reexecuted}")  # fmt: skip


@contextmanager
def _progress(console: Console, cfg: TrainConfig, rows: list) -> Iterator[Callable[..., None]]:
    """A live table on a terminal; elsewhere one line per iteration or status change, since a
    redrawn table in a log file shows only its last frame, cut to 80 columns."""
    if console.is_terminal:
        with Live(_view(cfg, rows, "starting"), console=console, refresh_per_second=2) as live:
            yield lambda text, m=None: live.update(_view(cfg, rows, text))
        return
    last = ""

    def show(text: str, m=None) -> None:
        nonlocal last
        if m is not None:
            console.print(_line(m), soft_wrap=True, highlight=False)
        elif text != last and not text.endswith("microbatches in flight"):
            console.print(text, soft_wrap=True, highlight=False)  # its iteration's line follows
        last = text

    yield show


def train_swarm(
    cfg: TrainConfig, *, initial_peers: list[str], host: str, local_swarm: int, holders: int,
    log_dir: str, threads: int, verbose: bool, save: str | None, metrics_out: str | None,
    resume: str | None = None, checkpoint_every: int = 0, region: str = "", min_peers: int | None = None,
) -> None:  # fmt: skip
    setup_logging(verbose)
    from swarm.node import SwarmNode
    from swarm.runner import run_initiator

    console = Console(stderr=True)
    children = LocalSwarm(Path(log_dir)) if local_swarm or holders > 1 else None

    async def main(stop):
        node = SwarmNode(cfg.run_id, initial_peers, host=host)
        try:
            await node.start()
        except Exception as exc:  # noqa: BLE001 - hivemind raises many kinds here
            fail(f"cannot start or reach the DHT ({', '.join(initial_peers) or 'new swarm'}): {exc}")
        maddrs = node.maddrs()
        console.print(f"[bold]swarm train[/]: volunteers join with  swarm join --run {cfg.run_id} "
                      f"--initial-peers {maddrs[0]}", soft_wrap=True)  # fmt: skip
        rows: list = []
        state = {"status": "starting"}
        try:
            if children:
                for i in range(local_swarm):
                    children.spawn(f"volunteer{i}", ["--initial-peers", maddrs[0], "--run", cfg.run_id,
                                                     "--stage", str(i % cfg.stages), "--threads", "1",
                                                     "--name", f"local-{i}"])  # fmt: skip
                for k in range(1, holders):
                    children.spawn(f"holder{k}", ["--initial-peers", maddrs[0], "--run", cfg.run_id,
                                                  "--role", "holder", "--threads", "1",
                                                  "--name", f"holder-{k}"])  # fmt: skip
            with _progress(console, cfg, rows) as show:

                def status(text: str) -> None:
                    state["status"] = text
                    show(text)

                def on_iteration(m) -> None:
                    rows.append(m)
                    show(f"iteration {m.iteration} done", m)

                train = asyncio.create_task(run_initiator(cfg, node, on_iteration=on_iteration, status=status,
                                                          save=save, metrics_out=metrics_out, resume=resume,
                                                          checkpoint_every=checkpoint_every,
                                                          min_holders=holders, region=region,
                                                          min_peers=local_swarm if min_peers is None
                                                          else min_peers))  # fmt: skip
                stopper = asyncio.create_task(stop.wait())
                done, _ = await asyncio.wait({train, stopper}, return_when=asyncio.FIRST_COMPLETED)
                if train not in done:
                    train.cancel()
                    console.print("interrupted: stopping the run")
                    await asyncio.wait({train}, timeout=30)  # let it withdraw while the DHT is up
                else:
                    stopper.cancel()
                    train.result()
        finally:
            if children:
                children.stop()
            await node.shutdown()
        if rows:
            console.print(f"done: {len(rows)} iterations, loss {rows[0].loss:.4f} -> {rows[-1].loss:.4f}"
                          + (f", checkpoint in {save}" if save else ""))  # fmt: skip

    run_async(main, threads or (1 if children else None))
