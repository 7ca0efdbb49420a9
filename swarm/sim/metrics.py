"""What a simulated run reports, and the comparisons between routers."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field


@dataclass
class SimResult:
    """One router on one scenario. Times are simulated seconds."""

    scenario: str
    router: str
    training_time_s: float
    throughput_microbatches_s: float
    gpu_idle_fraction: float
    wasted_compute_fraction: float
    microbatches_lost: int  # microbatches whose gradient at some stage died with a crashed replica
    reexecuted: int  # backward breaks re-run from the last live hop
    iterations: int
    # accounting detail
    injected: int = 0
    completed: int = 0
    in_flight_at_end: int = 0
    rerouted: int = 0  # forward hops re-sent to a replacement peer
    stalls: int = 0  # microbatches that waited for a stage with no live peer
    crashes: int = 0
    joins: int = 0
    averaging_s: float = 0.0  # per iteration, from its end until its last replica step, summed
    protocol_messages: int = 0
    events: int = 0
    # series for the plots (not printed)
    completion_times: list[float] = field(default_factory=list, repr=False)
    churn_times: list[tuple[float, str]] = field(default_factory=list, repr=False)
    flow_snapshot: dict = field(default_factory=dict, repr=False)

    SUMMARY = (
        "training_time_s",
        "throughput_microbatches_s",
        "gpu_idle_fraction",
        "wasted_compute_fraction",
        "microbatches_lost",
        "reexecuted",
        "iterations",
    )

    def summary(self) -> dict[str, float | int]:
        """The headline metrics, rounded for printing."""
        out: dict[str, float | int] = {}
        for key in self.SUMMARY:
            value = getattr(self, key)
            out[key] = round(value, 4) if isinstance(value, float) else value
        return out

    def details(self) -> dict[str, float | int]:
        keep = (
            "injected",
            "completed",
            "in_flight_at_end",
            "rerouted",
            "stalls",
            "crashes",
            "joins",
            "averaging_s",
            "protocol_messages",
            "events",
        )
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items() if k in keep}


def ratios(results: Mapping[str, SimResult]) -> dict[str, float]:
    """gwtf_vs_swarm_time (gwtf time / swarm time: 0.55 means 45% less time) and
    gwtf_vs_oracle_throughput (gwtf throughput / oracle throughput), where both routers ran."""
    out: dict[str, float] = {}
    gwtf = results.get("gwtf")
    if gwtf is None:
        return out
    swarm, oracle = results.get("swarm"), results.get("oracle")
    if swarm is not None and swarm.training_time_s > 0:
        out["gwtf_vs_swarm_time"] = round(gwtf.training_time_s / swarm.training_time_s, 4)
    if oracle is not None and oracle.throughput_microbatches_s > 0:
        out["gwtf_vs_oracle_throughput"] = round(
            gwtf.throughput_microbatches_s / oracle.throughput_microbatches_s, 4
        )
    return out


def throughput_series(times: Sequence[float], end: float, bins: int = 60) -> tuple[list[float], list[float]]:
    """Completed microbatches per second in `bins` equal windows over [0, end]."""
    if end <= 0:
        return [], []
    width = end / bins
    counts = [0] * bins
    for t in times:
        counts[min(int(t / width), bins - 1)] += 1
    return [width * (i + 0.5) for i in range(bins)], [c / width for c in counts]
