"""Routing engine: cost model, asynchronous push-relabel protocol, exact reference, SWARM baseline.

Pure code: no I/O, no clocks, no hivemind. The live peer, the simulator and the tests call it.
"""

from swarm.flow.bus import MessageBus, ProtocolStats
from swarm.flow.check import violations
from swarm.flow.generate import random_instance
from swarm.flow.holder_agent import HolderAgent
from swarm.flow.peer import PeerAgent
from swarm.flow.reference import (
    MinMaxSolution,
    max_flow_value,
    min_cost_max_flow,
    min_max_path_flow,
    min_max_path_solution,
)

__all__ = [
    "HolderAgent",
    "MessageBus",
    "MinMaxSolution",
    "PeerAgent",
    "ProtocolStats",
    "max_flow_value",
    "min_cost_max_flow",
    "min_max_path_flow",
    "min_max_path_solution",
    "random_instance",
    "violations",
]
