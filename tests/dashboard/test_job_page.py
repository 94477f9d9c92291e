"""The dashboard's job page in headless Chromium against a real server: what it says of jobs
that are not simply running (unknown, waiting again after a stop, ended, elastic)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.dashboard.browser import tab
from tests.dashboard.test_pages import drawn_map, polled
from tests.server import Api, ServerProcess, envs, wait_for, worker

NOT_FOUND = "the server responded with a status of 404"


def fact(t: Any, name: str) -> str:
    text: str = t.page.inner_text(f"#job-summary dd[data-fact='{name}']")
    return text


def test_an_unknown_job_is_said_not_found_once(browser: Any, server: ServerProcess) -> None:
    with tab(browser, server.url, server.token) as t:
        t.page.goto(f"{server.url}/#/job/nobody")
        t.page.wait_for_selector("#main h1:has-text('Not found')")
        assert "no job named 'nobody'" in t.page.inner_text("#main")
        first = [e for e in t.errors if NOT_FOUND in e]
        assert first, "the job and its explanation were asked for once"
        polled(t, 3)
        assert [e for e in t.errors if NOT_FOUND in e] == first, "and not asked for again"
        # Another page polls again as usual.
        t.page.goto(f"{server.url}/#/queue")
        t.ready("#/queue")
        assert t.unexpected_errors(NOT_FOUND) == []


def test_a_job_waiting_again_after_a_stop_shows_no_old_start_ring_or_gpus(
    browser: Any, server: ServerProcess, tmp_path: Path
) -> None:
    api = Api(server)
    assert api.http.put("/api/v1/queues/owners", json={"guaranteed_gpus": 8}).status_code == 200
    out = tmp_path / "out"
    out.mkdir()
    checkpoint = {"signal": "SIGUSR1", "grace_s": 10}
    api.submit(name="bumped", queue="guests", gpus=8, checkpoint=checkpoint, **worker(out, "x"))
    wait_for(lambda: envs(out, 0), "bumped to start")
    api.submit(name="owner", queue="owners", gpus=8, **worker(out, wait="go"))
    api.until("owner", "running")
    bumped = api.job("bumped")
    assert bumped["state"] == "pending" and bumped["started_at"] is not None
    with tab(browser, server.url, server.token) as t:
        t.open("#/job/bumped")
        assert fact(t, "started").startswith("not running now (last started ")
        assert fact(t, "ring bandwidth") == "—"
        assert fact(t, "speed") == "—"
        said = t.page.inner_text("#job-placement")
        assert said.startswith("Not placed now. It ran, was stopped and gave its GPUs back")
        assert t.page.locator("#job-placement button.gpu").count() == 0
        # The job that runs on those GPUs now shows its own start, ring and predicted speed.
        t.page.goto(f"{server.url}/#/job/owner")
        t.ready("#/job/owner")
        owner = api.job("owner")
        assert fact(t, "ring bandwidth") == f"{owner['ring_gbps']:g} GB/s"
        predicted = owner["predicted"]
        assert fact(t, "speed").startswith(
            f"predicted {predicted['samples_per_s']:.0f} samples/s "
            f"({100 * predicted['share']:.0f}% of best) for {predicted['model']}"
        )
        assert "not running" not in fact(t, "started")
        assert t.unexpected_errors() == []
    (out / "go").write_text("")


def test_an_ended_jobs_gpus_are_drawn_without_their_current_holders(
    browser: Any, server: ServerProcess, tmp_path: Path
) -> None:
    api = Api(server)
    out = tmp_path / "out"
    out.mkdir()
    api.submit(name="done", workers=2, gpus=1, **worker(out))
    api.until("done", "succeeded")
    held = {("node-a", g) for w in api.job("done")["placement"] for g in w["gpus"]}
    api.submit(name="now", gpus=8, **worker(out, wait="go"))
    api.until("now", "running")
    with tab(browser, server.url, server.token) as t:
        t.open("#/job/done")
        drawn = drawn_map(t, "#job-placement")
        assert {gpu for gpu, job in drawn.items() if job} == held
        assert set(drawn.values()) == {"done", ""}, "no current holder is drawn"
        labels = t.page.eval_on_selector_all(
            "#job-placement button.gpu", "els => els.map(e => e.querySelector('span').textContent)"
        )
        assert sorted(labels) == ["", "", "", "", "", "", "w0", "w1"]
        assert "the GPUs it held until it ended" in t.page.inner_text("#job-placement")
        assert t.unexpected_errors() == []
    (out / "go").write_text("")


def test_an_elastic_job_says_how_many_of_its_workers_run(
    browser: Any, server: ServerProcess, tmp_path: Path
) -> None:
    api = Api(server)
    out = tmp_path / "out"
    out.mkdir()
    api.submit(name="filler", gpus=7, **worker(out, wait="go"))
    api.until("filler", "running")
    api.submit(name="grows", gpus=1, elastic={"min": 1, "max": 4}, **worker(out, wait="go"))
    running = api.until("grows", "running")
    assert len(running["placement"]) == 1
    with tab(browser, server.url, server.token) as t:
        t.open("#/job/grows")
        assert fact(t, "shape") == "1 running (elastic 1:4) \N{MULTIPLICATION SIGN} 1 GPU(s)"
        assert t.page.locator("#job-workers button").count() == 1
        assert t.unexpected_errors() == []
    (out / "go").write_text("")
