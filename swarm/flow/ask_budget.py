"""How many exchange asks a stage peer may make (`Exchanger.try_swap`): pure arithmetic, no state."""

from __future__ import annotations

# Nine in ten asks are refused (the initiator cannot see which in-flow d could trade), so the budget
# is what buys path quality. Each ask scans every next hop, so a peer's budget is what it may ask
# per next hop (SWAP_TRIES) bounded by a fixed amount of scanning (SCAN_BUDGET: asks x next hops):
# a peer with many next hops asks less often per hop, and messages per peer stay bounded at any
# size. Measured on three sweeps (`swarm bench flow-sweep --instances 30 --seed 0/1/2`, 90 instances)
# and at 1,000 x 16 (seeds 0/1/2, 62 next hops: 70 asks): the former 8 per hop capped at 80 asks
# gave a max path 1.019x the min-cost flow's (mean; 56 of 90 within 5%), a mean path within 10% on
# 76, 300 messages per peer, 38 / 20 / 49 s; 8 per hop with a scan budget of 4,400: 1.004 (65), 78,
# 355, 36 / 19 / 44 s; 16 per hop: 0.994 (70), 80, 426; 32 per hop: 0.989 (73), 79, 445; no
# budget at all: 0.973 (73), 80, 1,328 messages per peer. 32 per hop costs deep swarms dearly: on
# 24 stages x 8 peers, 928 messages per peer and 908 rounds, against 672 and 701 with 16 (499 and
# 649 with 8; 460 and 645 before), since new path costs revive asks tried before. Refunds put the
# asks where trades are made: each exchange made gives SWAP_REFUND asks back, at most
# SWAP_REFUND_MAX in all.
# Since exchanges count the paths a partial trade keeps (`trade_rules.rise`), asks waste less, and
# twice the budget (32 per hop, a scan budget of 8,800) took the whole range (4-16 x 3-30) from 61 to
# 67 of 90 within 5% (seeds 0 / 1 / 2: 21 / 21 / 19 -> 23 / 24 / 20; mean max / opt 1.028 / 1.018 /
# 1.048 -> 1.013 / 1.003 / 1.023) for 26-34% more messages; but at 62 next hops (1,000 x 16) it
# doubled the asks for no better path and 36% more messages. WIDE_SCAN keeps wide peers where they
# were (asks x next hops^2 under it: 70 asks at 62 next hops, as before; it binds above 31).
SWAP_TRIES = 32  # exchange asks per next hop ...
SCAN_BUDGET = 8800  # ... while asks x next hops stay under this ...
WIDE_SCAN = 272_800  # ... and asks x next hops^2 under this
SWAP_BATCH = 4  # exchanges asked for at once
SWAP_REFUND = 4  # asks given back per exchange made (asks go where trades are made) ...
SWAP_REFUND_MAX = 40  # ... at most this many in all


# Hand-overs a peer (as d) may start, again after churn (swarm/flow/handover.py): each moves
# throughput, so b and d announce. Since hand-overs count only the paths they make new, more of them
# pay: on the whole range seeds 0 / 1 / 2, 16 -> 32 took max path within 5% from 23 / 25 / 21 to
# 25 / 25 / 22 of 30 (mean max / opt 1.007 / 0.998 / 1.018 -> 1.003 / 0.996 / 1.011; seeds 0 / 2
# under a second timing, with a flat 32: 20 / 23 -> 23 / 23) for 6-13% more messages. Wide peers keep
# 16 (1,000 x 16, 62 next hops: a flat 32 cost 10% more messages for no better path).
HAND_OVERS = 32  # hand-overs per peer with up to WIDE_HAND_OVER_HOPS next hops ...
WIDE_HAND_OVER_HOPS = 31
WIDE_HAND_OVERS = 16  # ... and with more


def hand_over_budget(next_hops: int) -> int:
    """Hand-overs a peer with `next_hops` next hops may start (see HAND_OVERS)."""
    return HAND_OVERS if next_hops <= WIDE_HAND_OVER_HOPS else WIDE_HAND_OVERS


