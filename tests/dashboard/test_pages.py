"""The dashboard in headless Chromium against a real server on an emulated DGX-1: what the
pages show is compared with what the API answers."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tests.dashboard.browser import WIDTHS, Tab, publish, tab
from tests.server import Api, ServerProcess, wait_for, worker

# What Chromium logs for a refused request: expected where a test makes the API refuse.
REFUSED = "the server responded with a status of 403"
RESERVED = re.compile(r"reserved (\S+) GPUs (\d+(?:,\d+)*)")


def team_token(api: Api, user: str, team: str) -> str:
    reply = api.http.post("/api/v1/tokens", json={"user": user, "team": team})
    assert reply.status_code == 201, reply.text
    return str(reply.json()["token"])


def gpu_map(api: Api) -> dict[tuple[str, int], str]:
    return {
        (node["name"], gpu["index"]): gpu["job"] or ""
        for node in api.get("/api/v1/nodes")["nodes"]
        for gpu in node["gpus"]
    }


def drawn_map(t: Tab, where: str = "#nodes") -> dict[tuple[str, int], str]:
    read = "els => els.map(e => [e.dataset.node, +e.dataset.gpu, e.dataset.job])"
    cells = t.page.eval_on_selector_all(f"{where} button.gpu", read)
    return {(node, gpu): job for node, gpu, job in cells}


def reserved(reason: str) -> list[tuple[str, int]]:
    """The GPUs a waiting job's reason says are reserved for it."""
    found = RESERVED.search(reason)
    assert found is not None, reason
    return [(found.group(1), int(g)) for g in found.group(2).split(",")]


def listed(t: Tab, rows: str) -> list[str]:
    """The jobs of the table rows that `rows` selects, top to bottom."""
    names: list[str] = t.page.locator(rows).evaluate_all("rs => rs.map(r => r.dataset.job)")
    return names


def polled(t: Tab, times: int) -> None:
    """Wait until the page has polled `times` more times (each poll asks /api/v1/health)."""
    for _ in range(times):
        with t.page.expect_request(lambda r: r.url.endswith("/api/v1/health"), timeout=5000):
            pass


def busy_cluster(server: ServerProcess, tmp: Path) -> tuple[Api, dict[str, str]]:
    """Team vision runs `train` (2 x 2 GPUs), team speech `asr` (1 x 2), and the admin's
    `big` (4 GPUs) waits with a reservation. Returns the admin's API and the team tokens."""
    api = Api(server)
    users = {"vision": "ann", "speech": "bob"}
    tokens = {team: team_token(api, user, team) for team, user in users.items()}
    out = tmp / "out"
    out.mkdir()
    Api(server, tokens["vision"]).submit(name="train", workers=2, gpus=2, **worker(out, "go-train"))
    Api(server, tokens["speech"]).submit(name="asr", workers=1, gpus=2, **worker(out, "go-asr"))
    api.until("train", "running")
    api.until("asr", "running")
    api.submit(name="big", workers=1, gpus=4, **worker(out, "go-big"))
    wait_for(lambda: RESERVED.search(api.job("big")["reason"]), "big to reserve GPUs")
    return api, tokens


