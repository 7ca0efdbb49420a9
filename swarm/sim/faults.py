"""Crashes, joins and recovery in the simulator, and when each sender learns of a crash.

Nobody is told of a crash when it happens. A crashed peer stays in every sender's view (and in the
routing's instance) until either
- the sender's own request to it times out (adaptive timeout, swarm/recovery/policy.py): from then
  on that sender skips it and re-sends what it had sent there (forward reroute or re-execution), or
- its DHT record expires: records live RECORD_TTL_S and are refreshed every RECORD_REFRESH_S
  (DESIGN §3), so a record outlives its peer by TTL minus the time since its last refresh, between
  20 and 30 s. Then every router hears of it (`on_crash`): the gwtf bus removes the peer and
  repairs, the oracle re-solves, SWARM's wiring drops its estimates.
The rule is the same for every router; only what each router does with a stale view differs.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

from swarm.recovery.policy import find_break

if TYPE_CHECKING:
    from swarm.sim.state import Microbatch

RECORD_TTL_S = 30.0
RECORD_REFRESH_S = 10.0


def record_outlives_s(peer: str) -> float:
    """Seconds a crashed peer's DHT record stays readable: TTL minus the (fixed, per-peer) phase of
    its refresh cycle at the crash; deterministic and the same for every router."""
    phase = (zlib.crc32(peer.encode()) % 1000) / 1000.0 * RECORD_REFRESH_S
    return RECORD_TTL_S - phase


class Faults:
    """The fault half of `Simulation` (a mixin: it uses the simulation's queue, nodes and router)."""

    def _candidates(self, sender: str, k: int) -> list[str]:
        """The stage-k peers `sender` believes alive: live ones, plus crashed ones whose record has
        not expired and which `sender` has not itself timed out on."""
        gone = self.gone[k]
        if not gone:
            return self.live[k]
        known = self.known_dead.get(sender, ())
        return self.live[k] + [p for p in gone if p not in known]

    def _timed_out(self, sender: str, peer: str, now: float) -> None:
        """`sender` waited in vain for `peer`: it stops choosing it (before the record expires)."""
        if self.nodes[peer].alive or peer not in self.gone[self.nodes[peer].stage]:
            return
        self.known_dead.setdefault(sender, set()).add(peer)
        self.router.on_timeout(sender, peer, now)

    def _restart(self, mb: Microbatch, now: float) -> None:
        """Resume a microbatch whose path met a dead peer: from the first dead hop of its recorded
        path (find_break), via the hop before it, which still holds the activations it sent."""
        k = find_break(mb.path, lambda p: self.nodes[p].alive)
        if k is None:
            k = len(mb.path)
        else:  # the sender that waited in vain and the hop that re-sends both know now
            self._timed_out(mb.sender, mb.path[k], now)
            self._timed_out(mb.path[k - 1] if k > 0 else mb.holder, mb.path[k], now)
        waste = sum(mb.compute[k:]) + mb.holder_compute
        if mb.backward or waste > 0:
            self.res.reexecuted += 1
        else:
            self.res.rerouted += 1
        self.wasted_s += sum(mb.compute[k:])
        for j in range(k, len(mb.path)):
            peer = self.nodes[mb.path[j]]
            peer.stash.discard(mb.id)
            peer.carried.discard(mb.id)
            peer.resident.discard(mb.id)
            mb.compute[j] = 0.0
        mb.holder_compute = 0.0
        del mb.path[k:]
        mb.backward = False
        mb.gen += 1
        self._send_forward(mb, mb.path[k - 1] if k > 0 else mb.holder, k, now)

    def _crash(self, pid: str, now: float) -> None:
        node = self.nodes[pid]
        if not node.alive:
            return
        node.alive, node.died_s = False, now
        self.res.crashes += 1
        self.res.churn_times.append((now, "crash"))
        if node.ready_s is None:
            return  # died while downloading: never served
        self.live[node.stage].remove(pid)
        self.gone[node.stage].append(pid)
        self.q.push(now + record_outlives_s(pid), self.EXPIRE, pid)
        for mid in sorted(node.resident):
            mb = self.mbs[mid]
            if mb.task is not None and mb.task[0] == pid:
                _, start, end = mb.task
                if start < now:
                    self.wasted_s += min(now, end) - start
                node.busy_s -= end - max(start, now) if end > now else 0.0
            mb.gen += 1
            self.q.push(now + self._timeout(mb.sender), self.RECOVER, mid, mb.gen)
        node.resident.clear()
        for mid in node.carried:
            mb = self.mbs[mid]
            if not mb.lost:
                mb.lost = True
                self.res.microbatches_lost += 1

    def _expire(self, pid: str, now: float) -> None:
        """The crashed peer's record expired: the whole swarm (and its router) now knows."""
        stage = self.nodes[pid].stage
        self.gone[stage].remove(pid)
        for known in self.known_dead.values():
            known.discard(pid)
        self._instance = None
        self.router.on_crash(pid, now)

    def _join(self, now: float) -> None:
        machine = self.churn.pop_join()
        self.q.push(self.churn.next_join_s(), self.JOIN)
        self.res.joins += 1
        self.res.churn_times.append((now, "join"))
        self._place(machine, initial=False)

    def _ready(self, pid: str, now: float) -> None:
        node = self.nodes[pid]
        if not node.alive:
            return
        node.ready_s = now
        node.hold_s = self.stage_ready[node.stage]
        self.live[node.stage].append(pid)
        self._instance = None
        self.router.on_join(self.spec(pid), now)
        parked, self.waiting[node.stage] = self.waiting[node.stage], []
        for mid in parked:
            self._restart(self.mbs[mid], now)
