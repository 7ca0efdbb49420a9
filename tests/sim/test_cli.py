"""`swarm sim` as a user runs it (subprocess): JSON output, figures, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

SMALL = {
    "name": "cli-small",
    "model": "gpt-500m",
    "stages": 2,
    "peers": {"count": 6, "regions": ["Iowa", "Germany"], "gpus": {"A100-80GB": 1, "T4": 1}},
    "holders": {"regions": ["Iowa"]},
    "churn": {"failure_rate_per_hour": 5.0},
    "training": {"iterations": 3, "global_batch": 8},
}


def swarm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "cli.main", "sim", *args], capture_output=True, text=True, timeout=300
    )


def test_json_output_and_figures(tmp_path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SMALL))
    figures = str(tmp_path / "f")
    out = swarm("--scenario", str(path), "--router", "gwtf", "--seed", "2", "--json", "--plot", figures)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)["scenarios"][0]
    assert report["scenario"] == "cli-small" and report["seed"] == 2
    gwtf = report["results"]["gwtf"]
    for key in (
        "training_time_s",
        "throughput_microbatches_s",
        "gpu_idle_fraction",
        "wasted_compute_fraction",
        "microbatches_lost",
        "reexecuted",
        "iterations",
    ):
        assert key in gwtf
    assert gwtf["iterations"] == 3 and gwtf["completed"] == 24
    pngs = sorted(p.name for p in (tmp_path / "f").iterdir())
    assert "training-time.png" in pngs and "throughput-cli-small.png" in pngs
    assert "flow-cli-small-gwtf.png" in pngs


def test_plot_at_picks_the_flow_graphs_moment_of_a_time_limited_run(tmp_path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({**SMALL, "churn": {}}))
    figures = tmp_path / "f"
    out = swarm(
        "-s", str(path), "--router", "swarm", "--hours", "0.01", "--plot", str(figures), "--plot-at", "5"
    )
    assert out.returncode == 0, out.stderr
    assert (figures / "flow-cli-small_0.01h-swarm.png").stat().st_size > 0


def test_text_output_for_two_routers(tmp_path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(
        'model = "gpt-500m"\nstages = 2\n[peers]\ncount = 4\n[training]\niterations = 2\nglobal_batch = 4\n'
    )
    out = swarm("-s", str(path), "--router", "oracle")
    assert out.returncode == 0, out.stderr
    assert "oracle" in out.stdout and "training_time_s=" in out.stdout


def test_progress_goes_to_stderr_and_leaves_the_json_alone(tmp_path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SMALL))
    out = swarm("--scenario", str(path), "--router", "gwtf", "--json", "--progress")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["scenarios"][0]["scenario"] == "cli-small"
    lines = out.stderr.strip().splitlines()
    assert lines[0].startswith("cli-small / gwtf: routing setup, protocol time")
    assert lines[-1].startswith("cli-small / gwtf: done, simulated") and "iteration 3 of 3" in lines[-1]
    quiet = swarm("--scenario", str(path), "--router", "gwtf", "--json", "--no-progress")
    assert quiet.returncode == 0 and quiet.stderr == "" and quiet.stdout == out.stdout


def test_user_errors_are_one_line(tmp_path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"model": "gpt-500m", "stages": 2, "peers": {"count": 4, "regions": ["Mars"]}}')
    cases = [
        (["--scenario", str(bad)], "unknown region 'Mars'"),
        (["--scenario", "no-such-scenario"], "unknown scenario 'no-such-scenario'"),
        (["--scenario", "homogeneous-single-region", "--router", "best"], "unknown router 'best'"),
        (["--scenario", "homogeneous-single-region", "--model", "gpt-9"], "unknown model preset 'gpt-9'"),
        ([], "give a scenario"),
        (["-s", "homogeneous-single-region", "--holder-demand", "lots"], "--holder-demand must be one"),
        (["-s", "homogeneous-single-region", "--plot-at", "-3"], "--plot-at must be a number of simulated"),
    ]
    for args, message in cases:
        out = swarm(*args)
        assert out.returncode != 0
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], lines
        assert "Traceback" not in out.stderr


def test_list_names_every_builtin() -> None:
    out = swarm("--list")
    assert out.returncode == 0
    assert "geo-10-regions-high-churn:llama-1.5b" in out.stdout.split()


def test_overrides_for_a_scale_run() -> None:
    from cli.sim import _override
    from swarm.sim.scenario import builtin_scenario

    sc = _override(builtin_scenario("geo-10-regions-high-churn"), "gpt-1.5b", 1000, 16, 1.0)
    assert (sc.peer_count, sc.stages, sc.max_time_s, sc.model.name) == (1000, 16, 3600.0, "gpt-1.5b")
    assert sc.name == "geo-10-regions-high-churn:gpt-1.5b:1000p:16s:1h" and sc.iterations >= 10**9


def test_a_long_gwtf_run_is_announced_before_it_starts() -> None:
    from cli.sim import gwtf_scale_warning

    assert gwtf_scale_warning(1000, ("gwtf", "swarm", "oracle")) is not None
    assert gwtf_scale_warning(1000, ("swarm",)) is None
    assert gwtf_scale_warning(80, ("gwtf",)) is None
