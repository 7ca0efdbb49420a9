"""Dashboard test helpers: synthetic run records, an in-process ASGI client, live process control."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from cli.processes import die_with_parent
from swarm.dashboard.records import RunRecords
from swarm.registry import EventRecord, FlowRecord, Manifest, PeerRecord, ProgressRecord

ROOT = Path(__file__).resolve().parents[2]
XSS_NAME = "<img src=x onerror=alert(1)>"
DEAD_PEER = "/ip4/127.0.0.1/tcp/9/p2p/QmVFGdDFRSRcj61ngbLYiXKsaLbU7MyzYWELdLGNeU98W9"


def manifest(stages: int = 3, **kw) -> Manifest:
    base = dict(
        run_id="demo",
        protocol_version=1,
        model_config={"model_type": "gpt2", "n_layer": 2 * stages},
        layout=[(2 * s, 2 * s + 2) for s in range(stages)],
        microbatch_size=2,
        seq_len=32,
        hidden_size=64,
        train={},
        data_id="embedded",
        seed=0,
        initiator="QmHolder",
        created_at=1000.0,
    )
    return Manifest(**{**base, **kw})


def peer(peer_id: str, stage: int, throughput: float = 10.0, **kw) -> PeerRecord:
    base = dict(
        peer_id=peer_id,
        role="holder" if stage == -1 else "stage",
        stage=stage,
        blocks=(0, 0) if stage == -1 else (2 * stage, 2 * stage + 2),
        throughput=throughput,
        capacity=throughput,
        free_memory=0,
        region="eu",
        version="0.1.0",
        protocol_version=1,
        addresses=(),
        joined_at=1000.0,
        state="serving",
        iteration=3,
        name=peer_id.lower(),
    )
    return PeerRecord(**{**base, **kw})


def flow(peer_id: str, routes: dict[str, dict[str, float]], spare: float = 1.0) -> FlowRecord:
    return FlowRecord(
        peer_id=peer_id, version=1, spare=spare, labels={}, cheapest={}, worst={}, routes=routes
    )


def progress(iteration: int = 4, loss: float = 3.0, **kw) -> ProgressRecord:
    base = dict(
        holder="QmHolder",
        iteration=iteration,
        microbatches=4,
        loss=loss,
        tokens_per_s=500.0,
        seconds=0.25,
        updated_at=1010.0,
        extra={"losses": [[i, 5.0 - i / 4] for i in range(iteration + 1)], "rerouted": 2, "reexecuted": 1},
    )
    return ProgressRecord(**{**base, **kw})


def records(
    peers: dict[int, list[PeerRecord]], flows: dict[str, FlowRecord] | None = None, **kw
) -> RunRecords:
    base = dict(
        manifest=manifest(),
        peers=peers,
        progress=[progress()],
        flows=flows or {},
        events=[EventRecord(kind="join", peer_id="QmA", stage=0, at=1001.0, detail="stage a")],
        rejected={},
        read_at=1011.0,
    )
    return RunRecords(**{**base, **kw})


def ring() -> RunRecords:
    """A holder H, two stage-0 peers A and B, C at stage 1, D at stage 2, with routes H->A|B->C->D->H."""
    peers = {
        -1: [peer("QmHolder", -1, 1000.0, name="initiator")],
        0: [peer("QmA", 0, 6.0), peer("QmB", 0, 4.0)],
        1: [peer("QmC", 1, 12.0)],
        2: [peer("QmD", 2, 20.0)],
    }
    h = "QmHolder"
    flows = {
        h: flow(h, {h: {"QmA": 6.0, "QmB": 3.0}}),
        "QmA": flow("QmA", {h: {"QmC": 6.0}}, spare=0.0),
        "QmB": flow("QmB", {h: {"QmC": 3.0}}, spare=1.0),
        "QmC": flow("QmC", {h: {"QmD": 9.0}}, spare=3.0),
        "QmD": flow("QmD", {h: {h: 9.0}}, spare=11.0),
    }
    return records(peers, flows)


def asgi_get(app, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    """One request through the ASGI app in-process (no sockets, no HTTP client library)."""
    raw_path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "headers": [(b"host", b"test")],
        "client": ("127.0.0.1", 1),
        "server": ("test", 80),
        "root_path": "",
    }
    sent: list[dict] = []
    requests = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict:
        return requests.pop() if requests else {"type": "http.disconnect"}

    async def send(message: dict) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    start = next(m for m in sent if m["type"] == "http.response.start")
    headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], headers, body


# ---------------------------------------------------------------- live processes
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_json(url: str, timeout: float = 5.0) -> dict:
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return json.loads(r.read())


def descendants(pid: int) -> set[int]:
    """Every process below `pid` (volunteers, their p2pd daemons)."""
    out = subprocess.run(["ps", "-e", "-o", "pid=,ppid="], capture_output=True, text=True).stdout
    children: dict[int, list[int]] = {}
    for line in out.splitlines():
        p, pp = map(int, line.split())
        children.setdefault(pp, []).append(p)
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1].split()[0] != "Z"
    except OSError:
        return False


def in_session(session: int, name: str | None = None) -> set[int]:
    """Pids in a session (only those named `name`, if given)."""
    exact = ["-x", name] if name else []
    out = subprocess.run(["pgrep", "-s", str(session), *exact], capture_output=True, text=True)
    return {int(x) for x in out.stdout.split()}


def kill_tree(proc: subprocess.Popen, grace: float = 6.0) -> set[int]:
    """SIGTERM the process tree and session, then SIGKILL what is left; returns pids still alive
    (should be none). The tree is looked up again before each signal: a daemon started while the
    process shut down, or one whose parent died first (reparented, so no longer a descendant), is
    still in the session the process was started in. A killed process in uninterruptible I/O
    dies when that returns: on a loaded 2-core CI machine one outlived 5 s once, so it gets 20."""
    tree: set[int] = set()
    # SIGKILL is sent again to whatever the session still holds: a process that was starting a
    # daemon as it died leaves it behind (CI once failed a teardown on a p2pd found running [R]
    # after the last signal)
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 20.0), (signal.SIGKILL, 5.0)):
        tree |= descendants(proc.pid) | in_session(proc.pid) | {proc.pid}
        for pid in tree:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.time() + wait
        while time.time() < deadline and any(alive(p) for p in tree):
            proc.poll()  # reap the direct child so it does not linger as a zombie
            time.sleep(0.1)
        if not any(alive(p) for p in tree) and not (in_session(proc.pid) - tree):
            break
    proc.wait(timeout=5)
    return {p for p in tree if alive(p)}


def describe(pid: int) -> str:
    """pid, state letter and command line of a process (for a leak report)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().split(") ")[-1].split()[0]
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return f"{pid} (gone)"
    return f"{pid} [{state}] {cmd[:160]}"


