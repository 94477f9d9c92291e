"""Idle GPUs given back, from the CLI against a real server on an emulated DGX-1: the CPU-time
stand-in (no NVML here) tells a sleeping job from a busy one (issue 31, items 1 and 2)."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Result, run_cli
from tests.server import Api, ServerProcess, running_server, wait_for

SLEEPS = [sys.executable, "-c", "import time; time.sleep(600)"]
SPINS = [sys.executable, "-c", "while True: pass"]


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    args = ("--emulate", "dgx1-v100", "--sample-every", "1")
    with running_server(tmp_path, args=args) as found:
        yield found


def cli(server: ServerProcess, *args: str) -> Result:
    return run_cli(*args, **{"TOPOSCHED_URL": server.url, "TOPOSCHED_TOKEN": server.token})


def submit(server: ServerProcess, name: str, *flags: str, command: list[str] = SLEEPS) -> None:
    said = cli(server, "submit", "--name", name, *flags, "--", *command)
    assert said.code == 0, said.err


def test_a_sleeping_job_is_stopped_as_idle_and_its_gpus_go_to_a_waiting_job(
    server: ServerProcess,
) -> None:
    api = Api(server)
    rule = ("--idle-after", "10s", "--idle-action", "stop")
    submit(server, "sleeper", "--gpus", "4", *rule)
    submit(server, "spinner", "--gpus", "4", *rule, command=SPINS)
    submit(server, "waiter", "--gpus", "4", "--workers", "1")
    api.until("sleeper", "running")
    began = time.monotonic()
    assert api.state("waiter") == "pending"
    ended = api.until("sleeper", "idle-stopped", timeout_s=30)
    assert time.monotonic() - began < 30
    assert (
        "idle-stopped: its processes (CPU stand-in) stayed below 5% busy for 10s"
        in (ended["reason"])
    )
    waiter = api.until("waiter", "running")
    assert {g for w in waiter["placement"] for g in w["gpus"]} == {
        g for w in ended["placement"] for g in w["gpus"]
    }
    # The busy job, with the same rule and running as long, keeps its GPUs.
    assert api.state("spinner") == "running"
    said = cli(server, "top", "job", "--json")
    assert said.code == 0, said.err
    activity = {j["name"]: j["activity"] for j in json.loads(said.out)["jobs"]}
    assert activity["spinner"]["source"] == "cpu"
    assert activity["spinner"]["mean_pct"] > 50
    assert activity["spinner"]["idle_since"] is None
    text = cli(server, "top", "job").out
    assert re.search(r"spinner .*│ \d+% +│ \d+% +│", text), text
    assert "CPU time of each job's processes (no NVML on the server)" in text
    get = cli(server, "get", "sleeper").out
    assert "state      idle-stopped" in get
    assert "idle rule  stop after 10s below 5%" in get
    history = [h["new"] for h in api.job("sleeper")["history"]]
    assert history == ["pending", "running", "stopping", "idle-stopped"]


def test_notify_says_so_and_keeps_the_gpus(server: ServerProcess) -> None:
    api = Api(server)
    submit(server, "napper", "--idle-after", "2s")  # notify is the default action
    wait_for(lambda: (api.job("napper").get("activity") or {}).get("idle_notice"), "a notice")
    job = api.job("napper")
    assert job["state"] == "running"
    assert "; idle: its processes (CPU stand-in) stayed below 5% busy for 2s" in job["reason"]
    assert job["activity"]["idle_since"] is not None
    notes = [h for h in job["history"] if h["old"] == h["new"] == "running"]
    assert len(notes) == 1 and notes[0]["reason"].startswith("idle: its processes")
    metrics = api.http.get("/metrics").text
    assert re.search(r'toposched_job_idle\{job="napper",queue="default"\} 1\.0', metrics)
    assert 'toposched_idle_events_total{action="notify"} 1.0' in metrics
    assert re.search(
        r'toposched_job_busy_percent\{job="napper",queue="default",source="cpu"\}', metrics
    )
    gpus = [g for g in api.get("/api/v1/nodes")["nodes"][0]["gpus"] if g["job"] == "napper"]
    assert [g["busy_pct"] for g in gpus] == [0.0]


def test_a_queue_rule_applies_to_its_jobs_without_one_and_a_checkpointable_job_waits_again(
    server: ServerProcess, tmp_path: Path
) -> None:
    api = Api(server)
    said = cli(server, "queue", "set", "lab", "--idle-after", "3s", "--idle-action", "stop")
    assert said.code == 0, said.err
    (queue,) = [q for q in api.get("/api/v1/queues")["queues"] if q["name"] == "lab"]
    assert queue["idle"] == {"after": 3.0, "below": 5.0, "action": "stop"}
    submit(server, "saver", "--queue", "lab", "--checkpoint-signal", "SIGTERM")
    submit(server, "own", "--queue", "lab", "--idle-after", "1h")
    # Checkpointable: stopped with its signal, it waits again and, the node being free, runs.
    wait_for(lambda: api.job("saver")["attempt"] >= 2, "saver to run again", timeout_s=30)
    kinds = [h["reason"] for h in api.job("saver")["history"] if h["new"] == "pending"]
    assert any("requeued after idle" in k for k in kinds), kinds
    assert api.state("own") == "running"  # its own rule (1h) wins over the queue's


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--idle-after", "0s"), "idle after must be a positive time"),
        (("--idle-after", "soon"), "idle after must be a time such as 30m"),
        (("--idle-after", "1m", "--idle-below", "200"), "--idle-below must be at most 100"),
        (("--idle-after", "1m", "--idle-action", "kill"), "--idle-action"),
        (("--idle-below", "3"), "--idle-below and --idle-action need --idle-after"),
    ],
)
def test_a_bad_idle_rule_is_refused_naming_the_flag(
    server: ServerProcess, flags: tuple[str, ...], said: str
) -> None:
    result = cli(server, "submit", "--name", "bad", *flags, "--", "true")
    assert result.code != 0
    assert said in result.err, result.err
    assert Api(server).get("/api/v1/jobs")["jobs"] == []


def test_a_notebook_session_gets_a_port_that_get_shows_and_serves_on(
    server: ServerProcess, tmp_path: Path
) -> None:
    # Any command stands in for Jupyter: a web server on the session's port.
    serve = [sys.executable, "-m", "http.server", "--bind", "127.0.0.1", "$(TOPOSCHED_PORT)"]
    said = cli(
        server, "submit", "notebook", "--name", "nb", "--workdir", str(tmp_path), "--", *serve
    )
    assert said.code == 0, said.err
    api = Api(server)
    job = api.until("nb", "running")
    port = job["port"]
    assert isinstance(port, int) and job["spec"]["interactive"] is True
    get = cli(server, "get", "nb").out
    assert (
        f"session    interactive: http://127.0.0.1:{port}/ (port {port}, in TOPOSCHED_PORT)" in get
    )
    page = wait_for(lambda: _fetch(f"http://127.0.0.1:{port}/"), "the session to answer")
    assert "Directory listing" in page
    # Not restarted: cancelled, it ends.
    assert cli(server, "delete", "--keep", "nb").code == 0
    ended = api.until("nb", "cancelled")
    assert ended["port"] is None and ended["attempt"] == 0  # its first and only run


def _fetch(url: str) -> str | None:
    try:
        return httpx.get(url, timeout=2).text
    except httpx.HTTPError:
        return None


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (("--workers", "2"), "an interactive session runs one worker once: workers must be 1"),
        (("--restart", "on-failure"), "restart must be never"),
        (("--checkpoint-signal", "SIGUSR1"), "it cannot checkpoint"),
        (("--elastic", "1:2"), "it cannot be elastic"),
    ],
)
def test_a_session_that_is_not_one_worker_run_once_is_refused(
    server: ServerProcess, flags: tuple[str, ...], said: str
) -> None:
    result = cli(server, "submit", "--interactive", "--name", "s", *flags, "--", "true")
    assert result.code != 0
    assert said in result.err, result.err