def test_sign_in_then_the_gpu_map_matches_the_api(
    browser: Any, server: ServerProcess, tmp_path: Path
) -> None:
    api, _ = busy_cluster(server, tmp_path)
    with tab(browser, server.url) as t:
        t.page.goto(server.url + "/")
        t.page.fill("#signin input[name=token]", "tsk_not-a-token")
        t.page.click("#signin button[type=submit]")
        t.page.wait_for_selector("#signin .refused")
        assert "unknown token" in t.page.inner_text("#signin .refused")
        t.page.fill("#signin input[name=token]", server.token)
        t.page.click("#signin button[type=submit]")
        t.ready("#/cluster")
        assert "admin" in t.page.inner_text("#who")
        wait_for(lambda: drawn_map(t) == gpu_map(api), "the drawn GPU map to match the API's")
        drawn = drawn_map(t)
        assert sorted(g for g, job in drawn.items() if job == "train") == sorted(
            ("node-a", g) for w in api.job("train")["placement"] for g in w["gpus"]
        )
        marked = t.page.eval_on_selector_all(
            "#nodes button.gpu.reserved", "els => els.map(e => [e.dataset.node, +e.dataset.gpu])"
        )
        assert sorted(map(tuple, marked)) == reserved(api.job("big")["reason"])
        # The node's GPU type and the CPUs and memory its workers hold, as the API says.
        (node,) = api.get("/api/v1/nodes")["nodes"]
        cpus = f"CPUs {node['cpus_used'] // 1000}/{node['cpus'] // 1000} used"
        assert t.page.inner_text("#nodes header .hw").startswith(f"V100 16 GiB · {cpus} · memory")
        # Tapping a GPU names its job and the job's team.
        t.page.click("#nodes button.gpu[data-job=asr]")
        assert "job asr, team speech" in t.page.inner_text("#gpu-info")
        # The link matrix shows GB/s: on a DGX-1, GPUs 0 and 3 share two NVLinks (2 x 25).
        cell = t.page.locator("table.heat tbody tr").nth(0).locator("td").nth(3)
        assert cell.inner_text() == "50"
        t.shot(tmp_path / "screenshots", "cluster")
        assert t.unexpected_errors("status of 401") == []  # the bad token's refusal
        assert t.outside == []


def test_a_waiting_job_shows_its_reason_and_blockers(
    browser: Any, server: ServerProcess, tmp_path: Path
) -> None:
    api, _ = busy_cluster(server, tmp_path)
    with tab(browser, server.url, server.token) as t:
        t.open("#/queue")
        row = t.page.locator("#waiting tr[data-job=big]")
        row.wait_for()
        big = api.job("big")
        assert row.locator(".reason").inner_text() == big["reason"]
        holders = {gpu_map(api)[gpu] for gpu in reserved(big["reason"])} - {""}
        assert holders, "big's reserved GPUs are held by running jobs"
        shown = row.locator(".blockers a").all_inner_texts()
        assert sorted(shown) == sorted(holders)
        assert sorted(listed(t, "#running tr[data-job]")) == ["asr", "train"]
        # The team filter keeps one team's jobs.
        t.page.select_option("#filters select[name=team]", "speech")
        t.ready("#/queue?team=speech")
        assert listed(t, "#running tr[data-job]") == ["asr"]
        assert t.unexpected_errors() == []


def test_changes_appear_within_two_seconds_without_a_reload(
    browser: Any, server: ServerProcess, tmp_path: Path
) -> None:
    api, tokens = busy_cluster(server, tmp_path)
    with tab(browser, server.url, server.token) as t:
        t.open("#/queue")
        t.page.evaluate("window.notReloaded = true")
        Api(server, tokens["speech"]).submit(name="late", workers=1, gpus=1, command=["true"])
        t.page.wait_for_selector("tr[data-job=late]", timeout=2000)
        (tmp_path / "out" / "go-asr").write_text("go")
        api.until("asr", "succeeded")
        t.page.wait_for_selector("#recent tr[data-job=asr]", timeout=2000)
        assert "asr" not in listed(t, "#running tr[data-job]")
        assert t.page.evaluate("window.notReloaded") is True
        assert t.unexpected_errors() == []


