"""The public swarm dashboard: a read-only web page, JSON API and Prometheus metrics over the DHT."""

from swarm.dashboard.app import create_app
from swarm.dashboard.collector import Collector
from swarm.dashboard.state import build_state, empty_state

__all__ = ["Collector", "build_state", "create_app", "empty_state"]
