"""The dashboard against a real local swarm, read over the DHT, and in a real headless Chromium.

One swarm for the whole module (`swarm train --local-swarm 3` plus a volunteer named with an XSS
payload), three dashboards (the live run, a run id with nothing on the DHT, a dead DHT address),
and every process (volunteers, p2pd daemons) is ended and checked gone at teardown.
"""

from __future__ import annotations

import os
import shutil
import urllib.request
from pathlib import Path

import pytest
from dashboard_helpers import DEAD_PEER, XSS_NAME, Procs, dashboard, http_json, maddr_of, wait_for
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.slow
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
TITLE = "swarm dashboard"
NAMES = {"local-0", "local-1", "local-2", XSS_NAME}


def _complete(state: dict) -> dict | None:
    """The state once every peer is listed and the flow is routed end to end, with a loss curve."""
    names = {p["name"] for s in state["stages"] for p in s["peers"]}
    kinds = {(e["from"].split(":")[0], e["to"].split(":")[0]) for e in state["flow"]["edges"]}
    done = (
        state["status"] == "ok"
        and names == NAMES
        and len(state["holders"]) == 1
        and {("src", "peer"), ("peer", "sink")} <= kinds
        and len(state["loss_curve"]) >= 2
    )
    return state if done else None


@pytest.fixture(scope="module")
def swarm(tmp_path_factory):
    logs = tmp_path_factory.mktemp("dashboard-live")
    procs = Procs(logs)
    try:
        train = procs.start("train", [
            "cli.main", "train", "--local-swarm", "3", "--stages", "3", "--iterations", "100000",
            "--model", "gpt2-tiny", "--batch-size", "8", "--microbatch-size", "2", "--seq-len", "32",
            "--log-dir", str(logs / "peers"),
        ])  # fmt: skip
        maddr = maddr_of(train)
        urls = {
            "empty": dashboard(procs, "dash-empty", maddr, run="nothing-here"),
            "dead": dashboard(procs, "dash-dead", DEAD_PEER),
        }
        join = ["cli.main", "join", "--initial-peers", maddr, "--run", "swarm", "--stage", "0"]
        procs.start("xss", [*join, "--name", XSS_NAME])
        urls["live"] = dashboard(procs, "dash-live", maddr)
        state = wait_for(
            lambda: _complete(http_json(urls["live"] + "/api/v1/state")),
            150,
            "every peer and the routed flow on the dashboard",
            interval=1.0,
        )
        yield {"urls": urls, "state": state, "logs": logs}
    finally:
        procs.stop_all()


def test_api_lists_every_peer_with_stage_throughput_and_flow(swarm) -> None:
    state = swarm["state"]
    assert state["run"]["num_stages"] == 3 and state["health"]["ok"]
    for stage in state["stages"]:
        assert stage["peers"], f"stage {stage['stage']} has no peer"
        for p in stage["peers"]:
            assert p["stage"] == stage["stage"] and p["throughput"] > 0 and p["state"] == "serving"
    xss = [p for s in state["stages"] for p in s["peers"] if p["name"] == XSS_NAME]
    assert len(xss) == 1 and xss[0]["stage"] == 0
    nodes = {n["id"]: n["column"] for n in state["flow"]["nodes"]}
    for e in state["flow"]["edges"]:
        assert e["rate"] > 0 and nodes[e["to"]] == nodes[e["from"]] + 1
    assert state["progress"]["iteration"] >= 1 and state["progress"]["tokens_per_s"] > 0

    with urllib.request.urlopen(swarm["urls"]["live"] + "/metrics", timeout=5) as r:
        text = r.read().decode()
    samples = {
        (s.name, s.labels.get("stage")): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }
    assert sum(v for (name, _), v in samples.items() if name == "swarm_stage_peers") == 4
    assert samples[("swarm_stage_peers", "0")] == 2 and samples[("swarm_up", None)] == 1
    assert samples[("swarm_iteration", None)] >= 1 and ("swarm_loss", None) in samples


