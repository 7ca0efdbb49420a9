"""PNG figures of simulated runs (matplotlib, Agg backend). The only file of swarm/sim that writes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from swarm.sim.metrics import SimResult, throughput_series


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_throughput(results: Mapping[str, SimResult], path: Path) -> Path:
    """Completed microbatches per second over time, one line per router, crashes and joins marked."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.5))
    end = max((r.training_time_s for r in results.values()), default=0.0)
    for name, res in results.items():
        xs, ys = throughput_series(res.completion_times, res.training_time_s, bins=80)
        ax.plot(xs, ys, label=f"{name} ({res.training_time_s:.0f} s)")
    first = next(iter(results.values()), None)
    if first is not None:
        for t, what in first.churn_times:
            if t <= end:
                ax.axvline(t, color="red" if what == "crash" else "green", alpha=0.25, lw=0.8)
    ax.set_xlabel("simulated time (s)   [red: crash, green: join]")
    ax.set_ylabel("microbatches / s")
    ax.set_title(f"throughput over time: {first.scenario if first else ''}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_training_times(table: Mapping[str, Mapping[str, SimResult]], path: Path) -> Path:
    """Training time per scenario (groups) and router (bars)."""
    plt = _pyplot()
    scenarios = list(table)
    routers = list(dict.fromkeys(r for row in table.values() for r in row))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(scenarios) + 2), 4.5))
    width = 0.8 / max(len(routers), 1)
    for i, router in enumerate(routers):
        xs = [j + i * width for j in range(len(scenarios))]
        ys = [table[s][router].training_time_s if router in table[s] else 0.0 for s in scenarios]
        ax.bar(xs, ys, width, label=router)
    ax.set_xticks([j + width * (len(routers) - 1) / 2 for j in range(len(scenarios))])
    ax.set_xticklabels(scenarios, rotation=20, ha="right", fontsize=8)
    ax.set_ylabel("training time (simulated s)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_flow_graph(result: SimResult, path: Path) -> Path:
    """The microbatch traffic of one iteration mid-run: holders left, stages left to right, peers
    colored by region, edge width by microbatches carried."""
    plt = _pyplot()
    snap = result.flow_snapshot
    fig, ax = plt.subplots(figsize=(10, 6))
    nodes: dict[str, list] = snap.get("nodes", {})
    regions = sorted({r for _, r in nodes.values()})
    cmap = plt.get_cmap("tab20")
    color = {r: cmap(i % 20) for i, r in enumerate(regions)}
    stages = max((s for s, _ in nodes.values()), default=0) + 1
    pos: dict[str, tuple[float, float]] = {}
    for stage in range(-1, stages):
        members = sorted(n for n, (s, _) in nodes.items() if s == stage)
        for i, n in enumerate(members):
            pos[n] = (stage + 1 if stage >= 0 else 0, (i + 0.5) / max(len(members), 1))
    holders = [n for n, (s, _) in nodes.items() if s < 0]
    edges = snap.get("edges", {})
    top = max(edges.values(), default=1)
    for key, count in edges.items():
        a, b = key.split(">")
        if a not in pos or b not in pos:
            continue
        (x0, y0), (x1, y1) = pos[a], pos[b]
        if b in holders:
            x1 = stages + 1  # the return to the holder is drawn on the right
        ax.plot([x0, x1], [y0, y1], color="grey", alpha=0.5, lw=0.3 + 3.0 * count / top)
    for n, (x, y) in pos.items():
        ax.scatter([x], [y], s=40 if n in holders else 14, color=color[nodes[n][1]], zorder=3)
    for r in regions:
        ax.scatter([], [], color=color[r], label=r)
    ax.set_xticks(range(stages + 2))
    ax.set_xticklabels(["holders", *(f"s{s}" for s in range(stages)), "holders"], fontsize=8)
    ax.set_yticks([])
    ax.set_title(f"{result.router} traffic at t={snap.get('t', 0):.0f} s ({result.scenario})")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_figures(table: Mapping[str, Mapping[str, SimResult]], directory: Path) -> list[Path]:
    """All figures for a set of runs: per scenario throughput and flow graphs, one time chart."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for scenario, results in table.items():
        safe = scenario.replace(":", "_").replace("/", "_")
        out.append(plot_throughput(results, directory / f"throughput-{safe}.png"))
        for router, res in results.items():
            if res.flow_snapshot:
                out.append(plot_flow_graph(res, directory / f"flow-{safe}-{router}.png"))
    out.append(plot_training_times(table, directory / "training-time.png"))
    return out
