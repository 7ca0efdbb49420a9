"""Running live peers from the command line: event loop, signals, logging, local-swarm children."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

import typer

from cli.processes import die_with_parent, stop_processes


def setup_logging(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    for noisy in ("hivemind", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.ERROR)


def run_async(main, threads: int | None = None) -> None:
    """Run `main(stop_event)` on uvloop; SIGINT/SIGTERM set the event for a clean exit."""
    import torch
    import uvloop

    if threads:
        torch.set_num_threads(threads)

    async def wrapper():
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            if stop.is_set():
                _exit_now(130)  # a second Ctrl-C: leave at once
            stop.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
        return await main(stop)

    try:
        uvloop.run(wrapper())
    except typer.Exit as exc:
        _exit_now(exc.exit_code)
    except KeyboardInterrupt:
        _exit_now(130)
    except Exception as exc:  # noqa: BLE001 - one clear line, the details in the log
        logging.getLogger("swarm").debug("fatal", exc_info=True)
        typer.secho(f"error: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}",
                    fg=typer.colors.RED, err=True)  # fmt: skip
        _exit_now(1)
    _exit_now(0)


def _exit_now(code: int) -> None:
    """Leave without waiting on threads: hivemind's client threads can keep an exiting interpreter
    alive (seen: a finished run spinning for minutes). Our peers were shut down already; whatever
    they left (a p2pd whose DHT process was terminated the hard way) goes with us."""
    sys.stdout.flush()
    sys.stderr.flush()
    for pid in _descendants(os.getpid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    os._exit(code)


def _descendants(root: int) -> list[int]:
    """Every process below `root` (Linux /proc); empty where /proc is not available."""
    children: dict[int, list[int]] = {}
    try:
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/stat") as fh:
                        ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
                except (OSError, ValueError, IndexError):
                    continue
                children.setdefault(ppid, []).append(int(entry))
    except OSError:
        return []
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class LocalSwarm:
    """Volunteer processes on loopback beside the initiator (the embedded demo and the tests)."""

    def __init__(self, log_dir: Path):
        self.log_dir = log_dir
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[subprocess.Popen] = []

    def spawn(self, name: str, args: list[str]) -> subprocess.Popen:
        log = open(self.log_dir / f"{name}.log", "w")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        proc = subprocess.Popen(
            [sys.executable, "-m", "cli.main", "join", *args], stdout=log, stderr=subprocess.STDOUT,
            env=env, start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        self.procs.append(proc)
        return proc

    def stop(self, grace_s: float = 15.0) -> None:
        stop_processes(self.procs, grace_s)
