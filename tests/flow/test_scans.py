"""The fast scans pick what full scans pick: exchange asks (against every pair of hops) and the
kept forward-label minima (against a rescan of every next hop, on live protocol runs)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.flow.bus import MessageBus
from swarm.flow.churn import churn
from swarm.flow.generate import random_instance
from swarm.flow.news import EPS
from swarm.flow.peer import PeerAgent
from swarm.flow.swap_asks import GAIN_S, _best_trade, _gain

# coarse costs so that ties (equal gains from different hops) are common
COST = st.sampled_from([0.1, 0.2, 0.25, 0.3, 0.5, 0.7, 1.0])


def brute_force(here: float, here_worst: float, used: list, h: str, d: str, tried: set) -> tuple | None:
    """The least (gain, b) over every pair, as the scan before `_best_trade` found it."""
    options = []
    for b, there, there_worst in used:
        gain = here - there
        other = here_worst - there_worst + GAIN_S
        if other < gain:
            gain = other
        if gain < -EPS and b != d and (h, b, d) not in tried:
            options.append((gain, b))
    return min(options) if options else None


@settings(max_examples=400, deadline=None)
@given(
    hops=st.lists(st.tuples(COST, COST), min_size=1, max_size=12),
    here=COST,
    onwards=COST,
    tried_mask=st.lists(st.booleans(), min_size=12, max_size=12),
    d_is_used=st.booleans(),
)
def test_best_trade_matches_every_pair(hops, here, onwards, tried_mask, d_is_used) -> None:
    used = [(f"p{i}", there, there + rest) for i, (there, rest) in enumerate(hops)]
    d = "p0" if d_is_used else "q"
    tried = {("h", b, d) for (b, _, _), skip in zip(used, tried_mask, strict=False) if skip}
    far_first = sorted(used, key=lambda u: -u[1])
    dear_first = sorted(used, key=lambda u: -u[2])
    here_worst = here + onwards
    got = _best_trade(here, here_worst, far_first, dear_first, "h", d, tried)
    assert got == brute_force(here, here_worst, used, "h", d, tried)
    if got is not None:
        there, there_worst = next((t, w) for b, t, w in used if b == got[1])
        assert got[0] == _gain(here, here_worst, there, there_worst)


def _minima_match_a_rescan(bus: MessageBus) -> None:
    """Every peer's kept forward-label minima (and the count of next hops at each) are what a
    rescan of its next hops finds."""
    for agent in bus.agents.values():
        if not isinstance(agent, PeerAgent) or agent.last or not agent._fwd_cache:
            continue
        kept, counts = dict(agent._fwd_cache), dict(agent._fwd_count)
        agent._fwd_cache.clear()
        fresh = dict(agent._forward_labels())
        assert fresh == kept, agent.id
        top = agent.max_label
        assert {h: c for h, c in counts.items() if kept[h] < top} == {
            h: c for h, c in agent._fwd_count.items() if fresh[h] < top
        }, agent.id


# instances where the last next hop at a minimum rises from it (a rescan) as well as others (counts)
@pytest.mark.parametrize(("peers", "stages", "holders", "seed"), [(60, 4, 1, 3), (90, 5, 2, 1)])
def test_kept_label_minima_match_a_rescan_under_churn(
    peers: int, stages: int, holders: int, seed: int
) -> None:
    inst = random_instance(peers, stages, holders, seed)
    bus = MessageBus(inst, seed=seed, loss=0.05)
    bus.run_until_quiescent(watch=lambda: _minima_match_a_rescan(bus), every=0.02)
    churn(bus, 0.2, seed)
    bus.run_until_quiescent(watch=lambda: _minima_match_a_rescan(bus), every=0.02)
