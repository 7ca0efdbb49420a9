"""Rebalancing decisions (pure): move only for a real gain, never empty a stage, no stampede."""

from __future__ import annotations

from swarm.routing.rebalance import best_move, flow_bound, move_after_others, move_delay


def test_a_peer_moves_from_a_crowded_stage_to_the_bottleneck() -> None:
    peers = {0: {"a": 5.0, "b": 5.0}, 1: {"c": 2.0}}
    move = best_move(peers, "a")
    assert move is not None and move.stage == 1
    assert (move.bound_before, move.bound_after) == (2.0, 5.0)


def test_the_last_replica_of_a_stage_never_leaves() -> None:
    assert best_move({0: {"a": 5.0}, 1: {"c": 1.0}}, "a") is None


def test_small_gains_do_not_move_anyone() -> None:
    peers = {0: {"a": 1.0, "b": 5.0}, 1: {"c": 5.5}}  # moving a: bound 5.5 -> 5.0, a loss
    assert best_move(peers, "a") is None
    peers = {0: {"a": 1.0, "b": 5.0}, 1: {"c": 5.0}, 2: {"d": 5.0}}  # a gain of 0 at best
    assert best_move(peers, "a") is None


def test_demand_caps_the_gain() -> None:
    peers = {0: {"a": 5.0, "b": 5.0}, 1: {"c": 2.0}}
    assert best_move(peers, "a", demand=2.2) is None
    assert flow_bound({0: 3.0, 1: 4.0}, demand=10.0) == 3.0


def test_after_one_peer_moved_the_others_stay() -> None:
    """Two peers see the same shortage; once the first has moved, the second's re-check says stay."""
    peers = {0: {"a": 5.0, "b": 5.0, "x": 5.0}, 1: {"c": 2.0}}
    assert best_move(peers, "a") is not None and best_move(peers, "b") is not None
    moved = {0: {"b": 5.0, "x": 5.0}, 1: {"c": 2.0, "a": 5.0}}
    assert best_move(moved, "b") is None


def test_of_two_peers_claiming_one_move_exactly_one_moves() -> None:
    """Both confirmed the same shortage before either's departure showed (the delays' race): each
    announced its claim and sees the other's; the smaller id goes, the larger yields, whichever
    of them decides."""
    peers = {0: {"a": 5.0, "b": 5.0}, 1: {"c": 1.0}}
    assert best_move(peers, "a") is not None and best_move(peers, "b") is not None
    move = move_after_others(peers, "a", {"b"})
    assert move is not None and move.stage == 1
    assert move_after_others(peers, "b", {"a"}) is None  # a goes first and leaves b the last of stage 0


def test_claims_that_all_pay_all_go_through() -> None:
    """Four crowded replicas and a thin stage: the first two claimants by id both move (the second
    move still pays after the first), and the other two see the gap filled."""
    peers = {0: {"a": 5.0, "b": 5.0, "x": 5.0, "y": 5.0}, 1: {"c": 1.0}}
    claims = {"a", "b", "x", "y"}
    moves = {p: move_after_others(peers, p, claims - {p}) for p in sorted(claims)}
    assert [p for p, m in moves.items() if m is not None] == ["a", "b"]
    assert moves["b"] is not None and (moves["b"].bound_before, moves["b"].bound_after) == (6.0, 10.0)
    assert move_after_others(peers, "x", set()) == best_move(peers, "x")  # no claims: the plain rule


def test_move_delays_differ_between_peers_and_stay_in_range() -> None:
    delays = {move_delay(f"peer{i}", 0, 10.0) for i in range(50)}
    assert len(delays) == 50 and all(0 <= d < 10.0 for d in delays)
    assert move_delay("p", 1, 10.0) == move_delay("p", 1, 10.0)
