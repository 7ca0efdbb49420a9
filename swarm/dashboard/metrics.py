"""Prometheus exposition of the dashboard state: what an operator alerts on, one scrape per poll.

Built with prometheus_client's own text writer from the latest state (no per-request DHT reads), so
the format is whatever Prometheus parses. Every series carries the `run` label.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _gauge(name: str, doc: str, labels: tuple[str, ...] = ()) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, doc, labels=["run", *labels])


class _StateCollector:
    """A prometheus_client collector over one state dict."""

    def __init__(self, state: dict) -> None:
        self.state = state

    def collect(self) -> Iterator[Metric]:
        st = self.state
        run = str(st.get("run_id") or "")
        up = _gauge("swarm_up", "1 when the DHT answered and the run's manifest was found.")
        up.add_metric([run], 1.0 if st["status"] in ("ok", "no_peers") and not st.get("stale") else 0.0)
        yield up
        health = st["health"]
        healthy = _gauge("swarm_healthy", "1 when every stage has a serving peer and a holder is online.")
        healthy.add_metric([run], 1.0 if health["ok"] else 0.0)
        yield healthy
        holders = _gauge("swarm_holders", "Data holders online.")
        holders.add_metric([run], float(health["holders"]))
        yield holders
        if st.get("read_at") is not None:
            read = _gauge("swarm_dashboard_read_timestamp_seconds", "When the DHT was last read.")
            read.add_metric([run], float(st["read_at"]))
            yield read

        per_stage = {
            "swarm_stage_peers": ("Peers announced in the stage.", "peers_total"),
            "swarm_stage_serving_peers": ("Peers of the stage in state serving.", "serving"),
            "swarm_stage_throughput": ("Summed measured throughput (microbatches/s).", "throughput"),
            "swarm_stage_capacity": ("Summed announced capacity (microbatches/s).", "capacity"),
            "swarm_stage_assigned_flow": ("Rate the routing engine assigns into the stage.", "assigned"),
        }
        for name, (doc, key) in per_stage.items():
            family = _gauge(name, doc, ("stage",))
            for stage in st["stages"]:
                family.add_metric([run, str(stage["stage"])], float(stage[key] or 0.0))
            yield family
        bottleneck = _gauge("swarm_stage_bottleneck", "1 for the stage that limits the swarm.", ("stage",))
        for stage in st["stages"]:
            bottleneck.add_metric([run, str(stage["stage"])], 1.0 if stage["bottleneck"] else 0.0)
        yield bottleneck

        progress = st.get("progress")
        if progress:
            scalars = {
                "swarm_iteration": ("Latest finished training iteration.", "iteration"),
                "swarm_loss": ("Training loss of the latest iteration.", "loss"),
                "swarm_tokens_per_second": ("Training tokens per second (all holders).", "tokens_per_s"),
                "swarm_iteration_seconds": ("Wall time of the latest iteration.", "seconds_per_iteration"),
                "swarm_rerouted_microbatches": ("Rerouted microbatches, as the holder reports.", "rerouted"),
                "swarm_reexecuted_microbatches": ("Re-executed microbatches, as reported.", "reexecuted"),
                "swarm_gradients_lost": ("Microbatch gradients lost to crashed replicas.", "gradients_lost"),
            }
            for name, (doc, key) in scalars.items():
                if progress[key] is not None:
                    family = _gauge(name, doc)
                    family.add_metric([run], float(progress[key]))
                    yield family
        events = _gauge("swarm_events", "Churn timeline entries on the DHT by kind.", ("kind",))
        for kind in ("join", "leave", "crash", "reroute", "reexecute"):
            events.add_metric([run, kind], float(st["event_counts"].get(kind, 0)))
        yield events


def render_metrics(state: dict) -> bytes:
    """The Prometheus text exposition of one dashboard state."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_StateCollector(state))  # type: ignore[arg-type]
    return generate_latest(registry)
