"""Replica averaging: the replicas of a stage (or of the holder part) agree on one gradient and step."""

from swarm.averaging.replicas import ReplicaAverager, flatten_grads, unflatten_into_grads

__all__ = ["ReplicaAverager", "flatten_grads", "unflatten_into_grads"]
