"""Worst-path walks (swarm/flow/walks.py): the holder's walk runs down its most expensive used path,
the peers on it ask for trades that make that path cheaper even where the edges cost more than the
exchange price allows, and the messages cross the codec."""

from __future__ import annotations

import pytest

from swarm.flow import cost
from swarm.flow import walks as walks_module
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.churn import churn
from swarm.flow.generate import random_instance
from swarm.flow.messages import Announce, Envelope, Offer, Walk
from swarm.flow.news import COST_GRAIN_S, COST_REL
from swarm.flow.path_news import PATHS_REL
from swarm.flow.reference import max_flow_value
from swarm.flow.refresh_waves import REFRESHES, WAVE_WALKS
from swarm.flow.trade_rules import CRITICAL_PRICE
from swarm.flow.walks import LATE_WALKS, UNPAID_RUN, WALK_ASKS, WALK_REFUNDS, WALKS
from swarm.routing.codec import from_wire, to_wire
from swarm.wire import WireError
from tests.flow.test_exchange import recorded, worst_path_trade


def test_a_walk_makes_the_worst_path_trade_the_price_refused() -> None:
    """a->b carries the worst path; the trade a->d, c->b lowers it by ~0.12 s but makes the four
    edges 0.12 s dearer, more than half the fall: refused as an ordinary exchange, made when the
    holder's walk tells a that a->b is on the worst path."""
    bus, p, worst_before, total_before = worst_path_trade(0.06)
    assert p["a"].routes()["h"] == {"b": pytest.approx(1.0)}  # (the price refused it)
    holder = bus.agents["h"]
    holder.init_walks()
    holder.arm_walk()
    with recorded(bus) as sent:
        bus.run_until_quiescent()
    walks = [e for e in sent if isinstance(e.body, Walk)]
    assert walks and walks[0].src == "h" and walks[0].dst == "a"
    assert any(e.src == "a" and e.dst == "d" and isinstance(e.body, Offer) and e.body.critical for e in sent)
    assert p["a"].routes()["h"] == {"d": pytest.approx(1.0)}
    assert p["c"].routes()["h"] == {"b": pytest.approx(1.0)}
    inst = bus.instance
    assert cost.max_path_cost(inst, bus.routes()) < worst_before - 0.05
    assert cost.total_cost(inst, bus.routes()) == pytest.approx(total_before + 0.12, abs=1e-3)
    assert violations(bus) == []
    # the walk that paid is given back once (its successor's worst route is cheaper), then LATE_WALKS
    # late ones go; having paid, the walks bring one refresh wave and WAVE_WALKS more, which pay nothing
    waves = [e for e in sent if isinstance(e.body, Announce) and e.body.wave_holder == "h" and e.src == "h"]
    assert {e.body.wave for e in waves} == {1}
    late = [e.body.late for e in sent if isinstance(e.body, Walk) and e.src == "h"]
    assert late == [False] * (WALKS + 1) + [True] * LATE_WALKS + [False] * WAVE_WALKS


@pytest.mark.parametrize("late", [False, True])
def test_a_late_walk_makes_no_trade_past_the_critical_price(late: bool) -> None:
    """With a->d and c->b 0.12 s slower, the trade lowers the worst path by 0.061 s and makes the
    four edges 0.24 s dearer: an early walk's ask takes it (GWTF's objective first), a late walk's
    refuses it (more than CRITICAL_PRICE times the saving), so long walk series keep the mean path."""
    assert 0.24 > CRITICAL_PRICE * 0.061
    bus, p, worst_before, total_before = worst_path_trade(0.12)
    a = p["a"]
    with recorded(bus) as sent:
        a.receive(Envelope("h", "a", -1, 1, Walk("h", bus.instance.edge_cost("h", "a"), late)), bus.now)
        bus.run_until_quiescent()
    asks = [e.body for e in sent if e.src == "a" and isinstance(e.body, Offer) and e.body.critical]
    assert asks and all(ask.late == late for ask in asks)  # (the rotation's go after a refusal too)
    moved = cost.total_cost(bus.instance, bus.routes()) - total_before
    if late:
        assert a.routes()["h"] == {"b": pytest.approx(1.0)} and moved == pytest.approx(0.0, abs=1e-6)
    else:
        assert a.routes()["h"] == {"d": pytest.approx(1.0)} and moved == pytest.approx(0.24, abs=1e-3)
        assert cost.max_path_cost(bus.instance, bus.routes()) == pytest.approx(worst_before - 0.061, abs=2e-3)
    assert violations(bus) == []


