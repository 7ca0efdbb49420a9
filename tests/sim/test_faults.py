"""Who knows of a crash when: a crashed peer stays a candidate until the sender times out on it or
its DHT record expires; the router hears of it on expiry."""

from __future__ import annotations

from conftest import small
from helpers import LeastLoaded

from swarm.sim.faults import RECORD_REFRESH_S, RECORD_TTL_S, record_outlives_s
from swarm.sim.simulator import CRASH, Simulation


class Recording(LeastLoaded):
    def __init__(self) -> None:
        self.crashes: list[tuple[str, float]] = []
        self.timeouts: list[tuple[str, str]] = []

    def on_crash(self, peer, now):
        self.crashes.append((peer, now))

    def on_timeout(self, node, peer, now):
        self.timeouts.append((node, peer))


def two_replicas():
    peers = [
        {"gpu": "A100-80GB", "region": "Iowa", "stage": 0},
        {"gpu": "A100-80GB", "region": "Iowa", "stage": 0},
    ]
    return small(
        stages=1,
        peers=peers,
        holders={"regions": ["Iowa", "Iowa"]},
        training={"iterations": 3, "global_batch": 4},
    )


def test_a_crash_is_known_per_sender_until_the_record_expires() -> None:
    router = Recording()
    sim = Simulation(two_replicas(), router)
    router.start(sim)
    sim._crash("p0000", 1.0)
    assert "p0000" in sim._candidates("h0", 0) and "p0000" in sim._candidates("h1", 0)
    sim._timed_out("h0", "p0000", 3.0)
    assert sim._candidates("h0", 0) == ["p0001"] and "p0000" in sim._candidates("h1", 0)
    assert router.timeouts == [("h0", "p0000")] and router.crashes == []
    sim._expire("p0000", 1.0 + record_outlives_s("p0000"))
    assert sim._candidates("h1", 0) == ["p0001"]
    assert router.crashes == [("p0000", 1.0 + record_outlives_s("p0000"))]
    assert [p.id for p in sim.instance().peers] == ["p0001"]


def test_records_outlive_their_peer_by_ttl_minus_the_refresh_phase() -> None:
    spans = [record_outlives_s(f"p{i:04d}") for i in range(200)]
    assert all(RECORD_TTL_S - RECORD_REFRESH_S < s <= RECORD_TTL_S for s in spans)
    assert len(set(spans)) > 100


def test_sending_to_an_unnoticed_crash_costs_a_timeout_then_reroutes() -> None:
    router = Recording()
    sim = Simulation(two_replicas(), router)
    sim.q.push(1e-9, CRASH, "p0000")  # before the first activations arrive
    res = sim.run()
    assert res.injected == res.completed == 12 and res.in_flight_at_end == 0
    assert res.rerouted >= 1 and res.reexecuted == 0
    assert {n for n, _ in router.timeouts} <= {"h0", "h1"} and router.timeouts
    expiry = 1e-9 + record_outlives_s("p0000")
    assert router.crashes == ([("p0000", expiry)] if res.training_time_s > expiry else [])
