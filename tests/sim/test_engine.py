"""The simulator's accounting, independent of the routers: exact timing, conservation, determinism."""

from __future__ import annotations

import pytest
from conftest import small
from helpers import LeastLoaded

from swarm.flow.instance import geo_matrix
from swarm.sim.allreduce import step_times
from swarm.sim.hardware import FORWARD_SHARE, PRESETS, gpu
from swarm.sim.simulator import Simulation


def test_single_pipeline_iteration_time_is_exact() -> None:
    """holder -> p0 -> p1 -> holder and back: 6 transfers, every compute once, no averaging."""
    peers = [{"gpu": "A100-80GB", "region": "Iowa", "stage": 0}, {"gpu": "T4", "region": "Iowa", "stage": 1}]
    sc = small(
        stages=2,
        peers=peers,
        holders={"regions": ["Iowa"], "gpu": "L4"},
        training={"iterations": 3, "global_batch": 1},
    )
    res = Simulation(sc, LeastLoaded()).run()
    model = PRESETS["gpt-500m"]
    same = geo_matrix().same_region
    hop = model.activation_bytes / same.bandwidth_bytes_s + same.latency_s
    c0 = 12 * model.layer_flops / (312e12 * 0.4)  # 24 layers / 2 stages on an A100 at MFU 0.4
    c1 = 12 * model.layer_flops / (65e12 * 0.4)  # ... on a T4
    head = 6 * model.vocab * model.hidden * model.tokens / (121e12 * 0.4)
    per_iteration = 6 * hop + c0 + c1 + head
    assert res.iterations == 3 and res.completed == 3
    assert res.training_time_s == pytest.approx(3 * per_iteration, rel=1e-12)
    assert res.gpu_idle_fraction == pytest.approx(1 - 3 * (c0 + c1) / (2 * 3 * per_iteration), rel=1e-9)


def test_two_microbatches_queue_behind_each_other() -> None:
    """Two microbatches on one pipeline: the link serialises them, the GPU runs them FIFO."""
    peers = [{"gpu": "A100-80GB", "region": "Iowa", "stage": 0}]
    sc = small(
        model={"layers": 2, "hidden": 64, "vocab": 100, "seq_len": 8, "microbatch": 1},
        stages=1,
        peers=peers,
        holders={"regions": ["Iowa"]},
        training={"iterations": 1, "global_batch": 2},
    )
    res = Simulation(sc, LeastLoaded()).run()
    same = geo_matrix().same_region
    tx = sc.model.activation_bytes / same.bandwidth_bytes_s
    c = sc.model.compute_s(2, gpu("A100-80GB"), 0.4)
    f, b = c * FORWARD_SHARE, c - c * FORWARD_SHARE
    h = sc.model.holder_compute_s(gpu("A100-80GB"), 0.4)
    lat = same.latency_s
    # mb0: sent at 0, mb1 queued on the link behind it
    a0, a1 = tx + lat, 2 * tx + lat
    f0 = a0 + f
    f1 = max(a1, f0) + f
    home0 = f0 + tx + lat
    home1 = max(f1, f0 + tx) + tx + lat
    h0 = home0 + h
    h1 = max(home1, h0) + h
    back0 = h0 + tx + lat  # gradient of mb0 arrives at the peer
    back1 = max(h1, h0 + tx) + tx + lat
    # the peer's FIFO: f0, f1, then the backward passes in arrival order
    b0 = max(back0, f1) + b
    b1 = max(back1, b0) + b
    done0 = b0 + tx + lat
    done1 = max(b1, b0 + tx) + tx + lat
    assert res.training_time_s == pytest.approx(max(done0, done1), rel=1e-12)


def test_averaging_overlaps_up_to_each_replica_step() -> None:
    """One stage, replicas in Iowa and Germany, one microbatch per iteration, carried by the Iowa
    replica: Iowa needs nobody's gradient and goes on at once; Germany steps when Iowa's gradient
    has crossed the Atlantic, and training ends with that last step."""
    peers = [
        {"gpu": "A100-80GB", "region": "Iowa", "stage": 0},
        {"gpu": "T4", "region": "Germany", "stage": 0},
    ]
    sc = small(
        model={"layers": 2, "hidden": 64, "vocab": 100, "seq_len": 8, "microbatch": 1},
        stages=1,
        peers=peers,
        holders={"regions": ["Iowa"]},
        training={"iterations": 2, "global_batch": 1},
    )
    res = Simulation(sc, LeastLoaded()).run()
    same, cross = geo_matrix().same_region, geo_matrix().link("Iowa", "Germany")
    hop = sc.model.activation_bytes / same.bandwidth_bytes_s + same.latency_s
    c = sc.model.compute_s(2, gpu("A100-80GB"), 0.4)
    head = sc.model.holder_compute_s(gpu("A100-80GB"), 0.4)
    send = cross.latency_s + sc.model.stage_param_bytes(2) / cross.bandwidth_bytes_s
    first_backward_done = 3 * hop + c + head
    second_backward_done = first_backward_done + 4 * hop + c + head
    assert send > hop
    assert res.training_time_s == pytest.approx(second_backward_done + send, rel=1e-12)
    assert res.averaging_s == pytest.approx(2 * (send - hop))


