"""How busy GPUs are, on the dashboard: a real server whose NVML is FakeNvml (tests/fakes), its
GPU map shaded by utilization and a job's page with its figures, chart and idle badge."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.dashboard.browser import tab
from tests.dashboard.test_job_page import fact
from tests.server import Api, fake_nvml_server, wait_for


def test_the_gpu_map_and_job_page_show_utilization_and_idleness(
    browser: Any, tmp_path: Path
) -> None:
    with fake_nvml_server(tmp_path) as (server, state):
        api = Api(server)
        notify = {"after": "1s", "below": 5, "action": "notify"}
        api.submit(name="train", gpus=2, command=["sleep", "600"])
        api.submit(name="nap", gpus=1, idle=notify, command=["sleep", "600"])
        busy = [g for w in api.until("train", "running")["placement"] for g in w["gpus"]]
        (nap,) = [g for w in api.until("nap", "running")["placement"] for g in w["gpus"]]
        gpus = {busy[0]: {"busy": 90}, busy[1]: {"busy": 70}, nap: {"busy": 0}}
        state.write_text(json.dumps({"preset": "dgx1-v100", "gpus": gpus}))
        wait_for(lambda: (api.job("nap").get("activity") or {}).get("idle_notice"), "nap idle")
        with tab(browser, server.url, server.token) as t:
            t.open("#/cluster")
            cell = t.page.locator(f"#nodes button.gpu[data-gpu='{busy[0]}']")
            t.page.wait_for_selector(f"#nodes button.gpu[data-gpu='{busy[0]}'][data-busy='90']")
            assert "90% busy" in (cell.get_attribute("title") or "")
            assert "--busy:90" in (cell.get_attribute("style") or "")
            free = t.page.locator("#nodes button.gpu[data-job='']").first
            assert free.get_attribute("data-busy") == "0"  # NVML samples free GPUs too
            t.open("#/job/train")
            t.page.wait_for_function(
                "() => document.querySelector(\"dd[data-fact='busy']\").textContent"
                ".startsWith('80% busy now')"
            )
            t.page.wait_for_selector("#job-activity svg path", state="attached")  # flat: no height
            assert "GPUs busy (%)" in t.page.inner_text("#job-activity")
            t.page.goto(f"{server.url}/#/job/nap")
            t.ready("#/job/nap")
            assert t.page.inner_text("#job-state .state.idle") == "idle"
            assert "idle since" in fact(t, "busy")
            assert "idle: its GPUs stayed below 5% busy for 1s" in fact(t, "now")
            t.page.goto(f"{server.url}/#/queue")
            t.ready("#/queue")
            assert t.page.locator("#running tr[data-job=nap] .state.idle").count() == 1
            assert t.page.locator("#running tr[data-job=train] .state.idle").count() == 0
            assert t.unexpected_errors() == []


def test_the_gpu_map_shows_a_shared_gpu_with_its_holders_and_their_shares(
    browser: Any, server: Any
) -> None:
    api = Api(server)
    api.submit(name="qa", gpu_fraction=0.25, command=["sleep", "600"])
    api.submit(name="qb", gpu_fraction=0.25, command=["sleep", "600"])
    (gpu,) = [g for w in api.until("qa", "running")["placement"] for g in w["gpus"]]
    assert [g for w in api.until("qb", "running")["placement"] for g in w["gpus"]] == [gpu]
    with tab(browser, server.url, server.token) as t:
        t.open("#/cluster")
        cell = t.page.locator(f"#nodes button.gpu.shared[data-gpu='{gpu}']")
        cell.wait_for()
        assert "shared: qa 0.25, qb 0.25 (0.5 left)" in (cell.get_attribute("title") or "")
        assert cell.inner_text().endswith("2 shares")
        assert t.page.locator("#nodes button.gpu.shared").count() == 1
        assert t.unexpected_errors() == []