@pytest.fixture(scope="module")
def browser():
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        if os.environ.get("CI"):
            pytest.fail("Debian's chromium and chromium-driver are missing (.ci/run installs them)")
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run",
        "--disable-dev-shm-usage", "--window-size=1400,1400",
    ):  # fmt: skip
        opts.add_argument(flag)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    # Any alert() (an injected onerror handler) would set this flag instead of blocking the page.
    driver.execute_cdp_cmd(
        "Page.addScriptToEvaluateOnNewDocument",
        {"source": "window.alert = function () { window.__xss = true; };"},
    )
    try:
        yield driver
    finally:
        driver.quit()


def console_errors(driver) -> list[dict]:
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def js(driver, script: str):
    return driver.execute_script(script)


RENDERED = """
const line = document.getElementById('loss-line');
return {
  ready: document.body.dataset.ready === 'true',
  lossPoints: line ? line.getAttribute('points').trim().split(' ').length : 0,
  edges: document.querySelectorAll('#flow-graph path.edge').length,
  nodes: document.querySelectorAll('#flow-graph g.node').length,
  stages: document.querySelectorAll('#stages .stage').length,
  rows: document.querySelectorAll('#stages tr.peer-row').length,
  iteration: document.getElementById('iteration').textContent,
};
"""


def test_browser_renders_live_swarm(swarm, browser, tmp_path: Path) -> None:
    browser.get(swarm["urls"]["live"])
    seen = wait_for(
        lambda: (r := js(browser, RENDERED))["ready"] and r["lossPoints"] >= 2 and r["edges"] >= 4 and r,
        30,
        "the page to render live data",
    )
    assert seen["stages"] == 3 and seen["rows"] == 4 and seen["nodes"] >= 6  # 4 peers + holder twice
    first = int(seen["iteration"])
    wait_for(lambda: int(js(browser, RENDERED)["iteration"]) > first, 30, "a live update without reload")
    cells = js(browser, "return [...document.querySelectorAll('#stages td')].map(td => td.textContent)")
    assert {"local-0", "local-1", "local-2", XSS_NAME} <= set(cells)
    assert js(browser, "return document.getElementById('health').dataset.ok") == "true"
    assert js(browser, "return document.querySelector('#stages .stage.bottleneck') !== null")

    # The XSS name is text: no element was made from it, no handler ran, the title is untouched.
    assert js(browser, "return document.querySelectorAll('img').length") == 0
    assert js(browser, "return window.__xss === undefined") and browser.title == TITLE
    assert console_errors(browser) == []

    shot = tmp_path / "dashboard-live.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 20_000
    if os.environ.get("SWARM_DASHBOARD_SHOT"):  # how docs/dashboard.png is made
        shutil.copy(shot, os.environ["SWARM_DASHBOARD_SHOT"])


@pytest.mark.parametrize(
    ("which", "status", "title"),
    [("empty", "no_run", "No such run on the DHT"), ("dead", "unreachable", "DHT unreachable")],
)
def test_browser_empty_states(swarm, browser, which: str, status: str, title: str, tmp_path: Path) -> None:
    url = swarm["urls"][which]
    state = wait_for(
        lambda: (s := http_json(url + "/api/v1/state"))["status"] == status and s, 60, f"status {status}"
    )
    assert state["stages"] == [] and state["message"]
    browser.get(url)
    shown = wait_for(
        lambda: js(
            browser,
            "const e = document.getElementById('empty-state');"
            "return !e.hidden && e.dataset.status + '|' + document.getElementById('empty-title').textContent",
        ),
        20,
        "the empty state",
    )
    assert shown == f"{status}|{title}"
    assert js(browser, "return document.getElementById('content').hidden") is True
    assert browser.title == TITLE and console_errors(browser) == []
    browser.save_screenshot(str(tmp_path / f"dashboard-{which}.png"))