def test_a_team_sees_its_own_logs_and_is_refused_another_teams(
    browser: Any, server: ServerProcess, tmp_path: Path
) -> None:
    api, tokens = busy_cluster(server, tmp_path)
    train = api.job("train")
    with tab(browser, server.url, tokens["speech"]) as t:
        t.open("#/job/train")
        assert "bob" in t.page.inner_text("#who")
        # The placement is drawn on the node: each worker on exactly its GPUs.
        marked = t.page.eval_on_selector_all(
            "#job-placement button.gpu:not(.dim)",
            "els => els.map(e => [+e.dataset.gpu, e.querySelector('span').textContent])",
        )
        assert sorted(map(tuple, marked)) == sorted(
            (g, f"w{w['worker']}") for w in train["placement"] for g in w["gpus"]
        )
        ring = re.search(r"\(ring ([\d.]+) GB/s\)", api.get("/api/v1/jobs/train/explain")["text"])
        assert ring is not None
        assert f"{ring.group(1)} GB/s" in t.page.inner_text("#job-summary")
        assert t.page.locator("#job-history li").count() == len(train["history"])
        log = t.page.locator("#job-log .refused")
        log.wait_for()
        assert "403" in log.inner_text() and "may not read the logs of" in log.inner_text()
        # The refusal is asked for once, not on every poll; no Cancel is offered to a user
        # the API would refuse.
        polled(t, 3)
        assert len([e for e in t.errors if REFUSED in e]) == 1, t.errors
        assert t.page.locator("#job-actions button").count() == 0
        t.shot(tmp_path / "screenshots", "job-refused")
        assert api.state("train") == "running"
        assert t.unexpected_errors(REFUSED) == []
    with tab(browser, server.url, tokens["vision"]) as t:
        t.open("#/job/train")
        t.page.wait_for_selector("#job-log:has-text('hello from rank 0')")
        t.page.click("button[data-action=worker][data-worker='1']")
        t.page.wait_for_selector("#job-log:has-text('hello from rank 1')")
        t.page.click("button[data-action=cancel]")
        t.page.click("button[data-action=cancel-yes]")
        t.page.wait_for_selector("#notice.info")
        wait_for(lambda: api.state("train") in ("stopping", "cancelled"), "train to be cancelled")
        assert t.unexpected_errors() == []


def test_teams_show_share_use_and_borrowing(
    browser: Any, server: ServerProcess, tmp_path: Path
) -> None:
    api, _ = busy_cluster(server, tmp_path)
    assert api.http.put("/api/v1/queues/vision", json={"guaranteed_gpus": 1}).status_code == 200
    with tab(browser, server.url, server.token) as t:
        t.open("#/teams")
        for queue in api.get("/api/v1/queues")["queues"]:
            row = t.page.locator(f"#teams tr[data-team='{queue['name']}']")
            cells = row.locator("td").all_inner_texts()
            borrowing = max(0, queue["used_gpus"] - queue["guaranteed_gpus"])
            assert cells[1:6] == [
                str(queue["guaranteed_gpus"]),
                str(queue["used_gpus"]),
                str(borrowing),
                str(queue["running"]),
                str(queue["pending"]),
            ]
        vision = t.page.locator("#teams tr[data-team=vision] td").all_inner_texts()
        assert vision[3] == "3"  # 4 GPUs in use against a share of 1
        assert t.unexpected_errors() == []


def test_every_page_fits_phones_and_desktops(
    browser: Any, server: ServerProcess, tmp_path: Path
) -> None:
    busy_cluster(server, tmp_path)
    pages = {"cluster": "#/cluster", "queue": "#/queue", "teams": "#/teams", "job": "#/job/train"}
    for width in WIDTHS:
        with tab(browser, server.url, server.token, width=width) as t:
            for name, where in pages.items():
                t.open(where)
                overflow = t.page.evaluate("document.documentElement.scrollWidth")
                assert overflow <= width, f"{name} is {overflow} px wide at {width} px"
                t.shot(tmp_path / "screenshots", f"{name}-{width}")
                publish(t, f"{name}-{width}")
            assert t.unexpected_errors() == []
            assert t.outside == []


def test_the_api_docs_work_offline(browser: Any, server: ServerProcess) -> None:
    with tab(browser, server.url) as t:
        t.page.goto(server.url + "/docs")
        t.page.wait_for_selector(".swagger-ui .opblock")
        assert t.page.locator(".opblock-summary-path:has-text('/api/v1/jobs')").count() > 0
        assert t.outside == []
        assert t.unexpected_errors() == []
