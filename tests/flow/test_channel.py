"""The routing nodes' reliable channel: acknowledgements ride on replies, and only count from the
node a message went to; envelopes with acknowledgements cross the wire codec intact."""

from __future__ import annotations

import dataclasses
import random
from collections import Counter

import pytest

from swarm.flow import cost
from swarm.flow.bus import MessageBus
from swarm.flow.check import violations
from swarm.flow.generate import random_instance
from swarm.flow.messages import (
    Ack,
    Announce,
    EdgesDropped,
    Envelope,
    Exchange,
    ExchangeDone,
    HandOffDone,
    HandOver,
    NeighbourGone,
    NeighbourJoined,
    State,
    Traded,
)
from swarm.flow.reference import max_flow_value
from swarm.routing.codec import from_wire, to_wire
from swarm.wire import WireError
from tests.flow.test_trade_notes import trading


def test_acknowledgements_ride_on_the_next_message() -> None:
    bus = MessageBus(random_instance(12, 3, 1, seed=4), seed=4)
    kinds: Counter[str] = Counter()
    transmit = bus.transmit

    def count(env: Envelope) -> None:
        if isinstance(env.body, Ack):
            kinds["alone"] += 1 + len(env.acks)
        else:
            kinds["reliable"] += env.seq > 0
            kinds["riding"] += len(env.acks)
        transmit(env)

    bus.transmit = count  # type: ignore[method-assign]
    assert bus.run_until_quiescent().quiescent
    assert all(not agent._unacked for agent in bus.agents.values())  # every one was acknowledged
    assert kinds["riding"] + kinds["alone"] == kinds["reliable"]
    assert kinds["riding"] > 0  # replies carry some: fewer messages than one ack each


def test_an_acknowledgement_counts_only_from_the_addressee() -> None:
    bus = MessageBus(random_instance(6, 2, 1, seed=1), seed=1)
    while not any(agent._unacked for agent in bus.agents.values()):
        bus._step()
    agent = next(a for a in bus.agents.values() if a._unacked)
    seq, (sent, _) = next(iter(agent._unacked.items()))
    stranger = next(n for n in bus.agents if n not in (sent.dst, agent.id))
    agent.receive(Envelope(stranger, agent.id, 0, 0, Ack(seq)), bus.now)
    assert seq in agent._unacked
    agent.receive(Envelope(sent.dst, agent.id, 0, 0, Ack(-5), (seq,)), bus.now)
    assert seq not in agent._unacked


def test_envelopes_with_acknowledgements_cross_the_codec() -> None:
    env = Envelope("a", "b", 3, 2, Announce(State("a", 1, 0.5, {"h": 2}, {"h": 1.0}, {})), (4, 9))
    assert from_wire(to_wire(env)) == env
    raw = to_wire(env)
    for bad in ("4,9", [4, "x"], list(range(5000))):
        with pytest.raises(WireError):
            from_wire({**raw, "acks": bad})


def test_a_neighbour_wrongly_thought_gone_gets_work_again() -> None:
    """A failed call makes a peer write a live neighbour off; both sides drop the same flows, and
    once the neighbour is rediscovered the flow is consistent and maximal again (a stale in-flow
    used to block the neighbour's capacity for good)."""
    from swarm.flow import cost
    from swarm.flow.check import violations
    from swarm.flow.messages import NeighbourGone, NeighbourJoined
    from swarm.flow.reference import max_flow_value

    inst = random_instance(6, 2, 1, seed=3)
    bus = MessageBus(inst, seed=3)
    bus.run_until_quiescent()
    h = inst.holder_ids()[0]
    u, v = next(
        (u, v)
        for u in (p.id for p in inst.peers_of(0))
        for v, rate in bus.agents[u].out[h].items()
        if rate > 1e-6
    )
    bus.agents[u].notify(NeighbourGone(v), bus.now)  # v is alive: only u thinks it gone
    bus.run_until_quiescent()
    assert bus.agents[v].inflow[h].get(u, 0.0) == 0.0  # v dropped what u wrote off
    bus.agents[u].notify(NeighbourJoined(v, 1), bus.now)
    bus.agents[v]._told.pop(u, None)  # v is told u rediscovered it (the DHT does it live)
    bus.agents[v].announce()
    assert bus.run_until_quiescent().quiescent
    assert violations(bus) == []
    assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(inst), abs=1e-6)


MATE_MESSAGES = (Exchange, ExchangeDone, HandOver)  # what a live peer takes from a stage mate


