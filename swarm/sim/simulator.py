"""The discrete-event simulation of a training run: microbatches, crashes, joins, averaging.

Model of a hop: the sender's activations cross the directed link (serialised per link: bytes /
bandwidth, then one-way latency), queue FIFO at the receiver's GPU, and take its forward (1/3) or
backward (2/3) compute time. Backward follows the recorded forward path. An iteration ends when all
its microbatches are back home.

Averaging (swarm/sim/allreduce.py) overlaps as far as the synchronous step allows: a replica sends
its gradient as soon as its own last backward of the iteration is done, and computes nothing of the
next iteration until it has taken its step. The holders inject the next iteration at once; its
microbatches queue at replicas that are still averaging. The holders' own embedding/head averaging
is not modelled (it would add the same delay for every router).

Faults follow swarm/recovery/policy.py, the rules the live peers use: a sender notices a dead next
hop after its adaptive timeout and re-sends the stored activations to a replacement (forward
reroute); a backward pass that meets a dead hop is re-run from the first dead hop of its recorded
path (re-execution); a stage with no live peer holds its microbatches until a joiner has downloaded
the stage's state. Data holders do not crash. Who knows of a crash when: swarm/sim/faults.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

from swarm.flow.cost import HolderRoutes
from swarm.flow.instance import HolderSpec, Instance, InstanceError, Link, PeerSpec, geo_matrix
from swarm.recovery.policy import adaptive_timeout, stage_must_wait
from swarm.routing.demand import ALL, next_demand
from swarm.sim.allreduce import step_times
from swarm.sim.engine import EventQueue
from swarm.sim.faults import Faults
from swarm.sim.hardware import FORWARD_SHARE, gpu
from swarm.sim.metrics import SimResult
from swarm.sim.population import Churn, Machine, eligible_stages, least_capacity_stage
from swarm.sim.scenario import Scenario
from swarm.sim.state import LoadView, Microbatch, Node

(
    FWD_ARRIVE,
    FWD_DONE,
    HOME_ARRIVE,
    HOME_DONE,
    BWD_ARRIVE,
    BWD_DONE,
    GRAD_HOME,
    RECOVER,
    CRASH,
    JOIN,
    READY,
    ITER_START,
    END,
    EXPIRE,
) = range(14)


class Router(Protocol):
    """What the simulator asks of a router (see swarm/sim/routers.py)."""

    name: str

    def start(self, sim: Simulation) -> None: ...
    def next_hop(self, holder: str, node: str, stage: int, candidates: list[str], now: float) -> str: ...
    def on_sent(self, node: str, hop: str, now: float) -> None: ...
    def on_done(self, node: str, hop: str, seconds: float, now: float) -> None: ...
    def on_crash(self, peer: str, now: float) -> None: ...
    def on_timeout(self, node: str, peer: str, now: float) -> None: ...
    def on_join(self, peer: PeerSpec, now: float) -> None: ...
    def on_demand(self, demands: dict[str, float], now: float) -> None: ...
    def join_stage(self, eligible: list[int], now: float) -> int: ...
    def routes(self, now: float) -> HolderRoutes | None: ...
    def messages(self) -> int: ...


# Progress reports (for a long run, e.g. 1,000 peers for an hour): (phase, simulated seconds, the
# result so far, protocol messages so far). Called every PROGRESS_EVERY events, not on a clock: the
# simulation stays a pure function of its inputs; the CLI decides how often to print.
Progress = Callable[[str, float, SimResult, int], None]
PROGRESS_EVERY = 5_000


class Simulation(Faults):
    """One scenario, one router. `run()` returns the `SimResult`."""

    RECOVER, JOIN, EXPIRE = RECOVER, JOIN, EXPIRE  # event kinds the fault mixin schedules

    def __init__(self, scenario: Scenario, router: Router, progress: Progress | None = None) -> None:
        self.sc, self.router = scenario, router
        self.progress = progress
        model = scenario.model
        self.stages = scenario.stages
        self.layers = model.stage_layers(self.stages)
        self.act_bytes = model.activation_bytes
        self.q = EventQueue()
        self.nodes: dict[str, Node] = {}
        self.live: list[list[str]] = [[] for _ in range(self.stages)]
        self.gone: list[list[str]] = [[] for _ in range(self.stages)]  # crashed, record not expired
        self.known_dead: dict[str, set[str]] = {}  # sender -> gone peers it timed out on
        self.load = LoadView(self.nodes)
        self.mbs: dict[int, Microbatch] = {}
        self.waiting: list[list[int]] = [[] for _ in range(self.stages)]
        self.link_free: dict[tuple[str, str], float] = {}
        self._links: dict[tuple[str, str], Link] = {}
        self._instance: Instance | None = None
        self.churn = Churn(scenario)
        self.res = SimResult(scenario.name, router.name, 0.0, 0.0, 0.0, 0.0, 0, 0, 0)
        self.wasted_s = 0.0
        self.iter_done = 0
        self.next_mb = 0
        self.snapshot_iter = max(scenario.iterations // 2, 0)
        # (a time-limited run may never reach its middle iteration: then half its time)
        self.snapshot_half_time = scenario.max_time_s / 2 if scenario.max_time_s is not None else math.inf
        self.param_bytes = [model.stage_param_bytes(n) for n in self.layers]
        self.stage_ready = [0.0] * self.stages  # when the stage has taken its last step
        self._traffic: dict[tuple[str, str], int] | None = None  # this iteration's, while traced
        self._traffic_due = False  # the traced iteration is the one the figure shows
        self._fallback_snapshot: dict = {}  # the last traced iteration before that moment
        hgpu = gpu(scenario.holder_gpu)
        self.holders = [f"h{i}" for i in range(len(scenario.holder_regions))]
        for hid, region in zip(self.holders, scenario.holder_regions):
            compute = model.holder_compute_s(hgpu, scenario.mfu)
            self.nodes[hid] = Node(hid, -1, region, hgpu.name, compute, 0.5)
            self.nodes[hid].ready_s = 0.0
        self.rejected = 0
        for machine in self.churn.initial():
            self._place(machine, initial=True)
        self.demand = dict.fromkeys(self.holders, ALL)  # what each holder asks the routing for
        self._iter_start = 0.0
        share, extra = divmod(scenario.global_batch, len(self.holders))
        self.batch_share = {h: share + (1 if i < extra else 0) for i, h in enumerate(self.holders)}

    # ------------------------------------------------------------- views for routers
    def link(self, a_region: str, b_region: str) -> Link:
        key = (a_region, b_region)
        found = self._links.get(key)
        if found is None:
            found = self._links[key] = geo_matrix().link(a_region, b_region)
        return found

    def instance(self) -> Instance | None:
        """The swarm as the routing sees it now: serving peers whose records have not expired (a
        crashed peer stays until its record expires); None while a stage is empty."""
        if self._instance is None:
            peers = [self.spec(p) for s in range(self.stages) for p in self.live[s] + self.gone[s]]
            holders = [
                HolderSpec(h, self.demand[h], self.nodes[h].compute_s, self.nodes[h].region)
                for h in self.holders
            ]
            try:
                self._instance = Instance(
                    self.stages,
                    self.act_bytes,
                    tuple(holders),
                    tuple(peers),
                    link_capacity=self.sc.link_capacity,
                )
            except InstanceError:
                return None
        return self._instance

    def spec(self, peer: str) -> PeerSpec:
        """The peer as the flow sees it: what a live peer publishes (swarm/runner.py), its measured
        throughput in microbatches/s (forward + backward) as capacity and 1/throughput as compute
        time; holders ask for what the scenario's `holder_demand` policy says (swarm/routing/demand.py).
        The flow's rates become dispatch shares."""
        n = self.nodes[peer]
        return PeerSpec(n.id, n.stage, 1.0 / n.compute_s, n.compute_s, n.region)

    def stage_capacity(self) -> list[float]:
        """Microbatches/s per stage as the DHT shows it (a crashed peer counts until it expires)."""
        return [
            sum(1.0 / self.nodes[p].compute_s for p in self.live[s] + self.gone[s])
            for s in range(self.stages)
        ]

    # ------------------------------------------------------------------ population
    def _place(self, m: Machine, initial: bool) -> None:
        ok = eligible_stages(self.sc.model, self.layers, m.gpu)
        if m.stage is not None:
            ok = [m.stage] if m.stage in ok else []
        if not ok:
            self.rejected += 1
            return
        if m.stage is not None:
            stage = m.stage
        elif initial:
            stage = least_capacity_stage(self.stage_capacity(), ok)
        else:
            stage = self.router.join_stage(ok, self.q.now)
        g = gpu(m.gpu)
        node = Node(
            m.id,
            stage,
            m.region,
            m.gpu,
            self.sc.model.compute_s(self.layers[stage], g, self.sc.mfu),
            FORWARD_SHARE,
        )
        self.nodes[m.id] = node
        if m.dies_s < math.inf:
            self.q.push(m.dies_s, CRASH, m.id)
        if initial:
            node.ready_s = 0.0
            self.live[stage].append(m.id)
            return
        sources = [self.nodes[p] for p in self.live[stage]] or [self.nodes[h] for h in self.holders]
        param_bytes = self.param_bytes[stage]
        links = [self.link(s.region, m.region) for s in sources]
        download = min(lk.latency_s + param_bytes / lk.bandwidth_bytes_s for lk in links)
        self.q.push(self.q.now + download, READY, m.id)

    # ------------------------------------------------------------------- transport
    def _transfer(self, a: Node, b: Node, now: float) -> float:
        """Arrival time of one microbatch's activations sent a -> b at `now`."""
        link = self.link(a.region, b.region)
        key = (a.id, b.id)
        start = self.link_free.get(key, 0.0)
        if start < now:
            start = now
        end = start + self.act_bytes / link.bandwidth_bytes_s
        self.link_free[key] = end
        if self._traffic is not None:
            self._traffic[key] = self._traffic.get(key, 0) + 1
        return end + link.latency_s

    def _timeout(self, sender: str) -> float:
        return adaptive_timeout(self.nodes[sender].samples)

    def _send_forward(self, mb: Microbatch, sender: str, k: int, now: float) -> None:
        src = self.nodes[sender]
        mb.sender = sender
        if k == self.stages:
            self.q.push(self._transfer(src, self.nodes[mb.holder], now), HOME_ARRIVE, mb.id, mb.gen)
            return
        candidates = self._candidates(sender, k)
        if stage_must_wait(candidates):
            self.waiting[k].append(mb.id)
            self.res.stalls += 1
            return
        target = self.router.next_hop(mb.holder, sender, k, candidates, now)
        mb.path.append(target)
        dst = self.nodes[target]
        mb.sent_at, mb.task, mb.pos = now, None, k
        self.router.on_sent(sender, target, now)
        if not dst.alive:  # crashed, not yet known to the sender: no answer until its timeout
            self.q.push(now + self._timeout(sender), RECOVER, mb.id, mb.gen)
            return
        dst.resident.add(mb.id)
        self.q.push(self._transfer(src, dst, now), FWD_ARRIVE, mb.id, mb.gen)

    def _send_backward(self, mb: Microbatch, sender: str, k: int, now: float) -> None:
        mb.sender = sender
        dst = self.nodes[mb.path[k]]
        if not dst.alive:
            self.q.push(now + self._timeout(sender), RECOVER, mb.id, mb.gen)
            return
        dst.resident.add(mb.id)
        mb.sent_at, mb.task, mb.pos = now, None, k
        self.q.push(self._transfer(self.nodes[sender], dst, now), BWD_ARRIVE, mb.id, mb.gen)

    def _hop_done(self, mb: Microbatch, node: Node, now: float, forward: bool) -> None:
        """A hop answered: the sender measures it (timeouts); a forward answer also closes the
        request the router opened in `on_sent` (backward hops follow the path, no choice)."""
        node.resident.discard(mb.id)
        mb.task = None
        seconds = now - mb.sent_at
        self.nodes[mb.sender].samples.append(seconds)
        if forward:
            self.router.on_done(mb.sender, node.id, seconds, now)

    # ----------------------------------------------------------------- iterations
    def _start_iteration(self, now: float) -> None:
        # (every iteration until the chosen one is traced: if the run stops before that one ends,
        # the figure shows the one running at the end, else the last one before it)
        self._traffic = None if self.res.flow_snapshot else {}
        self._traffic_due = self._snapshot_due(now)
        self.iter_done = 0
        self._iter_start = now
        for holder in self.holders:
            for _ in range(self.batch_share[holder]):
                mb = Microbatch(self.next_mb, holder, self.stages)
                self.mbs[mb.id] = mb
                self.next_mb += 1
                self.res.injected += 1
                self._send_forward(mb, holder, 0, now)

    def _snapshot_due(self, now: float) -> bool:
        """Whether the iteration starting now is the one the flow-graph figure shows."""
        if self.sc.flow_graph_at_s is not None:
            return now >= self.sc.flow_graph_at_s
        return self.res.iterations >= self.snapshot_iter or now >= self.snapshot_half_time

    def _take_snapshot(self, now: float, final: bool) -> None:
        """Keep the traced iteration's traffic: as the figure's (`final`) or as a fallback."""
        if self._traffic is not None:
            snapshot = {
                "t": now,
                "edges": {f"{a}>{b}": c for (a, b), c in sorted(self._traffic.items())},
                "nodes": {n.id: [n.stage, n.region] for n in self.nodes.values() if n.alive},
            }
            if final:
                self.res.flow_snapshot = snapshot
            else:
                self._fallback_snapshot = snapshot
            self._traffic = None

    def _end_iteration(self, now: float) -> None:
        self._take_snapshot(now, final=self._traffic_due)
        last = now
        for s in range(self.stages):
            replicas = [self.nodes[p] for p in self.live[s]]
            steps = step_times(self.sc.averaging, replicas, self.param_bytes[s], self.link, now)
            for node in replicas:
                node.hold_s = steps[node.id]
            self.stage_ready[s] = ready = max(steps.values(), default=now)
            last = max(last, ready)
        self.res.averaging_s += last - now
        self.res.iterations += 1
        self._update_demand(now)
        self.mbs.clear()
        for node in self.nodes.values():
            node.carried.clear()
        # the next iteration starts at once (it queues at stages still averaging); after the last
        # one, training ends when every stage has taken its step
        self.q.push(now if self.res.iterations < self.sc.iterations else last, ITER_START)

    def _update_demand(self, now: float) -> None:
        """Holders re-state their demand from the iteration just done, as live holders do."""
        changed, seconds = False, now - self._iter_start
        for h in self.holders:
            new = next_demand(self.sc.holder_demand, self.demand[h], self.batch_share[h], seconds)
            if new is not None:
                self.demand[h], changed = new, True
        if changed:
            self._instance = None
            self.router.on_demand(dict(self.demand), now)

    def _complete(self, mb: Microbatch, now: float) -> None:
        self.res.completed += 1
        self.res.completion_times.append(now)
        self.iter_done += 1
        if self.iter_done == self.sc.global_batch:
            self._end_iteration(now)

    # ------------------------------------------------------------------------ run
    def run(self) -> SimResult:
        """Simulate until the scenario's iterations are done (or `max_time_s` passes)."""
        q, nodes, mbs, res = self.q, self.nodes, self.mbs, self.res
        self.router.start(self)
        q.push(self.churn.next_join_s(), JOIN)
        if self.sc.max_time_s is not None:
            q.push(self.sc.max_time_s, END)
        self._start_iteration(0.0)
        report = self.progress
        while len(q):
            now, kind, payload = q.pop()
            if report is not None and q.popped % PROGRESS_EVERY == 0:
                report("training", now, res, self.router.messages())
            if kind <= RECOVER:
                mb = mbs.get(payload[0])
                if mb is None or mb.gen != payload[1]:
                    continue  # taken off a dead peer meanwhile
                if kind == FWD_ARRIVE or kind == BWD_ARRIVE:
                    node = nodes[mb.path[mb.pos]]
                    start, end = node.run(now, node.fwd_s if kind == FWD_ARRIVE else node.bwd_s)
                    mb.task = (node.id, start, end)
                    q.push(end, FWD_DONE if kind == FWD_ARRIVE else BWD_DONE, mb.id, mb.gen)
                elif kind == FWD_DONE:
                    k = len(mb.path) - 1
                    node = nodes[mb.path[k]]
                    self._hop_done(mb, node, now, True)
                    node.stash.add(mb.id)
                    mb.compute[k] += node.fwd_s
                    self._send_forward(mb, node.id, k + 1, now)
                elif kind == BWD_DONE:
                    k = mb.pos
                    node = nodes[mb.path[k]]
                    self._hop_done(mb, node, now, False)
                    node.last_bwd = now
                    node.stash.discard(mb.id)
                    node.carried.add(mb.id)
                    mb.compute[k] += node.bwd_s
                    mb.sender = node.id
                    if k > 0:
                        self._send_backward(mb, node.id, k - 1, now)
                    else:
                        q.push(self._transfer(node, nodes[mb.holder], now), GRAD_HOME, mb.id, mb.gen)
                elif kind == HOME_ARRIVE:
                    start, end = nodes[mb.holder].run(now, nodes[mb.holder].compute_s)
                    q.push(end, HOME_DONE, mb.id, mb.gen)
                elif kind == HOME_DONE:
                    mb.holder_compute = nodes[mb.holder].compute_s
                    mb.backward = True
                    mb.task = None
                    self._send_backward(mb, mb.holder, self.stages - 1, now)
                elif kind == GRAD_HOME:
                    self._complete(mb, now)
                else:  # RECOVER
                    self._restart(mb, now)
            elif kind == CRASH:
                self._crash(payload[0], now)
            elif kind == JOIN:
                self._join(now)
            elif kind == READY:
                self._ready(payload[0], now)
            elif kind == EXPIRE:
                self._expire(payload[0], now)
            elif kind == ITER_START:
                if res.iterations >= self.sc.iterations:
                    break
                self._start_iteration(now)
            else:  # END
                break
        result = self._finish(q.now)
        if report is not None:
            report("done", q.now, result, result.protocol_messages)
        return result

    def _finish(self, end: float) -> SimResult:
        """Turn the accumulated counters into the reported metrics."""
        res = self.res
        self._take_snapshot(end, final=True)  # (the run stopped in the middle of a traced iteration)
        if not res.flow_snapshot:
            res.flow_snapshot = self._fallback_snapshot
        res.training_time_s = end
        res.throughput_microbatches_s = res.completed / end if end > 0 else 0.0
        available = busy = 0.0
        for node in self.nodes.values():
            if node.stage < 0 or node.ready_s is None:
                continue
            until = min(node.died_s if node.died_s is not None else end, end)
            available += max(until - node.ready_s, 0.0)
            busy += node.busy_s - (max(node.free_at - end, 0.0) if node.alive else 0.0)
        res.gpu_idle_fraction = 1.0 - busy / available if available > 0 else 0.0
        res.wasted_compute_fraction = self.wasted_s / busy if busy > 0 else 0.0
        res.in_flight_at_end = res.injected - res.completed
        res.protocol_messages = self.router.messages()
        res.events = self.q.popped
        return res