@pytest.mark.parametrize("seed,loss", [(4, 0.0), (9, 0.05)])
def test_walks_keep_the_flow_exact_and_stop(seed: int, loss: float) -> None:
    inst = random_instance(6 * 5, 6, 1, seed)
    bus = MessageBus(inst, seed=seed, loss=loss)
    with recorded(bus) as sent:
        stats = bus.run_until_quiescent()
    assert stats.quiescent
    walks = sum(isinstance(e.body, Walk) and e.src == inst.holders[0].id for e in sent)
    assert walks <= (1 + REFRESHES) * (WALKS + WALK_REFUNDS + LATE_WALKS)  # (each wave renews them)
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)
    assert violations(bus) == []


def test_walk_messages_cross_the_codec_and_bad_ones_are_refused() -> None:
    walk = Envelope("h", "a", -1, 1, Walk("h", 0.25, late=True))
    assert from_wire(to_wire(walk)) == walk
    ask = Envelope(
        "a", "d", 5, 1, Offer("h", 1.0, 9, 3, "b", bid=0.3, swap_worst=1.2, critical=True, late=True)
    )
    assert from_wire(to_wire(ask)) == ask
    raw = to_wire(walk)
    for field, bad in (("arrival", "far"), ("holder", 7), ("holder", "x" * 300), ("late", "yes")):
        with pytest.raises(WireError):
            from_wire({**raw, "body": {**raw["body"], field: bad}})


def test_forged_and_flooded_walks_cost_a_peer_at_most_its_ask_budget() -> None:
    """Walks for an unknown holder, or from a node that is not a neighbour, are ignored; a
    neighbour that sends walk after walk gets at most WALK_ASK_BUDGET asks out of a peer, and every
    flow stays consistent."""
    bus, p, _, _ = worst_path_trade(0.06)
    a = p["a"]
    with recorded(bus) as sent:
        a.receive(Envelope("h", "a", -1, 1, Walk("nobody", 0.1)), bus.now)
        a.receive(Envelope("zz", "a", -1, 1, Walk("h", 0.1)), bus.now)
        bus.run_until_quiescent()
    assert not any(isinstance(e.body, (Offer, Walk)) for e in sent)
    a.walk_asks_left = 3
    with recorded(bus) as sent:
        for _ in range(50):
            a.receive(Envelope("h", "a", -1, 1, Walk("h", 0.1)), bus.now)
            bus.run_until_quiescent()
    asks = [e for e in sent if e.src == "a" and isinstance(e.body, Offer) and e.body.critical]
    assert 1 <= len(asks) <= 3 and a.walk_asks_left >= 0
    assert violations(bus) == []
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(bus.instance), abs=1e-6)


