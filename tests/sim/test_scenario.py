"""Scenario files and built-ins: bad input gets one clear line."""

from __future__ import annotations

import json

import pytest

from swarm.sim.hardware import PRESETS, gpu_table
from swarm.sim.scenario import (
    BUILTIN,
    ScenarioError,
    builtin_names,
    builtin_scenario,
    load_scenario_file,
    resolve_scenario,
)

GOOD = {"model": "gpt-500m", "stages": 4, "peers": {"count": 8}}


def test_every_builtin_parses_for_every_preset() -> None:
    names = builtin_names()
    assert {
        "homogeneous-single-region",
        "heterogeneous-single-region",
        "geo-10-regions-no-churn",
        "geo-10-regions-low-churn",
        "geo-10-regions-high-churn",
    } <= set(BUILTIN)
    for name in names:
        sc = builtin_scenario(name)
        assert sc.stages <= sc.model.layers
    high = builtin_scenario("geo-10-regions-high-churn:llama-1.5b")
    assert high.model.name == "llama-1.5b" and high.failure_rate_h == pytest.approx(0.33)
    assert len(high.regions) == 10


def test_presets_have_the_advertised_sizes() -> None:
    sizes = {name: spec.total_params / 1e9 for name, spec in PRESETS.items()}
    assert 0.45 < sizes["gpt-500m"] < 0.6 and 0.45 < sizes["llama-500m"] < 0.6
    assert 1.3 < sizes["gpt-1.5b"] < 1.7 and 1.3 < sizes["llama-1.5b"] < 1.7
    assert PRESETS["gpt-500m"].activation_bytes == 4 * 1024 * 1280 * 2
    assert {"H100-SXM", "A100-40GB", "A100-80GB", "L4", "RTX-4090", "RTX-3090", "T4"} <= set(gpu_table())


def test_json_and_toml_files(tmp_path) -> None:
    js = tmp_path / "a.json"
    js.write_text(json.dumps(GOOD))
    assert load_scenario_file(js).name == "a"
    toml = tmp_path / "b.toml"
    toml.write_text(
        'model = "llama-500m"\nstages = 2\n[peers]\ncount = 4\ngpus = "T4"\n[churn]\n'
        "failure_rate_per_hour = 0.1\n"
    )
    sc = resolve_scenario(str(toml))
    assert sc.model.name == "llama-500m" and sc.join_rate_h == pytest.approx(0.1)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"stages": 99}, "stages: 99 stages but the model has only 24 layers"),
        ({"model": "gpt-7t"}, "unknown model preset 'gpt-7t'"),
        ({"colour": 1}, "scenario: unknown key 'colour'"),
        ({"peers": {"count": 0}}, "peers: 'count' must be an integer >= 1, got 0"),
        ({"peers": {"count": 4, "regions": ["Mars"]}}, "unknown region 'Mars'"),
        ({"peers": {"count": 4, "gpus": {"TPU": 1}}}, "unknown GPU 'TPU'"),
        ({"peers": [{"gpu": "T4", "region": "Iowa", "stage": 7}]}, "peers[0]: stage 7 outside 0..3"),
        ({"churn": {"failure_rate_per_hour": 0.3, "join_rate_per_hour": 0}}, "needs join_rate_per_hour > 0"),
        ({"churn": {"failure_rate_per_hour": -1}}, "'failure_rate_per_hour' must be a number >= 0"),
        ({"mfu": 2}, "'mfu' must be in (0, 1]"),
        ({"training": {"max_time_s": 0}}, "'max_time_s' must be positive"),
        ({"model": {"layers": 4, "hidden": "big"}}, "'hidden' must be a positive integer"),
        ({"averaging": "gossip"}, "'averaging' must be one of direct, ring, got 'gossip'"),
        ({"holder_demand": "more"}, "'holder_demand' must be one of all, adaptive, got 'more'"),
        ({"link_capacity": "yes"}, "'link_capacity' must be true or false, got 'yes'"),
        ({"flow_graph_at_s": -5}, "'flow_graph_at_s' must be a number >= 0, got -5"),
        ({"flow_graph_at_s": "soon"}, "'flow_graph_at_s' must be a number >= 0, got 'soon'"),
    ],
)
def test_bad_scenarios_say_what_is_wrong(change, message) -> None:
    from swarm.sim.scenario import scenario_from_dict

    with pytest.raises(ScenarioError) as err:
        scenario_from_dict({**GOOD, **change})
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_bad_files(tmp_path) -> None:
    with pytest.raises(ScenarioError, match="cannot read scenario file"):
        load_scenario_file(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{")
    with pytest.raises(ScenarioError, match="not valid JSON"):
        load_scenario_file(bad)
    bad_toml = tmp_path / "bad.toml"
    bad_toml.write_text("x = = 1")
    with pytest.raises(ScenarioError, match="not valid TOML"):
        load_scenario_file(bad_toml)
    with pytest.raises(ScenarioError, match="scenario is missing 'model'"):
        bad.write_text("{}")
        load_scenario_file(bad)
    with pytest.raises(ScenarioError, match="unknown scenario 'nope'"):
        resolve_scenario("nope")
    with pytest.raises(ScenarioError, match="unknown model preset 'x'"):
        resolve_scenario("geo-10-regions-high-churn:x")