class FalseDepartures:
    """A swarm in which, now and then, peers around a live peer X think X gone for 2-10 retry
    periods and then find it again: its neighbours write it off (a failed call, a lapsed record;
    not with `neighbours=False`) and, with `mates`, its stage mates think it left too (its DHT
    record lapsed for them). Meanwhile they refuse X's messages without acknowledging them, as
    `LiveFlow` does. With `multi`, 1-3 holders, and limited links on odd seeds."""

    def __init__(
        self,
        seed: int,
        trading_only: bool,
        mates: bool,
        loss: float,
        events: int,
        neighbours: bool = True,
        multi: bool = False,
    ) -> None:
        self.rng = rng = random.Random(seed)
        stages, per_stage = rng.randint(3, 5), rng.randint(3, 6)
        self.inst = random_instance(stages * per_stage, stages, 1, seed)
        if multi:
            pick = random.Random(seed * 7 + 1)
            stages, per_stage, holders = pick.randint(3, 5), pick.randint(3, 6), pick.randint(1, 3)
            limited = seed % 2 == 1
            inst = random_instance(stages * per_stage, stages, holders, seed, (10 if limited else 4) * 2**20)
            self.inst = dataclasses.replace(inst, link_capacity=limited)
        self.bus = bus = MessageBus(self.inst, seed=seed, loss=loss)
        self.trading_only, self.mates, self.events, self.neighbours = trading_only, mates, events, neighbours
        self.refused: dict[str, set[str]] = {}  # X -> the peers refusing its messages
        self.gone_to: dict[str, set[str]] = {}  # X -> the stage mates that think it gone
        transmit, is_mate = bus.transmit, bus.is_mate

        def refuse(env: Envelope) -> None:
            if env.dst in self.refused.get(env.src, ()):
                return  # (retransmitted: it was not acknowledged)
            if env.dst in self.gone_to.get(env.src, ()) and isinstance(env.body, MATE_MESSAGES):
                return
            transmit(env)

        bus.transmit = refuse  # type: ignore[method-assign]
        bus.is_mate = lambda a, b: is_mate(a, b) and a not in self.gone_to.get(b, ())  # type: ignore[method-assign]

    def write_off(self, x: str) -> float:
        bus = self.bus
        agent = bus.agents[x]
        self.refused[x] = set(agent.prev | agent.next) if self.neighbours else set()
        for n in sorted(self.refused[x]):
            bus.agents[n].notify(NeighbourGone(x), bus.now)
        if self.mates:
            self.gone_to[x] = {p for p, a in bus.agents.items() if a.stage == agent.stage and p != x}
            for m in sorted(self.gone_to[x]):
                bus.agents[m].mate_gone(x, bus.now)
        return bus.now + self.rng.uniform(2, 10) * bus.retry_s

    def rediscover(self, x: str) -> None:
        bus = self.bus
        for n in sorted(self.refused.pop(x)):
            if n in bus.agents:
                bus.agents[n].notify(NeighbourJoined(x, bus.agents[x].stage), bus.now)
                bus.agents[x]._told.pop(n, None)  # X hears they found it again (the DHT does it live)
        self.gone_to.pop(x, None)
        bus.agents[x].announce()

    def run(self) -> None:
        """Up to `events` false departures at random moments (of trades, with `trading_only`),
        then every edge must agree at the quiescent point, at the exact maximum flow."""
        bus, rng, holders = self.bus, self.rng, set(self.inst.holder_ids())
        due: dict[str, float] = {}
        events = 0
        while bus._heap and bus.now < 60.0:
            bus._step()
            for x in [x for x, t in due.items() if bus.now >= t]:
                del due[x]
                self.rediscover(x)
            if events < self.events and rng.random() < 0.02:
                moving = [e for e in bus.in_flight() if not self.trading_only or trading(e)]
                ends = {rng.choice((e.src, e.dst)) if self.trading_only else e.src for e in moving}
                peers = sorted(ends - holders - set(self.refused))
                if peers:
                    x = rng.choice(peers)
                    due[x] = self.write_off(x)
                    events += 1
        for x in sorted(due):
            self.rediscover(x)
        assert bus.run_until_quiescent(max_time=300.0).quiescent
        assert violations(bus) == []
        if len(self.inst.holders) == 1 and not self.inst.link_capacity:  # (else not exact: docs/routing.md)
            assert cost.flow_value(bus.routes()) == pytest.approx(max_flow_value(self.inst), abs=1e-6)


@pytest.mark.parametrize("trading_only", [False, True], ids=["any-moment", "mid-trade"])
def test_a_live_peer_written_off_while_flow_moves_leaves_no_edge_out_of_step(trading_only: bool) -> None:
    """Up to twice a run, the neighbours of a live peer (any peer with a message on its way, or one
    in the middle of a trade) write it off for 2-10 retry periods and rediscover it. With write-off
    messages alone, 3 of 40 runs ended out of step at any moment and 18 of 40 mid-trade: an
    acceptance that reached its sender after the write-off was ignored (the offer counted as
    refused) while the flow's later return was not, and trades of the written-off edges went on
    moving them. With edge generations (`Node._same_generation`), none."""
    for seed in range(40):
        FalseDepartures(seed, trading_only, mates=False, loss=0.0, events=2).run()