def test_walks_ask_the_mates_in_turn() -> None:
    """Walk after walk, a peer asks the stage mates it has not asked about the same hop yet (the
    same asks would get the same answers), and all of them again once each was asked."""
    inst = random_instance(5 * 14, 5, 1, 3)
    bus = MessageBus(inst, seed=3)
    bus.run_until_quiescent()
    h = inst.holders[0].id
    asked: list[list[str]] = []
    for x in (bus.agents[p.id] for p in inst.peers if p.stage < inst.stages - 1):
        x.walk_asks_left = 10**6
        calls: list[str] = []
        x.ask_trade = lambda h, d, b, hops, critical=False, late=False, calls=calls: calls.append(d) or True
        asked = []
        for _ in range(12):
            calls.clear()
            x.on_walk(Walk(h, 0.1))
            asked.append(list(calls))
        if len({d for walk in asked for d in walk}) > WALK_ASKS:
            break
    mates = {d for walk in asked for d in walk}
    assert len(mates) > WALK_ASKS  # (a peer with more cheaper mates than one walk asks)
    assert all(0 < len(walk) <= WALK_ASKS for walk in asked)
    seen: set[str] = set()
    for walk in asked:
        if seen == mates:
            seen = set()  # each was asked: the turn starts again
        fresh = mates - seen
        assert set(walk) <= fresh, (walk, fresh)
        seen |= set(walk)


def test_path_news_keep_views_of_worst_routes_within_paths_rel_at_rest() -> None:
    """Walks steer by the worst routes onwards that next hops publish: at rest, each peer's view of
    a next hop it sends to is within PATHS_REL (or COST_GRAIN_S) of that hop's own figure, finer
    than announcements' 5%, which left walks straying off the worst path."""
    checked = 0
    for seed in range(4):
        inst = random_instance(8 * 8, 8, 1, seed)
        bus = MessageBus(inst, seed=seed)
        assert bus.run_until_quiescent().quiescent
        h = inst.holders[0].id
        for p in inst.peers:
            agent = bus.agents[p.id]
            for v, rate in agent.out[h].items():
                if rate > 1e-9 and v != h:
                    mine, theirs = agent.worst_of(h, v), bus.agents[v].fresh_worst(h)
                    assert theirs is not None
                    assert abs(mine - theirs) <= max(COST_GRAIN_S, PATHS_REL * abs(mine)) + 1e-9, (p.id, v)
                    checked += 1
    assert checked > 100 and PATHS_REL < COST_REL


def _walks_before_and_after_churn(monkeypatch: pytest.MonkeyPatch, unpaid_run: int) -> tuple:
    """The churn table's 16 x 48 row, one holder: its walks (late or not) before and after 20% churn."""
    monkeypatch.setattr(walks_module, "UNPAID_RUN", unpaid_run)
    inst = random_instance(48, 16, 1, 6)
    h = inst.holders[0].id
    bus = MessageBus(inst, seed=6)
    with recorded(bus) as first:
        bus.run_until_quiescent()
    churn(bus, 0.2, 6)
    with recorded(bus) as after:
        stats = bus.run_until_quiescent()

    def kinds(sent: list[Envelope]) -> list[bool]:
        return [e.body.late for e in sent if isinstance(e.body, Walk) and e.src == h]

    return bus, stats, kinds(first), kinds(after)


def test_after_churn_walks_that_pay_nothing_in_a_row_end_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """After churn near the holder its walks renew; UNPAID_RUN of one kind in a row that made its
    worst route no cheaper end that kind (the late ones still come). The first series is the whole
    one, and the routes after churn are as good for fewer messages and rounds."""
    bus, stats, first, after = _walks_before_and_after_churn(monkeypatch, UNPAID_RUN)
    bus_off, stats_off, first_off, after_off = _walks_before_and_after_churn(monkeypatch, 10**6)
    assert first == first_off and first.count(True) == LATE_WALKS  # (no change near us yet)
    assert after_off.count(True) == LATE_WALKS
    assert 0 < after.count(True) < LATE_WALKS and len(after) < len(after_off)
    assert stats.messages < stats_off.messages and stats.rounds < stats_off.rounds
    for b in (bus, bus_off):
        assert cost.flow_value(b.routes()) == pytest.approx(max_flow_value(b.instance), abs=1e-6)
        assert violations(b) == []
    worst, worst_off = (cost.max_path_cost(b.instance, b.routes()) for b in (bus, bus_off))
    assert worst <= worst_off + 1e-9
