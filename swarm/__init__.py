"""swarm: churn-tolerant decentralized training (GWTF) over a hivemind DHT."""

__version__ = "0.1.0"
PROTOCOL_VERSION = 1