class Rep:
    def __init__(self, id: str, region: str, last_bwd: float, carried: bool = True) -> None:
        self.id, self.region, self.last_bwd = id, region, last_bwd
        self.carried = {1} if carried else set()


def test_each_replica_steps_when_the_last_gradient_reaches_it() -> None:
    link = geo_matrix().link
    reps = [
        Rep("a", "Iowa", 10.0),
        Rep("b", "Iowa", 12.0),
        Rep("c", "Japan", 5.0),
        Rep("d", "Japan", 0.0, False),
    ]

    def t(src: str, dst: str) -> float:
        return link(src, dst).latency_s + 1e8 / link(src, dst).bandwidth_bytes_s

    steps = step_times("direct", reps, 1e8, link, now=13.0)
    assert steps["a"] == pytest.approx(max(12.0 + t("Iowa", "Iowa"), 5.0 + t("Japan", "Iowa")))
    assert steps["b"] == pytest.approx(max(12.0, 10.0 + t("Iowa", "Iowa"), 5.0 + t("Japan", "Iowa")))
    assert steps["c"] == pytest.approx(12.0 + t("Iowa", "Japan"))
    assert steps["d"] == pytest.approx(max(13.0, 12.0 + t("Iowa", "Japan"), 5.0 + t("Japan", "Japan")))
    assert step_times("direct", reps[:1], 1e8, link, now=13.0) == {"a": 10.0}


def test_conservation_under_heavy_churn(churny) -> None:
    res = Simulation(churny, LeastLoaded()).run()
    assert res.crashes > 0 and res.joins > 0
    assert res.injected == res.completed == churny.iterations * churny.global_batch
    assert res.in_flight_at_end == 0
    assert res.reexecuted + res.rerouted > 0
    assert 0 < res.wasted_compute_fraction < 1
    assert 0 <= res.gpu_idle_fraction <= 1


def test_time_limited_run_counts_what_is_in_flight() -> None:
    sc = small(training={"iterations": 1000, "global_batch": 24, "max_time_s": 30.0})
    res = Simulation(sc, LeastLoaded()).run()
    assert res.training_time_s == 30.0
    assert res.injected == res.completed + res.in_flight_at_end
    assert res.iterations < 1000


def test_same_seed_same_run_other_seed_other_run(churny) -> None:
    a = Simulation(churny, LeastLoaded()).run()
    b = Simulation(churny, LeastLoaded()).run()
    assert a.summary() == b.summary() and a.completion_times == b.completion_times
    c = Simulation(churny.with_(seed=churny.seed + 1), LeastLoaded()).run()
    assert c.completion_times != a.completion_times


def test_the_flow_graph_shows_the_chosen_moment() -> None:
    """By default the middle iteration, or for a time-limited run the first iteration that starts
    after half its time (here its first iteration outlasts the run: the figure shows it as it was
    at the end); `flow_graph_at_s` picks the first iteration starting at or after it. The figure's
    moment changes nothing else."""
    counted = small(training={"iterations": 6, "global_batch": 24})
    middle = Simulation(counted, LeastLoaded()).run()
    assert middle.flow_snapshot["edges"] and middle.flow_snapshot["t"] > 0
    timed = small(training={"iterations": 10**9, "global_batch": 24, "max_time_s": 30.0})
    res = Simulation(timed, LeastLoaded()).run()
    assert res.flow_snapshot["edges"] and 15.0 <= res.flow_snapshot["t"] <= 30.0
    chosen = Simulation(counted.with_(flow_graph_at_s=0.0), LeastLoaded()).run()
    later = Simulation(counted.with_(flow_graph_at_s=middle.flow_snapshot["t"]), LeastLoaded()).run()
    assert chosen.flow_snapshot["t"] < middle.flow_snapshot["t"] < later.flow_snapshot["t"]
    assert chosen.summary() == middle.summary() == later.summary()
