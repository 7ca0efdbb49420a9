"""Messages of the routing protocol: what peers say to each other, nothing else.

Every protocol message travels in an `Envelope` that a sender retransmits until it is acknowledged,
and that a receiver deduplicates by (sender, seq), so loss and duplication never change flow
accounting. Flow amounts are rates (microbatches/s) of ONE holder's microbatches (a commodity),
because every microbatch must come back to the holder that sent it.

The receiver of flow is authoritative for the rate on an edge: it decides how much of an offer to
accept, it may hand flow back (`Return`), and it reports how much of a `Cancel` it could apply.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

INF = float("inf")


@dataclass(frozen=True)
class State:
    """What a node publishes about itself (the DESIGN's `{run}.flow.{peer}` record).

    labels: push-relabel height per holder (residual distance to that holder's sink).
    cheapest: cost of the cheapest route to the holder's sink through nodes with spare capacity
        (the price of one more microbatch sent here).
    worst: cost of the most expensive route to the holder's sink over edges carrying flow (what
        the current flow through this node pays at most: GWTF's objective, seen from here).
    epochs: per holder, the relabel epoch the labels belong to (absent: 0). A holder whose flow is
        stuck starts a new epoch; labels of an older epoch count as unknown (see `Node.observe`).
    hand_overs: whether the node may still take a hand-over (swarm/flow/handover.py): an asker does
        not ask a mate that can neither trade nor take one (`SwapAsks._hopeless`).
    """

    node: str
    version: int
    spare: float
    labels: Mapping[str, int] = field(default_factory=dict)
    cheapest: Mapping[str, float] = field(default_factory=dict)
    worst: Mapping[str, float] = field(default_factory=dict)
    epochs: Mapping[str, int] = field(default_factory=dict)
    hand_overs: bool = True


@dataclass(frozen=True)
class SwapOption:
    """A next hop an exchange initiator could move flow off (see `Offer.swap_options`): `rate` of
    the initiator's flow goes there now, and `worst` is that hop's most expensive used route on to
    the holder's sink as the initiator last heard it. `gen`: the initiator's edge generation with
    the hop (a trade for the ask moves only flow of that generation, see `Exchange.sender_gen`)."""

    hop: str
    rate: float
    worst: float
    gen: int = -1


@dataclass(frozen=True)
class Offer:
    """Push: "take `rate` of `holder`'s microbatches from me". `label` is the sender's label.

    `swap_from` asks a full receiver for an exchange (GWTF's swap among same-stage peers): our flow
    on the edge to `swap_from` moves to the receiver, and the same rate of another sender's in-flow
    moves from the receiver to `swap_from`, so nobody's throughput changes, only edges (`Exchange`).
    `bid` is the cost of the sender's path from the holder up to the receiver; with `preempt` set, a
    full receiver may make room by returning in-flows whose path so far costs more than `bid`.
    `state` is the sender's own state (its labels, for the receiver to return flow by).
    `swap_worst` goes with `swap_from`: the cost of `swap_from`'s most expensive used route on to the
    holder's sink as the sender last heard it, so that the receiver can tell whether the trade makes
    the most expensive path through the four edges cheaper (GWTF's min-max objective).
    `swap_options` widens an exchange ask: the receiver may trade the sender's flow on any of these
    next hops (its own stage mates), and picks the trade that pays most (`Reply.swapped` says which).
    """

    holder: str
    rate: float
    offer_id: int
    label: int
    swap_from: str | None = None
    bid: float | None = None
    preempt: int = 0
    state: State | None = None
    swap_worst: float | None = None
    swap_options: tuple[SwapOption, ...] = ()
    swap_gen: int = -1  # our edge generation with `swap_from` (as `SwapOption.gen`)
    # A corridor step (swarm/flow/corridor.py): the receiver takes our flow on `swap_from` over as
    # a hand-over with the planned next hop `corridor_olds[0]`, then asks `corridor[0]` to take it
    # over from there, and so on down the plan.
    corridor: tuple[str, ...] = ()
    corridor_olds: tuple[str, ...] = ()
    # A worst-path ask (swarm/flow/walks.py): our edge to `swap_from` is on the holder's most
    # expensive used path, so a trade pays when that path through the four edges gets cheaper,
    # whatever the edges cost (GWTF's objective first); on a late walk (`Walk.late`), only while they
    # get dearer by at most `trade_rules.CRITICAL_PRICE` times what that path saves.
    critical: bool = False
    late: bool = False
    # An onward swap (swarm/flow/onward_swaps.py): once this exchange is made, our in-flow from
    # `plan_sender` (whose route so far costs `plan_arrival`) is to move on to our mate `plan_taker`
    # by a hand-over, so the receiver judges the two trades together.
    plan_sender: str | None = None
    plan_taker: str | None = None
    plan_arrival: float = 0.0
    # A rotation (swarm/flow/rotations.py): once this exchange is made, `rotate_sender`'s flow
    # (route so far `rotate_arrival`, `rotate_rate` of it) on `rotate_hop` (worst route onwards
    # `rotate_worst`) is to move to `swap_from`, and the receiver's partner on to `rotate_hop`.
    rotate_sender: str | None = None
    rotate_arrival: float = 0.0
    rotate_hop: str | None = None
    rotate_worst: float = 0.0
    rotate_rate: float = 0.0
    # A worst-path ask sent once every other ask for this flow was refused and it is still on
    # `swap_from`: if no trade pays, the receiver may ask its senders for a rotation (rotations.py).
    rotate_go: bool = False
    # A layer plan's swap (swarm/flow/layer_plans.py): trade with this sender's flow, no other, and
    # without judging the trade alone (the plan was judged as a whole).
    layer_partner: str | None = None
    # A make-room chain's first half (swarm/flow/room_chains.py): no trade, only a hand-over of our
    # flow on `swap_from` to the receiver, taken where the new path costs less than this bound.
    room_bound: float | None = None
    room_rise: float = 0.0  # and where its four edges get dearer by at most this (what it is to save)


@dataclass(frozen=True)
class Reply:
    """Accept (`accepted` > 0) or reject (`accepted` == 0) an offer, with the receiver's real state.

    `exchanged` of the accepted rate is flow that an exchange moved here from the sender's old next
    hop, which already let go of it: `swapped`, one of the offer's `swap_options` (when absent,
    `Offer.swap_from`).
    """

    offer_id: int
    holder: str
    accepted: float
    state: State
    exchanged: float = 0.0
    swapped: str | None = None
    waiting: bool = False  # d stopped waiting for b, which may still move the flow (then `Moved`)


@dataclass(frozen=True)
class Return:
    """Return flow upstream: the receiver gives back `rate` it had accepted from the addressee."""

    holder: str
    rate: float
    state: State


@dataclass(frozen=True)
class Cancel:
    """The sender withdraws up to `rate` of flow it had pushed to the addressee."""

    holder: str
    rate: float
    cancel_id: int


@dataclass(frozen=True)
class CancelDone:
    """How much of a cancel was applied (less when flow was returned in the meantime)."""

    cancel_id: int
    holder: str
    cancelled: float
    state: State


@dataclass(frozen=True)
class Exchange:
    """From a full peer d to a peer b of its stage: move up to `rate` of `sender`'s in-flow at b
    over to d, and take the same rate of `partner`'s in-flow at d in its place.

    Only the receiving end of an edge ever moves it and d holds the partner's flow aside meanwhile,
    so two exchanges never move the same flow twice; b tells `partner` (`Moved`), d tells `sender`
    (`Reply`).
    """

    holder: str
    rate: float
    exchange_id: int
    sender: str
    partner: str
    ask: int = -1  # the sender's offer id of the ask (see `Resync`)
    partner_gen: int = -1  # d's edge generation with `partner` (see `Moved.old_gen`)
    # the sender's edge generation with b when it asked (`SwapOption.gen`): if one of them wrote the
    # other off since, the flow on their edge is not the flow the ask offered, and nothing moves
    sender_gen: int = -1


@dataclass(frozen=True)
class ExchangeDone:
    """How much of an exchange was applied (less when the sender's flow had shrunk meanwhile).
    After a `HandOver`, `onward` is the next hop the handed-over flow runs to from now on, and
    `onward_gen` the edge generation between it and d that it took the flow over in: if one of
    them wrote the other off since, that edge was dropped on both sides, the flow with it. With
    nothing moved, `onward` names a z that did not answer before b wrote it off (d asks z)."""

    exchange_id: int
    holder: str
    moved: float
    state: State
    onward: str | None = None
    onward_gen: int = -1  # z's edge generation with d when it took the flow over (-1: not known)


@dataclass(frozen=True)
class HandOver:
    """From a peer d with spare capacity to a stage mate b: hand up to `rate` of `sender`'s in-flow
    over to d, which forwards it to one of b's own next hops (b picks it), so that only b's and d's
    throughputs change. `arrival`: the sender's worst route from the holder (without the edge to
    us); `label`, `inbound`, `onwards`: d's label, worst route so far and worst route onwards, for b
    to judge whether the new path through d pays (see `Exchanger.on_hand_over`)."""

    holder: str
    rate: float
    exchange_id: int
    sender: str
    arrival: float
    label: int
    inbound: float
    onwards: float
    ask: int = -1  # the sender's offer id of the ask (see `Resync`)
    sender_gen: int = -1  # as `Exchange.sender_gen`
    sends_here: bool = False  # the sender already sends to d: paths over sender -> d exist already
    uses: tuple[str, ...] = ()  # d's next hops carrying the holder's flow: paths over d -> z exist
    onward: str | None = None  # a corridor step: the next hop z is planned, b judges nothing
    critical: bool = False  # for a worst-path ask (`Offer.critical`): b may try an onward swap
    room_bound: float | None = None  # a make-room chain's (`Offer.room_bound`): b keeps new paths under it
    room_rise: float = 0.0  # and its edges' rise under this (`Offer.room_rise`)


@dataclass(frozen=True)
class HandOff:
    """From b to its next hop z (a hand-over, see `HandOver`): take up to `rate` of your in-flow
    from me as in-flow from `sender` (b's stage mate d) from now on; z's throughput does not change.
    Only z, the receiving end of the edge b -> z, moves it, and answers with `HandOffDone`."""

    holder: str
    rate: float
    handoff_id: int
    sender: str
    exchange: int = -1  # d's id of the hand-over (see `Traded`)


@dataclass(frozen=True)
class HandOffDone:
    """How much of a `HandOff` z applied (less when b's flow to z had shrunk meanwhile)."""

    handoff_id: int
    holder: str
    moved: float
    state: State
    sender_gen: int = -1  # our edge generation with the `HandOff`'s sender d when we applied it


@dataclass(frozen=True)
class Moved:
    """`rate` of the addressee's flow that ran to `old` runs to the message's sender from now on.
    `ask`: the addressee's exchange ask this settles late (its offer id), if any. `exchange`: the
    exchange of `old` (its id there) that moved it, when the sender is that exchange's b. `old_gen`:
    the edge generation between `old` and the addressee the trade was made in (-1: not known); if
    either has written the other off since, that edge was dropped on both sides and stays as is."""

    holder: str
    rate: float
    old: str
    state: State
    ask: int = -1
    exchange: int = -1
    old_gen: int = -1


@dataclass(frozen=True)
class Convert:
    """Of the flow of holder `old` the sender sends the addressee, `rate` is holder `new`'s from
    now on (swarm/flow/conversions.py): the addressee does the same on its own next hops."""

    old: str
    new: str
    rate: float


@dataclass(frozen=True)
class ConvertBack:
    """The addressee's `Convert` found less of `old`'s flow here: `rate` of it stays `old`'s."""

    old: str
    new: str
    rate: float


@dataclass(frozen=True)
class Traded:
    """After an exchange's or a hand-over's b (`mate`) left, about d's exchange `exchange_id`.

    Exchange: between c and d. b moved `rate` of c's flow off c -> d, and the sender heard it from
    b (c by `Moved`, d by `ExchangeDone`); an addressee that did not settles its end the same way.
    It is also c's answer to d's `TradeCheck` (`rate` 0: b moved nothing of c's that c heard of).
    Hand-over (`hand_over`): from z to d, z took `rate` of b's flow to it as d's; as z's answer to
    d's `TradeCheck` (b dropped its hand-off) or on its own, `edge_gen` is z's edge generation with
    d when it took the flow over (d counts nothing on d -> z if one of them wrote the other off since);
    from d to c, d's generation with c when it applied the trade (likewise for c -> d)."""

    exchange_id: int
    holder: str
    rate: float
    mate: str
    state: State
    hand_over: bool = False
    edge_gen: int = -1


@dataclass(frozen=True)
class TradeCheck:
    """From d to c when the mate b it asked for exchange `exchange_id` left before answering: did b
    move any of your flow off c -> d for it? (c answers with `Traded`.) From d to z when b dropped
    the hand-off of d's hand-over `exchange_id`: did you take any of b's flow over as ours?"""

    exchange_id: int
    holder: str
    mate: str


@dataclass(frozen=True)
class Resync:
    """From an exchange initiator a to a next hop b it offered in asks to b's stage mate `gone`, which
    left before a heard how those asks ended: how much of a's flow did b move to `gone` for them?"""

    gone: str
    asks: tuple[int, ...]


@dataclass(frozen=True)
class AskMoved:
    """For one ask (`Resync`): `rate` of `holder`'s flow that b moved off the edge a -> b."""

    ask: int
    holder: str
    rate: float


@dataclass(frozen=True)
class Resynced:
    """b's answer to a `Resync`: b is the receiving end of a -> b, so its word settles that edge."""

    gone: str
    moved: tuple[AskMoved, ...]
    state: State


@dataclass(frozen=True)
class Announce:
    """A state announcement to neighbours (sent when labels, costs or fullness change).

    `wave_holder` and `wave` tag the part of a refresh wave (swarm/flow/refresh_waves.py): sent
    unasked, to every upstream neighbour, once that holder's walks are spent."""

    state: State
    wave_holder: str = ""
    wave: int = 0


@dataclass(frozen=True)
class Paths:
    """Path-cost news for exchanges, per holder: the most expensive used route from the holder to
    the sender (`arrival`, news for its next hops) and from the sender on to the holder's sink
    (`worst`, news for its senders). Best effort; it moves no flow, so it wakes no push or relabel.
    """

    arrival: Mapping[str, float]
    worst: Mapping[str, float]


@dataclass(frozen=True)
class Lane:
    """A partial corridor of a `Corridor` probe: stage peers with spare capacity, one per stage
    from the origin's next stage on, and the cost of the edges from the origin through them."""

    nodes: tuple[str, ...]
    cost: float
    worst: float = 0.0  # the dearest route it makes through a lane peer's own next hops
    room: float = INF  # the least spare capacity along it


@dataclass(frozen=True)
class Corridor:
    """A probe down the origin's most expensive route (swarm/flow/corridor.py): the old nodes
    `olds` so far (the addressee is the last), the cost of their edges from the origin
    (`old_cost`), `rate` (the least flow along them), the cheapest `lanes` of spare peers that end
    at the addressee's stage mates, and the best plan found so far (`plan`: its lane's nodes, it
    closes into `olds[len(plan)]`; `gain`: seconds it saves; `plan_rate`: the flow it moves).
    Best effort, it moves no flow."""

    holder: str
    origin: str
    rate: float
    olds: tuple[str, ...]
    old_cost: float  # with the origin's worst route so far
    lanes: tuple[Lane, ...]
    plan: tuple[str, ...] = ()
    gain: float = 0.0
    plan_rate: float = 0.0


@dataclass(frozen=True)
class CorridorPlan:
    """The probe's answer, passed back up the old nodes to the origin: move `rate` of the
    holder's flow from `olds[:len(takers)]` to `takers`, closing into `olds[len(takers)]`.
    `back`: the old nodes it still passes on its way back (the addressee last)."""

    holder: str
    origin: str
    rate: float
    takers: tuple[str, ...]
    olds: tuple[str, ...]
    gain: float
    back: tuple[str, ...] = ()


@dataclass(frozen=True)
class Walk:
    """The holder's worst-path walk (swarm/flow/walks.py): the addressee lies on the most expensive
    used path of `holder`'s flow, whose edges up to it cost `arrival`. Best effort, it moves no flow."""

    holder: str
    arrival: float
    late: bool = False  # a walk past the holder's first WALKS: its trades keep to CRITICAL_PRICE
    plan_stage: int = -1  # the stage whose peer on the walk plans its in-layer (swarm/flow/layer_plans.py)


@dataclass(frozen=True)
class OnwardHint:
    """Our next hop made room (an onward swap, swarm/flow/onward_swaps.py): ask `taker`, its stage
    mate, to take our flow of `holder` on it over. Best effort, it moves no flow."""

    holder: str
    taker: str


@dataclass(frozen=True)
class RotateAsk:
    """A rotation (swarm/flow/rotations.py): `sender`'s flow of `holder` (`rate`, route so far
    `arrival`) on our mate `hop` (worst route onwards `worst`) would come to us if your flow on us
    moved to another mate of ours whose sender moved to `hop`: ask for that trade. Best effort."""

    holder: str
    sender: str
    arrival: float
    hop: str
    worst: float
    rate: float


@dataclass(frozen=True)
class RotateHint:
    """A rotation made room here: ask us again to take your flow of `holder` on our mate `hop`
    over (swarm/flow/rotations.py). Best effort, it moves no flow."""

    holder: str
    hop: str
    room: bool = False  # a make-room chain's: the room is held for you a while (room_chains.py)


@dataclass(frozen=True)
class RoomAsk:
    """A make-room chain (swarm/flow/room_chains.py): move up to `rate` of your flow of `holder` on
    us to another of our stage mates by a hand-over, where its path costs less than `bound`, so that
    another holder's dearer flow can come to us. Best effort, it moves no flow."""

    holder: str
    rate: float
    bound: float
    rise: float = 0.0  # the most the four edges of the hand-over may get dearer: what it is to save


@dataclass(frozen=True)
class LayerAsk:
    """A layer plan (swarm/flow/layer_plans.py): the planner, a peer of your next stage, asks for
    your flows of `holder` into its stage, with your path figures (`LayerInfo`). Best effort.
    `stage`: a stage plan (swarm/flow/stage_plans.py): the planner, a mate of yours, asks for your
    flows onwards and what you may carry (`LayerInfo.room`)."""

    holder: str
    plan: int
    stage: bool = False


@dataclass(frozen=True)
class LayerHop:
    """One next hop in a `LayerInfo`: our rate on it, the edge's cost and its worst route onwards."""

    hop: str
    rate: float
    cost: float
    onward: float


@dataclass(frozen=True)
class LayerInfo:
    """The answer to `LayerAsk`: our worst route so far (`arrival`) and every next hop of ours."""

    holder: str
    plan: int
    arrival: float
    hops: tuple[LayerHop, ...] = ()
    room: float = -1.0  # for a stage plan: what we may carry of `holder`'s flow (our flow + spare)


@dataclass(frozen=True)
class LayerSwap:
    """A layer plan's trade for us to ask: `rate` of our flow of `holder` on `hop` to move to `to`,
    and `partner`'s flow on `to` to move to `hop` (an `Offer` with `layer_partner`). With `onward`
    set, a stage plan's hand-over instead: `to` takes `rate` of our flow on `hop` over and runs it
    on to `onward` (a one-step corridor, swarm/flow/stage_plans.py); `partner` is unused."""

    holder: str
    hop: str
    to: str
    partner: str
    rate: float
    onward: str | None = None


@dataclass(frozen=True)
class RoomNews:
    """New capacity joined the swarm: the sender joined or grew, or is a holder that wants less.
    Holders that capped what they send push their refused demand again (swarm/flow/holder_ceiling.py).
    Reliable; sent to holders, who take it from any node (forged news costs a push, nothing more)."""


@dataclass(frozen=True)
class EdgesDropped:
    """We wrote you off (a failed call, a lapsed record) and dropped every flow on our edges with
    you: drop yours (best effort; the envelope's `gen` says it, and any later message of ours does)."""


@dataclass(frozen=True)
class Ack:
    """Acknowledges envelope `seq` (and the envelope's `acks`); never acknowledged itself."""

    seq: int


@dataclass(frozen=True)
class NeighbourGone:
    """Failure detector / DHT expiry: `node` left or crashed (delivered by the environment)."""

    node: str


@dataclass(frozen=True)
class NeighbourJoined:
    """DHT discovery: `node` joined one of the adjacent stages (delivered by the environment)."""

    node: str
    stage: int


Body = (
    Offer
    | Reply
    | Return
    | Cancel
    | CancelDone
    | Exchange
    | ExchangeDone
    | HandOver
    | HandOff
    | HandOffDone
    | Moved
    | Convert
    | ConvertBack
    | Resync
    | Resynced
    | Traded
    | TradeCheck
    | Announce
    | Paths
    | Corridor
    | CorridorPlan
    | Walk
    | OnwardHint
    | RotateAsk
    | RotateHint
    | RoomAsk
    | LayerAsk
    | LayerInfo
    | LayerSwap
    | RoomNews
    | EdgesDropped
    | Ack
)


@dataclass(frozen=True)
class Envelope:
    """One message on the wire. `depth` is the causal depth (used to count asynchronous rounds).

    `acks` acknowledges envelopes the sender got from the addressee: acknowledgements ride on the
    next message to that node (a reply, usually) instead of costing a message each.

    `gen` counts how often the sender wrote the addressee off (see `Node.receive`): flow messages
    from an older generation are stale, and a newer one tells the addressee to drop its side too.
    """

    src: str
    dst: str
    seq: int
    depth: int
    body: Body
    acks: tuple[int, ...] = ()
    gen: int = 0