# Corridor probes a peer may start (swarm/flow/corridor.py; churn near it ends them); each plan carried
# out gives one back, at most CORRIDOR_REFUNDS in all. Wide peers start none: at 1,000 x 16 (62 next
# hops, seed 2) corridors took the run from 692,060 messages in 527 rounds (44.1 s) to 934,486 in
# 1,608 rounds (62.5 s, max / opt 1.259 -> 1.294): plans run as chains of hand-overs one stage after
# another, and each origin waits for calm again after one.
CORRIDOR_PROBES = 2
CORRIDOR_REFUNDS = 8
WIDE_CORRIDOR_HOPS = 31


def corridor_budget(next_hops: int) -> int:
    """Corridor probes a peer with `next_hops` next hops may start (see CORRIDOR_PROBES)."""
    return CORRIDOR_PROBES if next_hops <= WIDE_CORRIDOR_HOPS else 0


# Worst-path walks (swarm/flow/walks.py) not with limited links, as corridors: on the simulator's
# geo scenarios (10 holders, link limits) walks made training 3-4% slower (`swarm sim -s
# geo-10-regions-no-churn / -low-churn / -high-churn --router gwtf`: 663.5 / 665.9 / 659.6 s ->
# 691.4 / 691.8 / 678.7 s, 23% more protocol messages at high churn): a trade that lowers one
# holder's worst path at any edge cost moves the link use the other holders' flows share.
WALKS_WITH_LINK_LIMITS = False


# Nor at peers (and holders) with more than WIDE_WALK_HOPS next hops: at 1,000 x 16 (62 next hops,
# `swarm bench flow --random --peers 1000 --stages 16 --holders 1 --seed 2`) walks took the run from
# 692,060 messages in 527 rounds to 1,029,627 in 668 (50.5 s), max path / opt 1.259 -> 1.270, mean /
# opt 1.088 -> 1.111. The whole-range sweeps' widest peers have 32-39: at 31 a walk stopped at the
# first of them (seed 2 instance 15, 12 x 24, a stage-0 peer with 32), and 48 (as the ramp's
# WIDE_RAMP_HOPS) took max path / opt within 5% from 77 to 80 of 90 with walks asking in turn.
WIDE_WALK_HOPS = 48


def walks_allowed(improve: bool, link_limits: bool, next_hops: int = 0) -> bool:
    """Whether a node takes part in worst-path walks (see WALKS_WITH_LINK_LIMITS, WIDE_WALK_HOPS)."""
    return improve and (WALKS_WITH_LINK_LIMITS or not link_limits) and next_hops <= WIDE_WALK_HOPS


# Route costs that got dearer are told to every upstream neighbour, not only to those that send us
# flow: a neighbour pushes its next flow by them, and the first flow of a swarm followed cheap routes
# that had filled up (docs/routing.md: "The holder's ramp"). Not with limited links, where the simulator's
# table was measured without it (and the ramp is off), nor at peers with more than
# WIDE_DEARER_NEWS upstream neighbours, as walks.
DEARER_NEWS_WITH_LINK_LIMITS = False
WIDE_DEARER_NEWS = 31


def dearer_news_to_all(link_limits: bool, upstream: int) -> bool:
    """Whether a node tells every upstream neighbour that its route got dearer (see above)."""
    return (DEARER_NEWS_WITH_LINK_LIMITS or not link_limits) and upstream <= WIDE_DEARER_NEWS


def swap_budget(next_hops: int) -> int:
    """Exchange asks a peer with `next_hops` next hops may make (see SCAN_BUDGET)."""
    n = max(1, next_hops)
    return min(SWAP_TRIES * n, SCAN_BUDGET // n, WIDE_SCAN // (n * n))


__all__ = [
    "CORRIDOR_PROBES",
    "CORRIDOR_REFUNDS",
    "WIDE_CORRIDOR_HOPS",
    "HAND_OVERS",
    "SCAN_BUDGET",
    "SWAP_BATCH",
    "SWAP_REFUND",
    "SWAP_REFUND_MAX",
    "SWAP_TRIES",
    "WIDE_HAND_OVERS",
    "WIDE_HAND_OVER_HOPS",
    "WIDE_SCAN",
    "DEARER_NEWS_WITH_LINK_LIMITS",
    "WIDE_DEARER_NEWS",
    "corridor_budget",
    "dearer_news_to_all",
    "hand_over_budget",
    "swap_budget",
    "walks_allowed",
    "WIDE_WALK_HOPS",
    "WALKS_WITH_LINK_LIMITS",
]
