"""`swarm bench flow`: JSON figures, churn, and one-line errors for bad input."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cli.main import app
from swarm.flow import cost
from swarm.flow.generate import random_instance
from swarm.flow.instance import instance_from_dict
from swarm.flow.reference import max_flow_value, min_cost_max_flow, with_optimal_demand
from tests.flow.test_instances import GOOD

runner = CliRunner()


def run(*args: str):
    return runner.invoke(app, ["bench", "flow", *args])


def test_random_json() -> None:
    res = run("--random", "--peers", "12", "--stages", "3", "--holders", "2", "--seed", "4", "--json")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    for key in (
        "flow",
        "optimal_flow",
        "max_path_cost",
        "optimal_max_path_cost",
        "mean_path_cost",
        "optimal_mean_path_cost",
        "rounds",
        "messages",
        "messages_per_peer",
        "seconds",
        "routes",
        "bottleneck_stage",
        "reference_seconds",
        "seconds_over_reference",
    ):
        assert key in out
    # wall time also as a ratio to a fixed workload timed in the same run (machines' speed moves)
    assert out["reference_seconds"] > 0
    assert out["seconds_over_reference"] == pytest.approx(out["seconds"] / out["reference_seconds"], abs=0.1)
    assert out["flow"] == pytest.approx(out["optimal_flow"], abs=1e-5)
    assert out["violations"] == 0
    # each holder's share of the flow and its worst path, beside the min-cost flow's split
    shares = out["per_holder"]
    assert sorted(shares) == ["h0", "h1"]
    assert sum(s["flow"] for s in shares.values()) == pytest.approx(out["flow"], abs=1e-5)
    assert sum(s["optimal_flow"] for s in shares.values()) == pytest.approx(out["optimal_flow"], abs=1e-5)
    assert max(s["max_path_cost"] for s in shares.values()) == pytest.approx(out["max_path_cost"], abs=1e-5)
    assert max(s["optimal_max_path_cost"] for s in shares.values()) == pytest.approx(
        out["optimal_max_path_cost"], abs=1e-5
    )
    assert all(0 <= s["flow"] <= s["demand"] + 1e-5 for s in shares.values())
    for mine, whole in (("flow", "mean_path_cost"), ("optimal_flow", "optimal_mean_path_cost")):
        weighted = sum(s[mine] * s[whole] for s in shares.values()) / sum(s[mine] for s in shares.values())
        assert weighted == pytest.approx(out[whole], rel=1e-4)  # the holders' means, flow-weighted


def test_link_capacity_bounds_the_flow(tmp_path) -> None:
    """40 MiB activations: the Iowa-Japan link carries well under the peers' 2 microbatches/s."""
    raw = {**GOOD, "activation_bytes": 40 * 2**20}
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(raw))
    free = json.loads(run("--instance", str(path), "--json").output)
    res = run("--instance", str(path), "--json", "--link-capacity")
    path.write_text(json.dumps({**raw, "link_capacity": True}))
    same = json.loads(run("--instance", str(path), "--json").output)
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    link = instance_from_dict(raw | {"link_capacity": True}).edge_capacity("h0", "p0")
    assert free["flow"] == pytest.approx(2.0)
    assert out["flow"] == pytest.approx(link, abs=1e-5) == same["flow"]
    assert out["optimal_flow"] == pytest.approx(link, abs=1e-5)
    assert link < 1.0 and out["violations"] == 0


def test_instance_file_with_churn(tmp_path) -> None:
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(GOOD))
    res = run("--instance", str(path), "--json", "--churn", "0.5", "--loss", "0.1")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["flow"] == pytest.approx(2.0)
    assert "reconverge_rounds" in out
    # the maximum flow is back (for good) no later than the protocol goes quiet
    assert 0 <= out["flow_restored_rounds"] <= out["reconverge_rounds"]
    assert out["churn"]["flow"] == pytest.approx(out["churn"]["optimal_flow"], abs=1e-5)


LINKED = {
    "stages": 2,
    "activation_bytes": 2**20,
    "holders": [{"id": "h0", "demand": 4.0, "compute_s": 0.01}],
    "peers": [{"id": f"p{i}", "stage": i // 2, "capacity": 2.0, "compute_s": 0.1} for i in range(4)],
    "links": [
        {"a": a, "b": b, "latency_ms": ms, "bandwidth_mb_s": 100}
        for a, b, ms in [
            ("h0", "p0", 5),
            ("h0", "p1", 20),
            ("p0", "p2", 5),
            ("p0", "p3", 30),
            ("p1", "p2", 30),
            ("p1", "p3", 5),
            ("p2", "h0", 5),
            ("p3", "h0", 5),
        ]
    ],
}


def test_churn_on_an_instance_with_a_link_list(tmp_path) -> None:
    """Links given per pair: a leaver's links go with it, a newcomer gets a stage mate's links (it
    used to fail with "link names unknown node")."""
    path = tmp_path / "inst.json"
    path.write_text(json.dumps(LINKED))
    res = run("--instance", str(path), "--json", "--churn", "0.5", "--seed", "3")
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["churn"]["removed"] == out["churn"]["added"] == 2
    assert out["churn"]["flow"] == pytest.approx(out["churn"]["optimal_flow"], abs=1e-5)
    assert out["churn"]["violations"] == 0


def test_plain_text_output() -> None:
    res = run("--random", "--peers", "4", "--stages", "2", "--seed", "1")
    assert res.exit_code == 0
    assert "flow:" in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "exactly one of --instance FILE or --random"),
        (("--random", "--peers", "2", "--stages", "4"), "--peers must be at least --stages"),
        (("--random", "--churn", "1.5"), "--churn must be in [0, 1)"),
        (("--random", "--loss", "-0.1"), "--loss"),
        (("--instance", "/nonexistent/x.json"), "cannot read instance file"),
    ],
)
def test_bad_input(args, message: str) -> None:
    res = run(*args)
    assert res.exit_code != 0
    assert message in res.output
    assert "Traceback" not in res.output


