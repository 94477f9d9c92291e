"""The job and cluster commands as a user types them, against a real `toposched serve`.

Each command runs as `python -m toposched ...` in a subprocess with the environment a user on
the server's machine has (TOPOSCHED_URL, TOPOSCHED_DATA_DIR; no TOPOSCHED_TOKEN, so the admin
token file is used). One server (an emulated dgx1-v100: 8 GPUs) serves the whole module; each
test cancels what it left running. Waiting is done by polling the API with a deadline.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import Result
from tests.server import REPO, ServerProcess, db_locked, free_port, running_server
from toposched.client.http import (
    ApiError,
    Client,
    ConfigError,
    Token,
    find_token,
    server_url,
)

WAIT_S = 60.0  # a ceiling for slow CI machines; jobs here take seconds
TERMINAL = ("succeeded", "failed", "cancelled", "rejected")

# Worker 0..N-1 says hello, then waits for a gate file, so a test sees the job running.
GATED = """\
import os, pathlib, sys, time
rank, world = os.environ["RANK"], os.environ["WORLD_SIZE"]
print(f"hello from rank {rank} of {world} on GPU {os.environ['CUDA_VISIBLE_DEVICES']}", flush=True)
gate, deadline = pathlib.Path(sys.argv[1]), time.monotonic() + 60
while not gate.exists():
    if time.monotonic() > deadline:
        sys.exit(3)
    time.sleep(0.05)
print(f"rank {rank} done", flush=True)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with pytest.MonkeyPatch.context() as patch:
        # The example jobs run `python ...`: let that be this interpreter for the workers.
        path = os.environ.get("PATH", "")
        patch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{path}")
        with running_server(tmp_path_factory.mktemp("cli")) as started:
            yield started


def user_env(server: ServerProcess, token: str | None = None) -> dict[str, str]:
    env = server.env()
    env.pop("COLUMNS", None)  # pytest exports COLUMNS=80; a user's pipe has no such limit
    env.pop("TOPOSCHED_TOKEN", None)
    if token is not None:
        env["TOPOSCHED_TOKEN"] = token
    return env