@pytest.mark.parametrize("neighbours", [True, False], ids=["all-around", "mates-only"])
def test_a_live_peer_its_stage_mates_think_gone_mid_trade_leaves_edges_agreed(neighbours: bool) -> None:
    """As above mid-trade, and X's stage mates think it left too (its DHT record lapsed while it
    lived), with its neighbours writing it off as well, or not (records lapse in some views only).
    Before, 34 of 60 runs ended out of step all around, 17 of 60 with the mates alone:
    - a b that still thought its mate d gone answered d's initiator a itself after d was back
      (`Resyncs.gave`), or while d answered a too (`Resyncs.on_reply` now moves the edge once);
    - a d that had asked c what its b moved (`TradeCheck`) still applied b's own late answer,
      while c had answered 0 and ignored b's late `Moved`: c's answer alone settles c -> d now, c
      waits for b's `Moved` while b is its live next hop, cancels what it did not count, and d
      settles a's side by c's answer too;
    - a b that thought d gone never answered d's hand-over (`orphan_hand_offs`): now once."""
    for seed in range(40):
        FalseDepartures(seed, trading_only=True, mates=True, loss=0.0, events=2, neighbours=neighbours).run()


@pytest.mark.parametrize("seed", [37, 124, 217, 235])
def test_a_hand_over_across_a_write_off_moves_no_dropped_edge(seed: int) -> None:
    """False departures mid-trade with 5% loss and up to three events: the runs that ended out of
    step (4 of 260). In three, d counted a hand-over's flow on d -> z although one of them had
    written the other off after z took it over, dropping that edge on both sides
    (`ExchangeDone.onward_gen`). In seed 37, b wrote z off with its hand-off in flight and told d
    that nothing moved, while z, not yet aware, took the flow over onto d -> z: d now asks z
    (`TradeNotes.ask_onward`)."""
    FalseDepartures(seed, trading_only=True, mates=False, loss=0.05, events=3).run()


@pytest.mark.parametrize(
    ("seed", "neighbours", "events"),
    [
        *((s, True, 3) for s in (152, 338, 443, 750)),
        *((s, False, 3) for s in (171, 427, 502, 560)),
        *((s, True, 6) for s in (403, 413, 441, 443)),
    ],
)
def test_mates_thinking_a_live_peer_gone_with_loss_leave_edges_agreed(
    seed: int, neighbours: bool, events: int
) -> None:
    """False departures mid-trade with the stage mates fooled too and 5% loss: every run of seeds
    0-799 with up to three events that ended out of step (4 of 800 all around, 4 of 800 mates only)
    and of seeds 0-499 with up to six (4 of 500 all around, one of them never quiet).
    - a trade asked before a write-off moved flow of the newer edge (`Exchange.sender_gen`);
    - c and z forgot their notes before d's `TradeCheck` came and answered 0 for a trade they had
      applied (`NOTES_REMEMBERED`);
    - d settled "nothing moved" when c left while b had answered it (`TradeNotes._partner_left`);
    - b dropped its unacknowledged answers to a mate it thought gone, and one lost on its first way
      (or refused by a d that thought b gone too) left d's trade open for good: they are parked and
      sent again once d is a known mate (`Node.stop_resending`);
    - z (or d) told d (or c) of a trade it applied before one of them wrote the other off, and the
      addressee counted it on the dropped edge (`Traded.edge_gen`, and a stale `Traded` is fenced);
    - two ends wrote each other off at once, and an offer of the newer generation was acknowledged
      and ignored by the end that thought its sender gone: it stayed open for good (`Node.receive`
      now leaves such flow messages unacknowledged until the sender is found again)."""
    harness = FalseDepartures(seed, True, mates=True, loss=0.05, events=events, neighbours=neighbours)
    harness.run()


def test_false_departures_with_several_holders_and_limited_links_leave_edges_agreed() -> None:
    """As above (all around, up to three events) with 1-3 holders, limited links on odd seeds: the
    one run of seeds 0-399 that ended out of step (103: a `Return` that overtook the late `Moved` it
    returned, `TradeNotes._refuse_late_move`), and a few more seeds of each kind."""
    for seed in (103, 0, 1, 2, 3):
        FalseDepartures(seed, True, mates=True, loss=0.05, events=3, multi=True).run()


def test_edge_generations_cross_the_codec() -> None:
    """Envelopes, hand-over answers and their generations survive the wire codec."""
    env = Envelope("a", "b", -1, 3, EdgesDropped(), (), 2)
    assert from_wire(to_wire(env)) == env
    with pytest.raises(WireError):
        from_wire({**to_wire(env), "gen": "2"})
    st = State("a", 1, 0.5, {"h": 2}, {"h": 1.0}, {})
    answers = (
        ExchangeDone(4, "h", 0.5, st, "z", onward_gen=3),
        HandOffDone(9, "h", 0.5, st, sender_gen=3),
        Traded(4, "h", 0.5, "b", st, hand_over=True, edge_gen=2),
    )
    for body in answers:
        wired = Envelope("a", "b", 5, 1, body, (), 1)
        assert from_wire(to_wire(wired)) == wired