def test_bad_instance_file(tmp_path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**GOOD, "peers": [{**GOOD["peers"][0], "region": "Atlantis"}]}))
    res = run("--instance", str(path))
    assert res.exit_code != 0
    assert "error: " in res.output and "unknown region 'Atlantis'" in res.output
    path.write_text("[1, 2")
    res = run("--instance", str(path))
    assert res.exit_code != 0 and "not valid JSON" in res.output


def test_sweep_prints_the_spread_over_instances_and_refuses_bad_sizes() -> None:
    res = runner.invoke(
        app, ["bench", "flow-sweep", "--instances", "3", "--max-stages", "5", "--max-per-stage", "4"]
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["instances"] == 3
    ratios = out["max_path_over_optimal"]
    assert 0 < ratios["median"] <= ratios["worst"] and 0 <= ratios["within_5pct"] <= 3
    assert out["mean_path_over_optimal"]["worst"] >= 1.0 - 1e-6 and out["rounds_mean"] > 0
    assert out["exact_max_flow"] == 3 and out["flow_over_optimal_worst"] == pytest.approx(1.0)
    assert out["reference_seconds"] > 0 and out["seconds_over_reference"] >= 0
    assert "polish_bound" not in out
    res = runner.invoke(
        app,
        [
            "bench",
            "flow-sweep",
            "--instances",
            "2",
            "--max-stages",
            "5",
            "--max-per-stage",
            "4",
            "--polish-bound",
        ],
    )
    assert res.exit_code == 0, res.output
    bound = json.loads(res.output)["polish_bound"]
    for key in ("max_path_over_optimal_priced", "max_path_over_optimal_unpriced"):
        assert 0 < bound[key]["worst"] and 0 <= bound[key]["within_5pct"] <= 2
    limited = ["--instances", "2", "--max-stages", "4", "--max-per-stage", "4", "--max-holders", "2"]
    res = runner.invoke(app, ["bench", "flow-sweep", *limited, "--link-capacity", "--activation-mb", "10"])
    assert res.exit_code == 0, res.output
    assert 0 < json.loads(res.output)["flow_over_optimal_worst"] <= 1.0 + 1e-6
    res = runner.invoke(app, ["bench", "flow-sweep", *limited[:6], "--timings", "2"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["timings"] == 2 and out["runs"] == 4 and out["exact_max_flow"] == 4
    three = [*limited[:6], "--max-holders", "3"]
    res = runner.invoke(app, ["bench", "flow-sweep", *three, "--shared-plan-bound"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    shared = out["shared_plan_bound"]
    for kind in ("plans", "moves"):  # (never above the protocol's own routes)
        worst = shared[f"max_path_over_optimal_{kind}"]["worst"]
        assert 0 < worst <= out["max_path_over_optimal"]["worst"] + 1e-3
        assert 0 <= shared[f"mean_path_over_optimal_{kind}"]["within_10pct"] <= 2
    bad_args = (["--instances", "0"], ["--max-stages", "2"], ["--max-holders", "0"], ["--activation-mb", "0"])
    res = runner.invoke(app, ["bench", "flow-sweep", *three, "--chain-bound"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    chained = out["chain_bound"]
    for key in ("max_path_over_optimal", "max_path_over_optimal_hand_overs"):  # (never above the protocol's)
        assert 0 < chained[key]["worst"] <= out["max_path_over_optimal"]["worst"] + 1e-9
    assert chained["chains_per_run_mean"] >= 0 and 0 <= chained["mean_path_over_optimal"]["within_10pct"] <= 2
    bad_args += (["--timings", "0"], ["--shared-plan-bound", "--link-capacity"])
    bad_args += (["--chain-bound", "--link-capacity"],)
    for bad in bad_args:
        res = runner.invoke(app, ["bench", "flow-sweep", *bad])
        assert res.exit_code != 0 and "Traceback" not in res.output


@pytest.mark.parametrize("demand", [[], ["--optimal-demand"]], ids=["demand", "optimal-demand"])
def test_sweep_names_its_misses_with_a_command_that_runs_each_again(demand: list[str]) -> None:
    """Several holders on small instances: some runs miss the path figures (docs/routing.md,
    "Several holders without link limits"), also when each holder asks for its share of the
    optimum; each is named, and its command gives the same figures."""
    args = ["--instances", "6", "--max-stages", "5", "--max-per-stage", "6", "--max-holders", "4"]
    args += ["--seed", "3", *demand]
    res = runner.invoke(app, ["bench", "flow-sweep", *args])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    misses = out["misses"]
    max_path, mean_path = out["max_path_over_optimal"], out["mean_path_over_optimal"]
    for within in (max_path["within_5pct"], mean_path["within_10pct"]):
        assert out["runs"] - within <= len(misses) <= out["runs"]  # every run outside a figure is named
    assert misses, "this sweep has runs above the figures (a change that fixes them may pick another)"
    tallies = out["by_holders"].values()
    assert sum(t["runs"] for t in tallies) == out["runs"]
    assert sum(t["max_path_within_5pct"] for t in tallies) == max_path["within_5pct"]
    assert sum(t["mean_path_within_10pct"] for t in tallies) == mean_path["within_10pct"]
    assert sum(t["exact_max_flow"] for t in tallies) == out["exact_max_flow"]
    assert {str(m["holders"]) for m in misses} <= set(out["by_holders"])
    miss = misses[0]
    command = miss["command"].split()
    assert command[:3] == ["swarm", "bench", "flow"] and f"--holders {miss['holders']}" in miss["command"]
    assert ("--optimal-demand" in command) == bool(demand)
    again = json.loads(runner.invoke(app, command[1:]).output)
    assert again["max_path_cost"] / again["optimal_max_path_cost"] == pytest.approx(
        miss["max_path_over_optimal"], abs=1e-3
    )
    assert again["mean_path_cost"] / again["optimal_mean_path_cost"] == pytest.approx(
        miss["mean_path_over_optimal"], abs=1e-3
    )


def test_optimal_demand_hands_every_holder_its_share_of_the_optimum() -> None:
    """The diagnostic keeps the maximum flow and the minimum cost; the bench routes with it and
    compares with the instance's own optimum; it refuses --churn (the split is the one before it)."""
    inst = random_instance(20, 4, 3, 7)
    optimal = min_cost_max_flow(inst)
    handed = with_optimal_demand(inst, optimal)
    for before, after in zip(inst.holders, handed.holders, strict=True):
        share = cost.flow_value({before.id: optimal[before.id]})
        assert after.demand == pytest.approx(min(before.demand, share)) and after.demand <= before.demand
    assert max_flow_value(handed) == pytest.approx(max_flow_value(inst), rel=1e-6)
    assert cost.total_cost(handed, min_cost_max_flow(handed)) == pytest.approx(
        cost.total_cost(inst, optimal), rel=1e-6
    )
    args = ["bench", "flow", "--random", "--peers", "20", "--stages", "4", "--holders", "3", "--seed", "7"]
    res = runner.invoke(app, [*args, "--optimal-demand", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["flow"] == pytest.approx(out["optimal_flow"], rel=1e-6)
    assert out["optimal_max_path_cost"] == pytest.approx(cost.max_path_cost(inst, optimal), rel=1e-6)
    for h in handed.holders:
        assert out["per_holder"][h.id]["demand"] == pytest.approx(h.demand, abs=1e-6)
    res = runner.invoke(app, [*args, "--optimal-demand", "--churn", "0.2"])
    assert res.exit_code != 0 and "--optimal-demand" in res.output


def test_flow_events_prints_per_event_costs_per_shape_and_refuses_bad_shapes() -> None:
    """Single crashes and joins on converged swarms: every event ends at the exact maximum with
    consistent edges, and the figures name the shape, the neighbourhood and the growth."""
    res = runner.invoke(app, ["bench", "flow-events", "--shapes", "3x4,6x4", "--events", "4"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    small, deep = out["rows"]
    assert (small["stages"], deep["stages"]) == (3, 6) and small["events"] == 4
    for row in (small, deep):
        assert row["exact_after_event"] == 4 and row["valid_after_event"] == 4
        assert 0 < row["event_messages_median"] <= row["event_messages_max"]
        assert row["neighbours_per_peer"] > 0 and row["setup_messages_per_peer"] > 0
    assert out["swarm_growth"] == pytest.approx(deep["peers"] / small["peers"], abs=0.01)
    assert out["event_messages_per_peer_growth"] > 0 and out["seconds_over_reference"] >= 0
    res = runner.invoke(
        app, ["bench", "flow-events", "--shapes", "3x4", "--events", "2", "--holders", "2", "--link-capacity"]
    )
    assert res.exit_code == 0, res.output
    row = json.loads(res.output)["rows"][0]
    assert row["holders"] == 2 and row["link_capacity"] and row["valid_after_event"] == 2
    bad_args = (["--shapes", "8by8"], ["--shapes", "1x8"], ["--shapes", "4x1"], ["--events", "0"])
    bad_args += (["--holders", "0"],)
    for bad in bad_args:
        res = runner.invoke(app, ["bench", "flow-events", *bad])
        assert res.exit_code != 0 and "error: " in res.output and "Traceback" not in res.output
