"""The server's log, read from a real server: its decisions, its requests and its shutdown."""

from __future__ import annotations

import contextlib
import re
import signal
import sys
import time
from pathlib import Path

import httpx

from tests.e2e.conftest import run_cli
from tests.server import Api, envs, running_server, wait_for, worker


def test_each_decision_is_logged_and_the_shutdown_names_the_running_jobs(
    tmp_path: Path, out: Path
) -> None:
    with running_server(tmp_path) as server:
        api = Api(server)
        api.submit(name="short", workers=2, gpus=2, **worker(out))
        api.until("short", "succeeded")
        api.submit(name="stays", command=[sys.executable, "-c", "import time; time.sleep(60)"])
        api.until("stays", "running")
        wait_for(lambda: "job stays: pending -> running" in server.log(), "its decision logged")
        log = server.log()
        assert "INFO toposched.server: job short: - -> pending: submitted" in log
        started = re.search(r"job short: pending -> running on (node-a:\S+) (node-a:\S+): ", log)
        assert started, log
        placement = api.job("short")["placement"]
        assert started.groups() == tuple(
            f"node-a:{','.join(map(str, slot['gpus']))}" for slot in placement
        )
        assert "job short: running -> succeeded: all workers exited 0" in log
        # At the default level, a request costs no log line.
        assert "POST /api/v1/jobs" not in log
        server.stop()
        said = server.log()
    assert "toposched stopped; 1 job(s) keep running (stays): their workers are adopted" in said


def test_a_cancel_logs_its_stop_and_debug_logs_each_request(tmp_path: Path, out: Path) -> None:
    with running_server(tmp_path, args=("--emulate", "dgx1-v100", "--log-level", "debug")) as srv:
        api = Api(srv)
        api.submit(name="long", **worker(out, wait="never"))
        api.until("long", "running")
        assert api.http.delete("/api/v1/jobs/long").status_code == 202
        api.until("long", "cancelled")
        api.get("/api/v1/jobs/nobody", expect=404)
        assert api.http.delete("/api/v1/jobs/long").status_code == 202  # ended: removed
        srv.stop()
        log = srv.log()
    assert "job long: cancelled -> deleted: its name is free again" in log
    assert re.search(r"job long: running -> stopping \(cancel: SIGTERM, SIGKILL after \S+ s\)", log)
    assert "job long: stopping -> cancelled: cancelled" in log
    assert re.search(r"DEBUG toposched\.server\.http: POST /api/v1/jobs 201 [\d.]+ ms", log)
    assert re.search(r"DEBUG toposched\.server\.http: GET /api/v1/jobs/nobody 404 [\d.]+ ms", log)
    assert "toposched stopped; no job was running" in log


def test_an_unknown_log_level_is_refused(tmp_path: Path) -> None:
    result = run_cli("serve", "--data-dir", str(tmp_path), "--log-level", "chatty")
    assert result.code == 2
    assert "--log-level must be one of debug, info, warning, error, got 'chatty'" in result.err


def test_sigterm_runs_the_same_shutdown_as_sigint(tmp_path: Path) -> None:
    # uvicorn raised SIGTERM again with the default handler: the process died before the
    # runtime stopped, the store closed or the last line was logged (issue 33 finding 6).
    with running_server(tmp_path) as server:
        api = Api(server)
        api.submit(name="stays", command=[sys.executable, "-c", "import time; time.sleep(60)"])
        api.until("stays", "running")
        api.http.close()
        assert server.proc is not None
        server.proc.send_signal(signal.SIGTERM)
        assert server.proc.wait(timeout=30) == 0
        said = server.log()
        assert "toposched stopped; 1 job(s) keep running (stays): their workers are adopted" in said
        server.start()
        again = Api(server)
        assert again.state("stays") == "running"
        assert again.http.delete("/api/v1/jobs/stays").status_code == 202
        again.until("stays", "cancelled")
        again.http.close()


def test_sigterm_ends_followed_logs_and_stops_within_its_grace(tmp_path: Path, out: Path) -> None:
    # A `logs -f` held its connection open, and uvicorn's shutdown waited for it for ever: the
    # server never stopped (issue 47).
    with running_server(tmp_path) as server, contextlib.ExitStack() as streams:
        api = Api(server)
        api.submit(name="quiet", **worker(out, wait="never"))
        wait_for(lambda: envs(out, 0), "the worker")
        http = streams.enter_context(httpx.Client(headers=api.http.headers, timeout=30))
        followers = []
        for _ in range(3):
            reply = streams.enter_context(
                http.stream("GET", f"{server.url}/api/v1/jobs/quiet/logs", params={"follow": True})
            )
            followers.append(reply.iter_bytes())
            assert b"hello from rank 0" in next(followers[-1])
        api.http.close()
        assert server.proc is not None
        began = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        for rest in followers:
            list(rest)  # each ends (a read timeout here would raise)
        assert server.proc.wait(timeout=20) == 0
        assert time.monotonic() - began < 5, "the shutdown waited out its grace"
        assert "toposched stopped; 1 job(s) keep running (quiet)" in server.log()
        server.start()
        again = Api(server)
        assert again.state("quiet") == "running"  # adopted, as after any stop
        assert again.http.delete("/api/v1/jobs/quiet").status_code == 202
        again.until("quiet", "cancelled")
        again.http.close()