def p2pd_in(session: int) -> list[int]:
    """Live p2pd daemons in a session. pgrep also lists zombies: a daemon killed with its parent
    already gone waits, dead, for init to reap it (CI once failed a teardown on one, `[Z]`)."""
    return sorted(p for p in in_session(session, "p2pd") if alive(p))


class Procs:
    """Processes a fixture started, all in their own sessions, all ended at teardown."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: list[subprocess.Popen] = []

    def start(self, name: str, args: list[str]) -> subprocess.Popen:
        env = {**os.environ, "COLUMNS": "250", "PYTHONUNBUFFERED": "1"}
        log = open(self.logs / f"{name}.log", "w")
        proc = subprocess.Popen(
            [sys.executable, "-m", *args], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=env, start_new_session=True, preexec_fn=die_with_parent,
        )  # fmt: skip
        proc.log_path = self.logs / f"{name}.log"  # type: ignore[attr-defined]
        proc.name = name  # type: ignore[attr-defined]
        self.started.append(proc)
        return proc

    def stop_all(self) -> None:
        leaked = {}
        for proc in reversed(self.started):
            left = kill_tree(proc)
            if left or p2pd_in(proc.pid):
                leaked[proc.name] = [describe(p) for p in sorted(left | set(p2pd_in(proc.pid)))]
        assert not leaked, f"processes left running: {leaked}"


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except Exception as exc:  # noqa: BLE001 - retried until the deadline
            last = exc
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def maddr_of(proc: subprocess.Popen, timeout: float = 90.0) -> str:
    def find():
        assert proc.poll() is None, proc.log_path.read_text()[-3000:]
        m = re.search(r"(/ip4/127\.0\.0\.1/tcp/\d+/p2p/\w+)", proc.log_path.read_text())
        return m.group(1) if m else None

    return wait_for(find, timeout, "the initiator's multiaddr")


def dashboard(procs: Procs, name: str, maddr: str, run: str = "swarm") -> str:
    port = free_port()
    args = ["cli.main", "dashboard", "--initial-peers", maddr, "--run", run]
    procs.start(name, [*args, "--port", str(port), "--interval", "1"])
    return f"http://127.0.0.1:{port}"
