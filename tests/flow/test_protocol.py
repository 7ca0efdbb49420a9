"""The decentralized protocol: exact maximum flow, invariants at quiescence, loss, reordering, churn."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from swarm.flow import cost
from swarm.flow.bottleneck import bottleneck_stage
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.churn import churn
from swarm.flow.generate import random_instance
from swarm.flow.instance import PeerSpec
from swarm.flow.reference import max_flow_value

SETTINGS = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def converge(bus: MessageBus) -> None:
    stats = bus.run_until_quiescent()
    assert stats.quiescent
    assert violations(bus) == []


@SETTINGS
@given(
    stages=st.integers(1, 5),
    per_stage=st.integers(1, 4),
    holders=st.integers(1, 3),
    seed=st.integers(0, 10_000),
    improve=st.booleans(),
)
def test_max_flow_and_invariants(stages: int, per_stage: int, holders: int, seed: int, improve: bool) -> None:
    inst = random_instance(stages * per_stage, stages, holders, seed)
    bus = MessageBus(inst, seed=seed, improve=improve)
    converge(bus)
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)


@SETTINGS
@given(
    stages=st.integers(1, 4),
    per_stage=st.integers(1, 4),
    holders=st.integers(1, 2),
    seed=st.integers(0, 10_000),
    loss=st.sampled_from([0.05, 0.2, 0.4]),
)
def test_loss_and_reordering(stages: int, per_stage: int, holders: int, seed: int, loss: float) -> None:
    """Wide delay spread reorders messages; loss is repaired by retransmission."""
    inst = random_instance(stages * per_stage, stages, holders, seed)
    bus = MessageBus(inst, seed=seed, delay=(0.001, 0.2), loss=loss)
    converge(bus)
    # the loss must have been exercised wherever it all but surely happened (p(no drop) < 1e-8)
    assert bus.stats.dropped > 0 or bus.stats.messages * loss < 20
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)


@SETTINGS
@given(seed=st.integers(0, 10_000), fraction=st.sampled_from([0.1, 0.2, 0.4]))
def test_churn_reconverges_to_new_maximum(seed: int, fraction: float) -> None:
    inst = random_instance(12, 3, 2, seed)
    bus = MessageBus(inst, seed=seed)
    converge(bus)
    removed, added = churn(bus, fraction, seed)
    assert len(removed) == len(added)
    converge(bus)
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(bus.instance), abs=1e-6)


def test_churn_mid_run_and_changes() -> None:
    """Events while messages are still in flight: leave, join, capacity and demand changes."""
    inst = random_instance(16, 4, 2, seed=3)
    bus = MessageBus(inst, seed=3, loss=0.1)
    bus.run_until(0.1)
    bus.remove_peer(inst.peers_of(1)[0].id)
    bus.add_peer(PeerSpec("late", 1, 4.0, 0.1, "Iowa"))
    bus.run_until(0.3)
    bus.set_capacity(inst.peers_of(2)[0].id, 0.5)
    bus.set_demand("h0", 0.7)
    bus.set_compute(inst.peers_of(0)[0].id, 0.01)
    converge(bus)
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(bus.instance), abs=1e-6)


def test_hand_checked_diamond(diamond) -> None:
    bus = MessageBus(diamond, seed=1)
    converge(bus)
    routes = bus.routes()
    assert cost.flow_value(routes) == pytest.approx(4.0)
    assert sum(routes["h"]["c"].values()) == pytest.approx(4.0)  # everything comes home through c
    assert bottleneck_stage(diamond, routes) == 1
    assert sum(routes["h"]["h"].values()) == pytest.approx(4.0)
    # the optimum: a (cheaper) is filled, the rest goes through b (preemption at the full peer c)
    assert routes["h"]["h"] == {"a": pytest.approx(2.0), "b": pytest.approx(2.0)}


def test_demand_limited_single_stage() -> None:
    from tests.flow.conftest import explicit

    inst = explicit(1, [("fast", 0, 5.0, 0.1), ("slow", 0, 5.0, 0.9)], [("h", 3.0)])
    bus = MessageBus(inst, seed=0)
    converge(bus)
    routes = bus.routes()
    assert routes == {"h": {"h": {"fast": pytest.approx(3.0)}, "fast": {"h": pytest.approx(3.0)}}}
    assert cost.max_path_cost(inst, routes) == pytest.approx(inst.edge_cost("h", "fast") * 2)


def test_microbatches_return_to_their_own_holder() -> None:
    inst = random_instance(9, 3, 3, seed=5)
    bus = MessageBus(inst, seed=5)
    converge(bus)
    for h, per_node in bus.routes().items():
        for nexts in per_node.values():
            assert all(v == h for v in nexts if v in inst.holder_ids())
        sent = sum(per_node.get(h, {}).values())
        back = sum(r for node, nexts in per_node.items() for v, r in nexts.items() if v == h)
        assert back == pytest.approx(sent, abs=1e-6)


def test_messages_per_peer_grow_slower_than_the_swarm() -> None:
    """Same stage width (so the same neighbours), 4x the stages: messages per peer grow less than
    the swarm does. Deeper swarms take more label rounds (push-relabel's labels rise with the
    depth), so they do grow: 3.5x over these three seeds (single seeds range 1.2-6.1x)."""
    small_total = large_total = 0.0
    for seed in range(3):
        small = MessageBus(random_instance(24, 3, 1, seed=seed), seed=seed)
        large = MessageBus(random_instance(96, 12, 1, seed=seed), seed=seed)
        a, b = small.run_until_quiescent(), large.run_until_quiescent()
        small_total += a.messages / len(small.agents)
        large_total += b.messages / len(large.agents)
    assert large_total < 4 * small_total, (large_total, small_total)


def test_max_path_within_5_percent_of_min_cost_on_most_small_instances() -> None:
    """40 small instances (3 stages x 4 peers): the most expensive used path is within 5% of the
    min-cost flow's on most of them and never far off. Not on all: where the last stage is the
    bottleneck and full, removing a dear fragment takes a chain of moves over several peers that
    local moves, exchanges and hand-overs do not find (35 of these 40 are within 5%, the worst is
    1.33; on larger instances `swarm bench flow-sweep` reports it)."""
    from swarm.flow.reference import min_cost_max_flow

    ratios = []
    for seed in range(40):
        inst = random_instance(12, 3, 1, seed)
        bus = MessageBus(inst, seed=seed)
        converge(bus)
        best = cost.max_path_cost(inst, min_cost_max_flow(inst))
        ratios.append(cost.max_path_cost(inst, bus.routes()) / best)
    assert sum(r <= 1.05 + 1e-9 for r in ratios) >= 31, sorted(ratios)
    assert max(ratios) < 1.5, sorted(ratios)


def test_known_loss_case_reaches_max_flow() -> None:
    """Found by hypothesis in CI: 2 holders, 1 stage of 2 peers, 5% message loss.

    A reply told holder h1 that s0p1 was full; the peer's later "spare again" announcement was
    suppressed because it had announced spare before. Announcements now track what each neighbour
    last heard, replies included.
    """
    inst = random_instance(2, 1, 2, 1311)
    bus = MessageBus(inst, seed=1311, delay=(0.001, 0.2), loss=0.05)
    converge(bus)
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)


def test_news_good_is_reliable_bad_is_best_effort() -> None:
    """Spare again, a lower label or a reachable holder must arrive; the rest may be lost."""
    from swarm.flow.messages import State
    from swarm.flow.news import BAD, COSTS, GOOD, NONE, news_for, summary_of

    def summary(spare: float, label: int, cheapest: float):
        return summary_of(State("v", 1, spare, {"h": label}, {"h": cheapest}, {}))

    full = summary(0.0, 3, 1.0)
    assert news_for(None, full, upstream=True) == GOOD
    assert news_for(full, summary(1.0, 3, 1.0), upstream=True) == GOOD  # spare again
    assert news_for(full, summary(0.0, 2, 1.0), upstream=True) == GOOD  # lower label
    assert news_for(summary(1.0, 3, 1.0), full, upstream=True) == BAD  # became full
    assert news_for(full, summary(0.0, 4, 1.0), upstream=False) == BAD  # higher label, downstream
    assert news_for(full, summary(0.0, 3, 2.0), upstream=True) == COSTS  # dearer, to a sender
    assert news_for(full, summary(0.0, 3, 2.0), upstream=True, sender=False) == NONE
    assert news_for(full, summary(0.0, 3, 0.5), upstream=True, sender=False) == COSTS  # cheaper: all
    assert news_for(full, summary(0.0, 3, 2.0), upstream=False) == NONE  # costs never go downstream
