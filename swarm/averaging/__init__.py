"""Gradients of one part: exact accumulation over microbatches and averaging among replicas."""

from swarm.averaging.accumulate import GradientAccumulator
from swarm.averaging.replicas import ReplicaAverager

__all__ = ["GradientAccumulator", "ReplicaAverager"]