def run(env: dict[str, str], *args: str) -> Result:
    proc = subprocess.run(
        [sys.executable, "-m", "toposched", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=REPO,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def cli(server: ServerProcess) -> Callable[..., Result]:
    """`toposched ARGS...` as the admin on the server's machine."""
    env = user_env(server)
    return lambda *args: run(env, *args)


def run_all(env: dict[str, str], *commands: tuple[str, ...]) -> list[Result]:
    """Independent commands at once: each is a whole Python start-up."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda args: run(env, *args), commands))


def job(server: ServerProcess, name: str) -> dict[str, Any]:
    with server.client() as http:
        found: dict[str, Any] = http.get(f"/api/v1/jobs/{name}").raise_for_status().json()
        return found


def wait_for(server: ServerProcess, name: str, *states: str) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    while True:
        found = job(server, name)
        if found["state"] in states:
            return found
        if found["state"] in TERMINAL or time.monotonic() > deadline:
            pytest.fail(f"job {name} is {found['state']}, not {states}: {found['reason']}")
        time.sleep(0.1)


def wait_gone(server: ServerProcess, name: str) -> None:
    """Until job `name` is deleted (its name free)."""
    deadline = time.monotonic() + WAIT_S
    with server.client() as http:
        while http.get(f"/api/v1/jobs/{name}").status_code != 404:
            assert time.monotonic() < deadline, f"job {name} was not deleted"
            time.sleep(0.1)


@pytest.fixture(autouse=True)
def _cancel_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each test starts on an idle node: what a test left running is cancelled after it."""
    yield
    if "server" not in request.fixturenames:
        return
    server: ServerProcess = request.getfixturevalue("server")
    with server.client() as http:
        for row in http.get("/api/v1/jobs").json()["jobs"]:
            if row["state"] != "stopping":
                http.delete(f"/api/v1/jobs/{row['name']}")
        deadline = time.monotonic() + WAIT_S
        while http.get("/api/v1/jobs").json()["jobs"]:
            assert time.monotonic() < deadline, "jobs still live after being cancelled"
            time.sleep(0.1)


# ---------------------------------------------------------------------- jobs


def test_submit_get_logs_of_a_two_worker_job(
    server: ServerProcess, cli: Callable[..., Result], tmp_path: Path
) -> None:
    script, gate = tmp_path / "gated.py", tmp_path / "gate"
    script.write_text(GATED)
    submitted = cli(
        "submit", "--name", "hello", "--workers", "2", "--", sys.executable, str(script), str(gate)
    )
    assert submitted.code == 0, submitted.err
    assert "hello" in submitted.out and "running" in submitted.out

    running = cli("get", "hello", "--json")
    assert running.code == 0, running.err
    shown = running.json()
    assert shown["state"] == "running"
    assert [w["worker"] for w in shown["placement"]] == [0, 1]
    assert all(w["node"] == "node-a" and len(w["gpus"]) == 1 for w in shown["placement"])
    assert shown["reason"]

    gate.touch()
    wait_for(server, "hello", "succeeded")
    ended, text, logs = run_all(
        user_env(server),
        ("get", "hello", "--json"),
        ("get", "hello"),
        ("logs", "--worker", "1", "hello"),
    )
    assert ended.json()["state"] == "succeeded"
    assert [h["new"] for h in ended.json()["history"]] == ["pending", "running", "succeeded"]
    assert "succeeded" in text.out and "placement" in text.out and "node-a" in text.out
    assert logs.code == 0, logs.err
    gpu = shown["placement"][1]["gpus"][0]
    assert f"hello from rank 1 of 2 on GPU {gpu}" in logs.out
    assert "rank 1 done" in logs.out and "rank 0" not in logs.out


def test_gang_of_two_by_two_is_listed_and_cancelled(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    submitted = cli("submit", "--name", "pairs", "--workers", "2", "--gpus", "2", "--json",
                    "--", "sleep", "60")  # fmt: skip
    assert submitted.code == 0, submitted.err
    pairs = submitted.json()
    assert pairs["state"] == "running"
    gpus = [tuple(w["gpus"]) for w in pairs["placement"]]
    assert len(gpus) == 2 and all(len(g) == 2 for g in gpus)
    assert not set(gpus[0]) & set(gpus[1])

    table = cli("list")
    assert "pairs" in table.out and "running" in table.out and "2x2" in table.out

    deleted = cli("delete", "pairs")
    assert deleted.code == 0, deleted.err
    assert deleted.out == (
        "deleting pairs: stopping its workers; its name is free once they have stopped\n"
    )
    wait_gone(server, "pairs")


def test_example_vgg16_job_file(server: ServerProcess, cli: Callable[..., Result]) -> None:
    submitted = cli("submit", "-f", "examples/jobs/vgg16-4gpu.yaml", "--json")
    assert submitted.code == 0, submitted.err
    spec = submitted.json()
    assert spec["name"] == "vgg16-4gpu" and len(spec["placement"]) == 4
    assert spec["spec"]["workdir"] == str(REPO)  # runs where it was submitted from
    wait_for(server, "vgg16-4gpu", "succeeded")
    logs = cli("logs", "vgg16-4gpu", "--worker", "3")
    assert logs.code == 0, logs.err
    # No torch (or no GPU) here: the script says so and shows what toposched gave it.
    assert "not training" in logs.out
    assert "RANK=3" in logs.out and "WORLD_SIZE=4" in logs.out and "MASTER_PORT=" in logs.out


def test_a_mig_profile_is_refused_by_its_flag(server: ServerProcess) -> None:
    """No GPU of the emulated node is in MIG mode: `--mig` is refused, naming the flag."""
    asked, two = run_all(
        user_env(server),
        ("submit", "--mig", "3g.40gb", "--", "true"),
        ("submit", "--mig", "1g.10gb", "--gpus", "2", "--", "true"),
    )
    assert asked.code == 2
    assert asked.err == "error: --mig: rejected: mig 3g.40gb: no GPU it may use is in MIG mode\n"
    assert two.code == 2
    assert "--gpus: mig 1g.10gb is one MIG instance: gpus must be 1, got 2" in two.err


def test_refusals_and_bad_input(server: ServerProcess, tmp_path: Path) -> None:
    bad_type = tmp_path / "bad.yaml"
    bad_type.write_text("name: typo\ngpus: two\ncommand: [true]\n")
    too_big = tmp_path / "big.yaml"
    too_big.write_text("name: big\ngpus: 9\ncommand: [true]\n")
    nine, restart, name, typed, big, get = run_all(
        user_env(server),
        ("submit", "--gpus", "9", "--", "true"),
        ("submit", "--restart", "sometimes", "--", "true"),
        ("submit", "--name", "Bad_Name", "--priority", "5000", "--", "true"),
        ("submit", "-f", str(bad_type), "--name", "other"),
        ("submit", "-f", str(too_big), "--name", "other"),
        ("get", "nosuch"),
    )
    assert nine.code == 2
    # The server's refusals name the flag that gave the field, not the API's field.
    assert nine.err == "error: --gpus: rejected: a worker needs 9 GPUs; the largest node has 8\n"
    assert restart.code == 2 and "sometimes" in restart.err
    # A 422 gives one line per bad field.
    assert name.code == 2
    assert name.err.splitlines() == [
        "error: --name: job name 'Bad_Name': use lower-case letters, digits, '.', '_' and "
        "'-', 1-64 long, starting and ending alphanumeric",
        "error: --priority must be at most 1000",
    ]
    # A job file's mistake names the file, the line and the field.
    assert typed.code == 2
    assert typed.err == f"error: {bad_type}:2: gpus: expected a whole number, got the text 'two'\n"
    # The server's refusal of a field the file gave points at the file's line.
    assert big.code == 2
    assert f"the largest node has 8 ({too_big}:2)" in big.err
    assert get.code == 3 and get.err == "error: no job named 'nosuch'\n"
    assert all(not r.out for r in (nine, restart, name, typed, big, get))


def test_explain_pending_job_and_gpu_map(server: ServerProcess, cli: Callable[..., Result]) -> None:
    filler = cli("submit", "--name", "filler", "--workers", "4", "--gpus", "2", "--", "sleep", "60")
    assert filler.code == 0, filler.err
    waiter = cli("submit", "--name", "waiter", "--gpus", "2", "--json", "--", "true")
    assert waiter.json()["state"] == "pending"
    why, gpu_map, gpu_json, jobs_table = run_all(
        user_env(server),
        ("explain", "waiter"),
        ("top", "node"),
        ("top", "node", "--json"),
        ("top", "job"),
    )
    assert why.code == 0, why.err
    assert "job waiter: pending" in why.out
    assert "needs 2 GPUs; 0 are free" in why.out
    node = gpu_json.json()["nodes"][0]
    assert node["name"] == "node-a" and node["topology"] == "dgx1-v100"
    assert [g["job"] for g in node["gpus"]] == ["filler"] * 8
    assert [node["links"][i][i] for i in range(8)] == ["X"] * 8
    assert node["links"][0][3] == "NV2" and node["links"][0][5] == "SYS"
    assert "filler" in gpu_map.out and "NV2" in gpu_map.out and "GPU7" in gpu_map.out
    assert "filler" in jobs_table.out and "4x2" in jobs_table.out and "node-a:" in jobs_table.out


def test_node_labels(server: ServerProcess, cli: Callable[..., Result]) -> None:
    labelled = cli("node", "label", "node-a", "zone=z1", "--json")
    assert labelled.code == 0, labelled.err
    assert labelled.json()["nodes"][0]["labels"]["zone"] == "z1"
    removed = cli("node", "label", "node-a", "zone-")
    assert removed.code == 0 and "node-a: labels (none)" in removed.out


def test_queues(server: ServerProcess, cli: Callable[..., Result]) -> None:
    assert cli("queue", "set", "team-q", "4").code == 0
    listed = cli("queue", "list", "--json")
    queues = {q["name"]: q for q in listed.json()["queues"]}
    assert queues["team-q"]["guaranteed_gpus"] == 4
    assert queues["team-q"]["used_gpus"] == 0


def test_tokens_and_team_rules(server: ServerProcess, cli: Callable[..., Result]) -> None:
    made = cli("token", "create", "--user", "alice", "--team", "a")
    assert made.code == 0, made.err
    token = made.out.strip()
    assert token.startswith("tsk_") and "\n" not in token
    assert "alice" in made.err  # the note goes to stderr: stdout is the token alone
    guarded = cli("submit", "--name", "guarded", "--", "sleep", "60")
    assert guarded.code == 0, guarded.err

    alice = user_env(server, token)
    me, queue_b, cancel, logs, share = run_all(
        alice,
        ("whoami", "--json"),
        ("submit", "--queue", "b", "--", "true"),
        ("delete", "guarded"),
        ("logs", "guarded"),
        ("queue", "set", "a", "1"),
    )
    assert me.json() == {"user": "alice", "team": "a", "role": "user"}
    assert queue_b.code == 4 and "may not submit to queue 'b'" in queue_b.err
    assert cancel.code == 4 and "may not cancel it" in cancel.err
    assert logs.code == 4 and "may not read the logs" in logs.err
    assert share.code == 4 and "not an admin" in share.err
    assert job(server, "guarded")["state"] == "running"

    admin = cli("whoami")
    assert admin.code == 0 and "admin (team default, admin)" in admin.out


def test_no_token_at_all(server: ServerProcess, tmp_path: Path) -> None:
    env = {**user_env(server), "TOPOSCHED_DATA_DIR": str(tmp_path)}
    result = run(env, "list")
    assert result.code == 4
    assert "missing bearer token" in result.err
    assert f"{tmp_path / 'admin.token'} cannot be read" in result.err


def test_server_not_running(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key != "TOPOSCHED_TOKEN"}
    env["TOPOSCHED_DATA_DIR"] = str(tmp_path)
    url, other = (f"http://127.0.0.1:{free_port()}" for _ in range(2))
    by_env, by_flag = run_all(
        {**env, "TOPOSCHED_URL": url}, ("list",), ("get", "x", "--server", other)
    )
    for result, where in ((by_env, url), (by_flag, other)):
        assert result.code == 6, result.err
        assert f"error: the server at {where} is not reachable" in result.err
        assert "start one with `toposched serve`" in result.err


def mock_client(answer: Callable[[httpx.Request], httpx.Response]) -> Client:
    return Client("http://127.0.0.1:9", "tok", transport=httpx.MockTransport(answer))


def test_client_errors_are_readable() -> None:
    detail = [
        {"loc": ["body", "gpus"], "msg": "Input should be a valid integer", "type": "x"},
        {"loc": ["body"], "msg": "Value error, workers (3) must lie in 1:2", "type": "x"},
    ]
    client = mock_client(lambda r: httpx.Response(422, json={"detail": detail}))
    with pytest.raises(ApiError) as caught:
        client.submit({"command": ["true"]})
    assert caught.value.status == 422
    assert str(caught.value) == (
        "body.gpus: Input should be a valid integer\nbody: workers (3) must lie in 1:2"
    )
    assert caught.value.fields[0] == ("body.gpus", "Input should be a valid integer")

    client = mock_client(lambda r: httpx.Response(502, text="<html>bad gateway</html>"))
    with pytest.raises(ApiError, match=r"^HTTP 502 from http://127.0.0.1:9: <html>bad gateway"):
        client.nodes()
    client = mock_client(lambda r: httpx.Response(200, text="hello"))
    with pytest.raises(ApiError, match=r"not JSON.*is it a toposched server"):
        client.whoami()


def test_client_retries_a_503_with_backoff_and_the_same_key() -> None:
    tries: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        tries.append(request)
        if len(tries) < 3:
            busy = {"detail": "the server cannot store changes now: the database is locked"}
            return httpx.Response(503, json=busy, headers={"Retry-After": "2"})
        return httpx.Response(201, json={"name": "x"})

    lines: list[str] = []
    waits: list[float] = []
    client = Client(
        "http://127.0.0.1:9",
        "tok",
        transport=httpx.MockTransport(answer),
        on_retry=lines.append,
        sleep=waits.append,
    )
    assert client.submit({"command": ["true"]}) == {"name": "x"}
    keys = {request.headers["Idempotency-Key"] for request in tries}
    assert len(tries) == 3 and len(keys) == 1 and len(keys.pop()) == 32
    assert waits == [2.0, 2.0]  # the server's Retry-After, above the first backoffs
    assert lines[0] == (
        "the server cannot store changes now: the database is locked; retrying in 2 s (try 2 of 5)"
    )
    # Bounded: the fifth 503 is the answer.
    tries.clear()
    always = Client(
        "http://127.0.0.1:9",
        "tok",
        transport=httpx.MockTransport(lambda r: httpx.Response(503, json={"detail": "busy"})),
        sleep=waits.append,
    )
    with pytest.raises(ApiError, match=r"^busy$") as caught:
        always.nodes()
    assert caught.value.status == 503


def test_client_retries_a_lost_answer_only_when_repeating_is_safe() -> None:
    calls: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request.method)
        if len(calls) % 2:
            raise httpx.ReadTimeout("no answer", request=request)
        return httpx.Response(202 if request.method == "DELETE" else 201, json={"name": "x"})

    client = Client(
        "http://127.0.0.1:9", "tok", transport=httpx.MockTransport(answer), sleep=lambda s: None
    )
    assert client.submit({"command": ["true"]}, key="k") == {"name": "x"}
    assert calls == ["POST", "POST"]
    calls.clear()
    # A cancel carries no key: its lost answer is reported, not repeated.
    with pytest.raises(ApiError, match="did not answer"):
        client.cancel("x")
    assert calls == ["DELETE"]


def test_submit_waits_out_a_locked_database(tmp_path: Path) -> None:
    args = ("--emulate", "dgx1-v100", "--db-busy-timeout", "1")
    with running_server(tmp_path, args=args) as server, db_locked(server) as release:
        cli = subprocess.Popen(
            [sys.executable, "-m", "toposched", "submit", "--name", "patient", "--", "true"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=user_env(server),
            cwd=REPO,
        )
        # The lock is held until the CLI says it found it and waits (however slowly it
        # started), not for a fixed time.
        said: list[str] = []
        waiting = threading.Event()

        def read_err() -> None:
            assert cli.stderr is not None
            for line in cli.stderr:
                said.append(line)
                if "retrying in" in line:
                    waiting.set()

        reader = threading.Thread(target=read_err, daemon=True)
        reader.start()
        assert waiting.wait(60), f"the CLI never said it waits for the lock: {''.join(said)}"
        release()
        assert cli.stdout is not None
        out = cli.stdout.read()  # the stderr pipe is the reader's alone
        cli.wait(timeout=60)
        reader.join(10)
        err = "".join(said)
        assert cli.returncode == 0, err
        assert "submitted patient" in out
        assert "the database is locked" in err and "retrying in" in err
        client = Client(server.url, server.token)
        jobs = [job["name"] for job in client.jobs(all=True)]
        assert jobs == ["patient"]
        client.close()


def test_client_keeps_names_inside_one_path_segment() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.raw_path.decode())
        return httpx.Response(200, json={"name": "x"})

    client = mock_client(answer)
    for name in ("a/b", "..", "x?y"):
        client.job(name)
    assert seen == ["/api/v1/jobs/a%2Fb", "/api/v1/jobs/%2E%2E", "/api/v1/jobs/x%3Fy"]


def test_token_and_server_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "admin.token").write_text("tsk_file\n")
    monkeypatch.setenv("TOPOSCHED_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("TOPOSCHED_TOKEN", raising=False)
    monkeypatch.delenv("TOPOSCHED_URL", raising=False)
    assert server_url() == "http://127.0.0.1:8080"
    assert server_url("http://h:1/") == "http://h:1"
    assert find_token("http://127.0.0.1:8080").value == "tsk_file"
    assert find_token("http://localhost:8080").value == "tsk_file"
    # The local admin token never goes to another machine.
    assert find_token("http://gpu-box.example.com:8080").value is None
    monkeypatch.setenv("TOPOSCHED_TOKEN", "tsk_env")
    assert find_token("http://gpu-box.example.com:8080") == Token("tsk_env", "TOPOSCHED_TOKEN")
    monkeypatch.setenv("TOPOSCHED_URL", "localhost:8080")
    with pytest.raises(ConfigError, match=r"from TOPOSCHED_URL.*expected http://HOST:PORT"):
        server_url()


# ---------------------------------------------------------------------- pages and bad input


def test_list_shows_one_page_and_all_walks_every_page(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    with server.client() as http:
        made = [
            http.post("/api/v1/jobs", json={"queue": "paged", "command": ["true"]}).json()["name"]
            for _ in range(5)
        ]
    for name in made:
        wait_for(server, name, "succeeded")
    first = cli("list", "--queue", "paged", "--state", "succeeded", "--limit", "2")
    assert first.code == 0, first.err
    assert made[0] in first.out and made[1] in first.out and made[2] not in first.out
    hint = first.err.strip()
    assert hint.startswith("more jobs: toposched list --state succeeded --queue paged --limit 2")
    assert hint.endswith("(or --all for every page)")
    following = hint.removeprefix("more jobs: toposched ").removesuffix(
        " (or --all for every page)"
    )
    second = cli(*following.split())
    assert second.code == 0, second.err
    assert made[2] in second.out and made[3] in second.out and made[1] not in second.out

    page, every, capped, live = run_all(
        user_env(server),
        ("list", "--queue", "paged", "--state", "succeeded", "--limit", "2", "--json"),
        ("list", "--all", "--queue", "paged", "--json"),
        ("list", "--all", "--queue", "paged", "--limit", "3", "--json"),
        ("list", "--queue", "paged", "--json"),
    )
    assert [job["name"] for job in page.json()["jobs"]] == made[:2]
    assert isinstance(page.json()["metadata"]["continue"], str)
    assert "command" not in page.json()["jobs"][0]
    assert every.json() == {"jobs": every.json()["jobs"], "metadata": {"continue": None}}
    assert [job["name"] for job in every.json()["jobs"]] == made
    assert [job["name"] for job in capped.json()["jobs"]] == made[:3]
    assert live.json() == {"jobs": [], "metadata": {"continue": None}}


def test_bad_input_exits_2_and_creates_nothing(
    server: ServerProcess, cli: Callable[..., Result], tmp_path: Path
) -> None:
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text("command: !!python/object/apply:os.system ['touch pwned']\n")
    with server.client() as http:
        before = http.get("/api/v1/jobs", params={"all": "true", "limit": 1000}).json()
    results = run_all(
        user_env(server),
        ("submit", "--limit", "inf", "--", "true"),
        ("submit", "--checkpoint-grace", "nan", "--", "true"),
        ("submit", "-f", str(jobfile)),
        ("submit", "--checkpoint-signal", "SIGKILL", "--", "true"),
        ("submit", "--workdir", "/no/such/dir", "--", "true"),
        ("submit", "--gpus", "-1", "--", "true"),
        ("submit", "--gpus", "0", "--", "true"),
        ("submit", "--model", "nosuch", "--", "true"),
        ("submit", "--gputopology", "maybe", "--", "true"),
        ("submit", "--checkpoint-every", "0", "--", "true"),
    )
    said = [
        "error: --time/--limit must be a positive time, got 'inf'",
        "error: --checkpoint-grace: expected a finite number of seconds, got nan",
        f"error: {jobfile}:1: command: the YAML tag !!python/object/apply:os.system is not allowed",
        "error: --checkpoint-signal: checkpoint signal 'SIGKILL' cannot be caught",
        "error: --workdir: workdir '/no/such/dir' is not a directory on the server",
        "error: --gpus must be at least 0\n",
        "error: --cpus: a job without GPUs (gpus 0) must ask for CPUs (e.g. 2 or 500m)\n",
        "error: --model: unknown model 'nosuch'; known models: alexnet, ",
        "error: --gputopology must be true or false, got 'maybe'\n",
        "error: --checkpoint-every must be more than 0\n",
    ]
    for result, line in zip(results, said, strict=True):
        assert result.code == 2, result.err
        assert line in result.err and "Traceback" not in result.err
        assert result.out == ""
    assert not (REPO / "pwned").exists()
    with server.client() as http:
        assert http.get("/api/v1/jobs", params={"all": "true", "limit": 1000}).json() == before


def test_a_checkpoint_interval_is_kept_and_shown(cli: Callable[..., Result]) -> None:
    said = cli("submit", "--name", "saves", "--checkpoint-every", "600", "--", "true")
    assert said.code == 0, said.err
    shown = cli("get", "saves").out
    assert "checkpoint  SIGTERM, 30 s grace, every 600 s of work" in shown, shown


def test_a_token_with_a_newline_is_an_authentication_error(server: ServerProcess) -> None:
    result = run(user_env(server, "tsk_one\nline_two"), "list")
    assert result.code == 4, result.err
    assert "the token from TOPOSCHED_TOKEN is not valid: it contains a newline" in result.err
    assert "lost the connection" not in result.err and "Traceback" not in result.err


def test_command_visible_is_a_submit_flag(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    shown = cli("submit", "--name", "shown", "--command-visible", "--json", "--", "true")
    assert shown.code == 0, shown.err
    assert shown.json()["spec"]["command_visible"] is True
    hidden = cli("submit", "--name", "unshown", "--json", "--", "true")
    assert hidden.json()["spec"]["command_visible"] is False
    wait_for(server, "shown", "succeeded")
    wait_for(server, "unshown", "succeeded")


# ---------------------------------------------------------------------- issue 16: the CLI guesses


def submitted_body(*args: str) -> tuple[Result, dict[str, Any] | None]:
    """`toposched submit ARGS` against a stand-in server that records the body it is sent and
    answers 201: what the CLI sends, whatever the server then makes of it."""
    bodies: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            answer = json.dumps(
                {
                    "name": bodies[-1].get("name") or "x",
                    "queue": "q",
                    "state": "pending",
                    "reason": "submitted",
                }
            ).encode()
            self.send_response(201)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *_: object) -> None:
            pass

    stand_in = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=stand_in.serve_forever, daemon=True).start()
    try:
        env = {key: value for key, value in os.environ.items() if key != "COLUMNS"}
        env.update(TOPOSCHED_URL=f"http://127.0.0.1:{stand_in.server_port}", TOPOSCHED_TOKEN="t")
        result = run(env, "submit", *args)
    finally:
        stand_in.shutdown()
        stand_in.server_close()
    return result, bodies[0] if bodies else None


def test_submit_takes_arenas_kind_and_keeps_options_out_of_the_command() -> None:
    result, body = submitted_body(
        "tfjob", "--name", "tf1", "--gpus", "1", "--workers", "2", "--ps", "1", "--gang",
        "--selector", "gpu=v100", "--selector", "zone=a", "--", "sleep", "5", "--workers", "9",
    )  # fmt: skip
    assert result.code == 0, result.err
    assert body is not None
    assert body["name"] == "tf1" and body["kind"] == "tensorflow" and body["ps"] == 1
    assert body["workers"] == 2 and body["gpus"] == 1
    assert body["selector"] == {"gpu": "v100", "zone": "a"}
    # Everything after `--` is the command's own, options of submit's name included.
    assert body["command"] == ["sleep", "5", "--workers", "9"]
    for word, kind in (("pytorchjob", "pytorch"), ("mpi", "mpi"), ("pytorch", "pytorch")):
        _, body = submitted_body(word, "--", "true")
        assert body is not None and body["kind"] == kind
    # No kind given: none is sent (the server's default).
    _, body = submitted_body("--", "true")
    assert body is not None and "kind" not in body and "ps" not in body


def test_submit_refuses_a_command_not_after_dashes() -> None:
    for args in (
        ("--gpus", "1", "echo", "hi", "--workers", "2"),
        ("tfjob", "echo", "hi", "--", "true"),
        ("echo", "hi"),
    ):
        result, body = submitted_body(*args)
        assert result.code == 2, (args, result.err)
        assert body is None and result.out == ""
        assert "the command to run goes after `--`" in result.err, result.err
        assert "toposched submit [KIND] [OPTIONS] -- COMMAND..." in result.err
    result, body = submitted_body("tfjobs", "--", "true")
    assert result.code == 2 and body is None
    assert "unknown job kind 'tfjobs'" in result.err and "tfjob" in result.err


def test_a_one_string_command_is_split_on_the_command_line_as_in_a_job_file(
    tmp_path: Path,
) -> None:
    _, flag = submitted_body("--", "sleep 5 'two words'")
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text("command: sleep 5 'two words'\n")
    _, filed = submitted_body("-f", str(jobfile))
    assert flag is not None and filed is not None
    assert flag["command"] == filed["command"] == ["sleep", "5", "two words"]
    # Several words are run as given: no word is split again.
    _, words = submitted_body("--", "echo", "a b")
    assert words is not None and words["command"] == ["echo", "a b"]
    bad, body = submitted_body("--", "echo 'unbalanced")
    assert bad.code == 2 and body is None and "cannot split" in bad.err


def test_an_arena_style_job_runs_its_kind_on_the_server(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    submitted = cli("submit", "tfjob", "--name", "tf-arena", "--gpus", "1", "--workers", "2",
                    "--gang", "--json", "--", "sleep 0.1")  # fmt: skip
    assert submitted.code == 0, submitted.err
    job = submitted.json()
    assert job["spec"]["kind"] == "tensorflow" and len(job["placement"]) == 2
    done = wait_for(server, "tf-arena", "succeeded")
    assert done["command"] == ["sleep", "0.1"]


def test_a_selector_no_node_matches_waits_and_says_so(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    submitted = cli("submit", "--name", "picky", "--selector", "gpu=a100", "--json", "--", "true")
    assert submitted.code == 0, submitted.err
    job = submitted.json()
    assert job["state"] == "pending" and job["spec"]["selector"] == {"gpu": "a100"}
    assert "no node has the labels gpu=a100" in job["reason"]
    labelled = cli("node", "label", "node-a", "gpu=a100")
    assert labelled.code == 0, labelled.err
    try:
        wait_for(server, "picky", "succeeded")
    finally:
        cli("node", "label", "node-a", "gpu-")


def test_delete_takes_several_names_and_says_which_failed(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    for name in ("d1", "d2"):
        assert cli("submit", "--name", name, "--", "sleep", "60").code == 0
    both = cli("delete", "d1", "d2")
    assert both.code == 0, both.err
    assert "deleting d1" in both.out and "deleting d2" in both.out
    wait_gone(server, "d1")
    wait_gone(server, "d2")
    assert cli("submit", "--name", "d3", "--", "true").code == 0
    wait_for(server, "d3", "succeeded")
    some = cli("delete", "no-such-job", "d1", "d3")
    assert some.code == 3, some.err  # the first failure's status: not found
    assert "error: no-such-job: no job named 'no-such-job'" in some.err
    assert "error: d1: no job named 'd1'" in some.err  # gone already
    assert "not deleted: no-such-job, d1 (2 of 3)" in some.err
    assert "deleted d3 (succeeded): its name is free" in some.out  # the others still go


def test_a_name_is_free_once_its_job_has_ended_and_been_deleted(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    first = cli("submit", "--name", "again", "--json", "--", "sh", "-c", "echo first")
    assert first.code == 0, first.err
    taken = cli("submit", "--name", "again", "--", "true")
    assert taken.code == 5 and "a job named 'again' already exists" in taken.err
    wait_for(server, "again", "succeeded")
    ended = cli("submit", "--name", "again", "--", "true")
    assert ended.code == 5 and "delete it to free its name" in ended.err
    deleted = cli("delete", "again")
    assert deleted.code == 0, deleted.err
    assert "deleted again" in deleted.out and "its name is free" in deleted.out
    assert cli("get", "again").code == 3
    listed = cli("list", "--all", "--json").json()["jobs"]
    assert not [job for job in listed if job["name"].startswith("again")]
    second = cli("submit", "--name", "again", "--json", "--", "sh", "-c", "echo second")
    assert second.code == 0, second.err
    assert second.json()["attempt"] in (-1, 0) and second.json()["restarts"] == 0
    done = wait_for(server, "again", "succeeded")
    # A new job: its own history and logs, none of the old one's.
    assert [h["new"] for h in done["history"]] == ["pending", "running", "succeeded"]
    logs = cli("logs", "again")
    assert logs.out == "second\n", logs.err


def test_a_deleted_live_jobs_name_is_free_once_it_has_stopped(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    """`delete` means gone, as kubectl's and Arena's: no second delete; `--keep` only cancels."""
    # A worker that takes its 3 s grace to stop: its name is taken meanwhile.
    slow = ["--checkpoint-signal", "SIGUSR1", "--checkpoint-grace", "3", "--", "sh", "-c",
            "trap '' USR1; sleep 60"]  # fmt: skip
    assert cli("submit", "--name", "busy", *slow).code == 0
    wait_for(server, "busy", "running")
    deleting = cli("delete", "busy")
    assert deleting.code == 0 and deleting.out.startswith("deleting busy: stopping")
    taken = cli("submit", "--name", "busy", "--", "true")
    assert taken.code == 5
    assert "(stopping); its name is free once it has stopped: it is being deleted" in taken.err
    wait_gone(server, "busy")
    assert cli("submit", "--name", "busy", "--", "true").code == 0
    wait_for(server, "busy", "succeeded")
    assert cli("delete", "busy").code == 0
    # --keep: cancelled, and kept until deleted again.
    assert cli("submit", "--name", "kept", "--", "sleep", "60").code == 0
    wait_for(server, "kept", "running")
    assert cli("delete", "--keep", "kept").out == "cancelling kept: stopping its workers\n"
    wait_for(server, "kept", "cancelled")
    assert cli("delete", "kept").out == "deleted kept (cancelled): its name is free\n"
    # A waiting job deleted is gone at once.
    assert cli("submit", "--name", "blocker", "--", "sleep", "60").code == 0
    waits = cli("submit", "--name", "waits", "--workers", "8", "--json", "--", "true").json()
    assert waits["state"] == "pending"
    assert cli("delete", "waits").out == "deleted waits (cancelled): its name is free\n"
    assert cli("get", "waits").code == 3


def test_logs_tail_prints_the_last_lines(server: ServerProcess, cli: Callable[..., Result]) -> None:
    submitted = cli("submit", "--name", "talker", "--", "seq", "1", "50")
    assert submitted.code == 0, submitted.err
    wait_for(server, "talker", "succeeded")
    tail, none, every, lines = run_all(
        user_env(server),
        ("logs", "talker", "--tail", "3"),
        ("logs", "talker", "--tail", "0"),
        ("logs", "talker", "--tail", "500"),
        ("logs", "talker", "-n", "2", "--json"),
    )
    assert tail.code == 0, tail.err
    assert tail.out == "48\n49\n50\n"
    assert none.out == ""
    assert every.out == "".join(f"{i}\n" for i in range(1, 51))
    assert [row["line"] for row in lines.json_lines()] == ["49", "50"]


def test_node_list_shows_each_nodes_gpus(server: ServerProcess, cli: Callable[..., Result]) -> None:
    holder = ("--name", "holder", "--gpus", "2", "--cpus", "1", "--memory", "1Gi")
    assert cli("submit", *holder, "--", "sleep", "60").code == 0
    table, as_json = run_all(user_env(server), ("node", "list"), ("node", "list", "--json"))
    assert table.code == 0, table.err
    header, row = (line for line in table.out.splitlines() if "NODE" in line or "node-a" in line)
    assert all(word in header for word in ("TYPE", "GPUS", "FREE", "UNHEALTHY", "LABELS"))
    cells = [cell.strip() for cell in row.split("│") if cell.strip()]
    assert cells[:5] == ["node-a", "V100 16 GiB", "8", "6", "-"]  # the emulated DGX-1's GPUs
    assert cells[5].startswith("1/") and cells[6].startswith("1 GiB/"), cells
    (node,) = as_json.json()["nodes"]
    assert node["name"] == "node-a"
    # This host's CPUs and memory, of which the holder's one worker holds 1 CPU and 1 GiB.
    assert (node["cpus_used"], node["memory_used"]) == (1000, 2**30)
    assert node["cpus"] == 1000 * len(os.sched_getaffinity(0)) and node["memory"] > 2**30


def test_list_shows_restarts_and_attempts(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    submitted = cli("submit", "--name", "flaky", "--restart", "on-failure", "--max-restarts",
                    "1", "--", "false")  # fmt: skip
    assert submitted.code == 0, submitted.err
    wait_for(server, "flaky", "failed")
    listed = cli("list", "--all")
    assert "RESTARTS" in listed.out
    row = next(line for line in listed.out.splitlines() if "flaky" in line)
    assert "1 (attempt 1)" in row
    got = cli("get", "flaky")
    assert re.search(r"attempt\s+1 \(1 restart\(s\)\)", got.out), got.out


def test_get_says_a_job_that_never_started_has_had_no_attempt(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    wide = cli("submit", "--name", "too-wide", "--workers", "2", "--gpus", "8", "--", "true")
    assert wide.code == 2, wide.out  # never fits: refused, not stored
    held = cli("submit", "--name", "held", "--gpus", "8", "--", "sleep", "30")
    waiting = cli("submit", "--name", "waits", "--gpus", "8", "--", "true")
    assert held.code == 0 and waiting.code == 0, (held.err, waiting.err)
    got = cli("get", "waits")
    assert re.search(r"attempt\s+none yet \(not started\)", got.out), got.out
    assert cli("delete", "held", "waits").code == 0


def test_gang_is_accepted_and_its_help_says_gangs_are_whole(server: ServerProcess) -> None:
    shown = run({**user_env(server), "COLUMNS": "300"}, "submit", "--help")
    assert shown.code == 0
    gang = next(line for line in shown.out.splitlines() if "--gang" in line)
    assert "changes nothing: every job is a gang, scheduled whole" in gang
    text = " ".join(shown.out.split())
    assert "Usage: toposched submit [KIND] [OPTIONS] -- COMMAND..." in text


def test_a_job_files_selector_merges_with_the_flags(tmp_path: Path) -> None:
    jobfile = tmp_path / "job.yaml"
    jobfile.write_text("command: [true]\nselector: {gpu: v100, zone: a}\n")
    _, body = submitted_body("-f", str(jobfile), "--selector", "zone=b")
    assert body is not None and body["selector"] == {"gpu": "v100", "zone": "b"}
    bad, body = submitted_body("--selector", "gpu", "--", "true")
    assert bad.code == 2 and body is None and "--selector: expected KEY=VALUE" in bad.err


def test_the_seeds_comparison_topology_on_and_off_with_predicted_speeds(
    server: ServerProcess, cli: Callable[..., Result], tmp_path: Path
) -> None:
    """The seeds' point from the CLI: GPU 0 busy, the same 4 x 1 VGG16 job gets an NVLink ring
    with `--gputopology=true` and GPUs 1-4 with `=false`, and `get` predicts both speeds (the
    performance model's 854.9 and 437.5 samples/s: 1.95x)."""
    busy = cli("submit", "--name", "seeds-busy", "--gputopology=false", "--", "sleep", "60")
    assert busy.code == 0, busy.err
    assert "topology off for this job: the lowest free GPU indices" in busy.out
    assert job(server, "seeds-busy")["placement"][0]["gpus"] == [0]
    on = cli("submit", "mpi", "--name", "seeds-on", "--workers", "4", "--model", "vgg16",
             "--gputopology=true", "--", "sleep", "60")  # fmt: skip
    assert on.code == 0, on.err
    assert "best placement now" in on.out
    assert "predicted 855 samples/s (100% of best)" in on.out
    shown_on, wide = cli("get", "seeds-on"), cli("list", "--wide")
    assert "predicted 855 samples/s (100% of best)" in shown_on.out
    assert re.search(r"seeds-on .* vgg16 +│ 855/s \(100%\)", wide.out), wide.out
    assert cli("delete", "seeds-on").code == 0
    wait_gone(server, "seeds-on")
    spec = tmp_path / "off.yaml"
    spec.write_text(
        "name: seeds-off\nworkers: 4\nmodel: vgg16\ngputopology: false\ncommand: sleep 60\n"
    )
    off = cli("submit", "-f", str(spec), "--json")
    assert off.code == 0, off.err
    answer = off.json()
    assert sorted(g for w in answer["placement"] for g in w["gpus"]) == [1, 2, 3, 4]
    assert answer["ring_gbps"] == 6.0
    assert answer["predicted"] == {
        "model": "vgg16",
        "samples_per_s": 437.5,
        "best_samples_per_s": 854.9,
        "share": 0.512,
    }
    text = cli("get", "seeds-off").out
    assert "ring 6 GB/s, predicted 438 samples/s (51% of best)" in text
    assert "vgg16 (the best placement of as many GPUs: 855 samples/s)" in text
    assert "best placement" not in job(server, "seeds-off")["reason"]
    # A job that holds no GPUs predicts nothing; one with no model is predicted as resnet50.
    waiting = cli(
        "submit", "--name", "seeds-waits", "--workers", "8", "--json", "--", "true"
    ).json()
    assert waiting["state"] == "pending" and waiting["predicted"] is None
    assert job(server, "seeds-busy")["predicted"]["model"] == "resnet50"


def test_arenas_quoted_command_without_dashes_is_split_as_a_shell_would() -> None:
    """`arena submit mpi --gpus=1 --workers=4 --gang "mpirun python train.py"`: the command
    quoted as one word after the options, no `--`."""
    result, body = submitted_body(
        "mpi", "--gpus=1", "--workers=4", "--gang", "mpirun python train.py --lr 'a b'"
    )
    assert result.code == 0, result.err
    assert body is not None and body["kind"] == "mpi" and body["workers"] == 4
    assert body["command"] == ["mpirun", "python", "train.py", "--lr", "a b"]
    _, body = submitted_body("tfjob", "train.sh")  # after a kind, one word is the command
    assert body is not None and body["command"] == ["train.sh"]
    _, body = submitted_body("python train.py")  # no kind: a quoted line of several words
    assert body is not None and body["command"] == ["python", "train.py"]
    # One bare word with no kind stays refused: more likely a misspelt kind than a command.
    refused, body = submitted_body("pytorh")
    assert refused.code == 2 and body is None
    bad, body = submitted_body("mpi", "echo 'unbalanced")
    assert bad.code == 2 and body is None
    assert bad.err.startswith("error: the command: cannot split"), bad.err


def test_get_type_checks_the_kind_and_a_worker_that_cannot_start_says_why(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    assert cli("submit", "--name", "no-prog", "--", "no-such-program-xyz", "--flag").code == 0
    failed = wait_for(server, "no-prog", "failed")
    assert failed["reason"] == "worker 0: cannot run 'no-such-program-xyz': not found on PATH"
    right, wrong, bad = run_all(
        user_env(server),
        ("get", "no-prog", "--type", "pytorchjob"),
        ("get", "no-prog", "--type", "mpijob"),
        ("get", "no-prog", "--type", "caffe"),
    )
    assert right.code == 0 and "cannot run 'no-such-program-xyz': not found on PATH" in right.out
    assert wrong.code == 3
    assert wrong.err == "error: no mpi job named 'no-prog' (no-prog is a pytorch job)\n"
    assert bad.code == 2 and "--type: unknown job kind 'caffe'" in bad.err


def test_submit_exports_the_submitters_environment_as_sbatch_does(
    server: ServerProcess, tmp_path: Path
) -> None:
    """By default, for a server on this machine, the variables that choose the programs a job
    runs (a virtualenv's python); --export NAMES, ALL (never the token) or NONE otherwise."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "whoami-py").write_text("#!/bin/sh\necho venv-python\n")
    (venv / "bin" / "whoami-py").chmod(0o755)
    env = user_env(server)
    env.update(
        PATH=f"{venv / 'bin'}{os.pathsep}{env['PATH']}",
        VIRTUAL_ENV=str(venv),
        SECRET_KEY="hunter2",
        TOPOSCHED_TOKEN=server.token,
    )
    show = (
        "whoami-py; echo venv=$VIRTUAL_ENV secret=${SECRET_KEY:-unset} "
        "token=${TOPOSCHED_TOKEN:-unset}"
    )
    none = "echo ${VIRTUAL_ENV:-none}"
    made = run_all(
        env,
        ("submit", "--name", "exp-default", "--", "sh", "-c", show),
        ("submit", "--name", "exp-none", "--export", "NONE", "--", "sh", "-c", none),
        ("submit", "--name", "exp-named", "--export", "SECRET_KEY", "--", "sh", "-c", show),
        ("submit", "--name", "exp-all", "--export", "ALL", "--", "sh", "-c", show),
        (
            "submit",
            "--name",
            "exp-env",
            "-e",
            "VIRTUAL_ENV=/given",
            "--",
            "sh",
            "-c",
            "echo $VIRTUAL_ENV",
        ),
        ("submit", "--export", "NOT_SET_HERE", "--", "true"),
        ("submit", "--export", "BAD-NAME", "--", "true"),
    )
    assert all(r.code == 0 for r in made[:5]), [r.err for r in made[:5]]
    assert made[5].code == 2
    assert made[5].err == "error: --export: NOT_SET_HERE is not set in your environment\n"
    assert made[6].code == 2 and "'BAD-NAME' is not a variable name" in made[6].err
    names = ("exp-default", "exp-none", "exp-named", "exp-all", "exp-env")
    for name in names:
        wait_for(server, name, "succeeded")
    logs = {name: run(env, "logs", name).out for name in names}
    assert logs["exp-default"] == f"venv-python\nvenv={venv} secret=unset token=unset\n"
    assert logs["exp-none"] == "none\n"
    assert logs["exp-named"].endswith("venv= secret=hunter2 token=unset\n")
    assert logs["exp-all"] == f"venv-python\nvenv={venv} secret=hunter2 token=unset\n"
    assert logs["exp-env"] == "/given\n"  # --env wins over the export
    shown = run(env, "get", "exp-default").out
    assert re.search(r"exported +PATH, VIRTUAL_ENV \(from the submitter's environment\)", shown)
    assert job(server, "exp-env")["spec"]["exported"] == ["PATH"]


# Runs `toposched ARGS` in this interpreter and prints, as it ends, the modules it loaded.
MODULES_AT_EXIT = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.__stdout__))
sys.argv = ["toposched", *sys.argv[1:]]
from toposched.cli.main import main
main()
"""


def test_logs_and_json_answers_load_neither_typer_nor_rich(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    assert cli("submit", "--name", "quiet", "--", "echo", "hi").code == 0
    wait_for(server, "quiet", "succeeded")
    loaded = {}
    for args in (("logs", "quiet"), ("list", "--all", "--json"), ("get", "quiet")):
        done = subprocess.run(
            [sys.executable, "-c", MODULES_AT_EXIT, *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=user_env(server),
        )
        assert done.returncode == 0, done.stderr
        loaded[args[0]] = set(json.loads(done.stdout.splitlines()[-1]))
    assert "quiet" in done.stdout  # get's text
    for name, modules in loaded.items():
        assert not {"typer", "click", "httpx"} & modules, name
    assert "rich" not in loaded["logs"] and "rich" not in loaded["list"]
    assert "rich" in loaded["get"]  # its text is rich's


# Writes a marker on its checkpoint signal and exits 0; else sleeps far past its limit.
CAPPED = """\
import pathlib, signal, sys, time
def saved(signum, frame):
    pathlib.Path(sys.argv[1]).write_text(str(time.time()))
    sys.exit(0)
signal.signal(signal.SIGUSR1, saved)
pathlib.Path(sys.argv[2]).write_text(str(time.time()))
time.sleep(120)
"""


def test_a_job_at_its_time_limit_gets_its_signal_and_ends_timed_out(
    server: ServerProcess, cli: Callable[..., Result], tmp_path: Path
) -> None:
    saved, began = tmp_path / "saved", tmp_path / "began"
    submitted = cli(
        "submit", "--name", "capped", "--time", "0:03", "--checkpoint-signal", "SIGUSR1",
        "--", sys.executable, "-c", CAPPED, str(saved), str(began),
    )  # fmt: skip
    assert submitted.code == 0, submitted.err
    ended = wait_for(server, "capped", "timed-out")
    # The signal came at the limit (3 s after the server started it), not at the server's
    # next tick (every 5 s) or later; the worker had begun before it.
    signalled = float(saved.read_text())
    assert float(began.read_text()) < signalled
    assert 3.0 <= signalled - ended["started_at"] < 4.5, signalled - ended["started_at"]
    assert ended["reason"].startswith("timed-out: reached its time limit of 00:00:03 (ran 00:00:0")
    assert ended["spec"]["limit_s"] == 3.0
    assert [h["new"] for h in ended["history"]][-2:] == ["stopping", "timed-out"]
    listed = cli("list", "--all", "--state", "timed-out")
    assert listed.code == 0 and re.search(r"capped\W+default\W+\w+\W+timed-out\W", listed.out), (
        listed.out
    )
