"""Job kinds through the REST API: a real server starts each kind's members, serves their logs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.server import Api, ServerProcess, running_server, wait_for
from toposched.client.jobfile import load_job_file

MEMBER = str(Path(__file__).parent / "workers" / "member.py")


def command(out: Path, **actions: str) -> list[str]:
    return [sys.executable, MEMBER, str(out), *(f"{r}={a}" for r, a in actions.items())]


def seen(out: Path, count: int) -> list[dict[str, Any]]:
    """What each of `count` members recorded (its role and environment)."""
    wait_for(lambda: len(list(out.glob("info-*.json"))) == count, f"{count} members to start")
    return [json.loads(path.read_text()) for path in out.glob("info-*.json")]


def logs(api: Api, name: str, index: int) -> str:
    reply = api.http.get(f"/api/v1/jobs/{name}/logs", params={"worker": index})
    assert reply.status_code == 200, reply.text
    return reply.text


def test_a_tensorflow_job_runs_its_parameter_servers_without_gpus(
    api: Api, server: ServerProcess, out: Path
) -> None:
    body = command(out, worker="wait", ps="sleep")
    job = api.submit(name="tf", kind="tfjob", workers=2, ps=1, command=body)
    assert (job["spec"]["kind"], job["spec"]["ps"], job["state"]) == ("tensorflow", 1, "running")
    members = seen(out, 3)
    tasks = {}
    for member in members:
        config = json.loads(member["env"]["TF_CONFIG"])
        tasks[config["task"]["type"]] = member["env"]
        assert set(config["cluster"]) == {"chief", "worker", "ps"}
    gpus = [",".join(map(str, p["gpus"])) for p in job["placement"]]
    assert tasks["chief"]["CUDA_VISIBLE_DEVICES"] == gpus[0]
    assert tasks["worker"]["CUDA_VISIBLE_DEVICES"] == gpus[1]
    assert tasks["ps"]["CUDA_VISIBLE_DEVICES"] == ""
    checkpoints = str(server.data_dir / "runs" / "tf" / "checkpoint")
    assert {m["env"]["TOPOSCHED_CHECKPOINT_DIR"] for m in members} == {checkpoints}
    assert sum(1 for holder in api.holders().values() if holder == "tf") == 2
    # The parameter server's log comes after the workers'
    assert "ps " in logs(api, "tf", 2) and "worker " in logs(api, "tf", 1)
    reply = api.http.get("/api/v1/jobs/tf/logs", params={"worker": 3})
    assert reply.status_code == 422 and "has 3 log(s)" in reply.text
    (out / "go").write_text("")
    done = api.until("tf", "succeeded")
    assert done["reason"] == "all workers exited 0"


def test_a_failing_parameter_server_fails_its_job(api: Api, out: Path) -> None:
    body = command(out, worker="sleep", ps="exit:3")
    api.submit(name="tf-bad-ps", kind="tensorflow", ps=1, command=body)
    failed = api.until("tf-bad-ps", "failed")
    assert "ps-0 exited 3" in failed["reason"]


def test_an_mpi_job_runs_its_launcher_with_every_gpu_and_the_hostfile(
    api: Api, server: ServerProcess, out: Path
) -> None:
    job = api.submit(
        name="mpi", kind="mpijob", workers=2, gpus=2, command=command(out, launcher="wait")
    )
    assert job["spec"]["kind"] == "mpi"
    [launcher] = seen(out, 1)
    assert launcher["role"] == "launcher"
    env = launcher["env"]
    hostfile = server.data_dir / "runs" / "mpi" / "attempt-0" / "hostfile"
    assert env["OMPI_MCA_orte_default_hostfile"] == env["TOPOSCHED_HOSTFILE"] == str(hostfile)
    assert hostfile.read_text() == "127.0.0.1 slots=4\n"
    held = [str(g) for p in job["placement"] for g in p["gpus"]]
    assert env["CUDA_VISIBLE_DEVICES"] == ",".join(held)
    assert sum(1 for holder in api.holders().values() if holder == "mpi") == 4
    assert "launcher " in logs(api, "mpi", 0)
    reply = api.http.get("/api/v1/jobs/mpi/logs", params={"worker": 1})
    assert reply.status_code == 422 and "has 1 log(s)" in reply.text
    (out / "go").write_text("")
    assert api.until("mpi", "succeeded")["reason"] == "all workers exited 0"


def test_kinds_and_parameter_servers_are_checked_at_submission(api: Api) -> None:
    for body, loc in (
        ({"kind": "caffe"}, ["body", "kind"]),
        ({"ps": 1}, ["body", "ps"]),
        ({"kind": "mpi", "ps": 1}, ["body", "ps"]),
        ({"kind": "tensorflow", "ps": 65}, ["body", "ps"]),
    ):
        reply = api.http.post("/api/v1/jobs", json={"name": "refused", "command": ["true"], **body})
        assert reply.status_code == 422, reply.text
        assert [d["loc"] for d in reply.json()["detail"]] == [loc]
    assert api.http.get("/api/v1/jobs/refused").status_code == 404


def test_kill_9_and_restart_adopts_parameter_servers_and_launchers(
    tmp_path: Path, out: Path
) -> None:
    tf, mpi = out / "tf", out / "mpi"
    tf.mkdir()
    mpi.mkdir()
    with running_server(tmp_path) as server:
        api = Api(server)
        api.submit(name="tf", kind="tensorflow", ps=1, command=command(tf, worker="wait"))
        api.submit(name="mpi", kind="mpi", workers=2, command=command(mpi, launcher="wait"))
        seen(tf, 2)
        seen(mpi, 1)
        server.kill()
        server.restart()
        api = Api(server)
        for name in ("tf", "mpi"):
            job = api.job(name)
            assert (job["state"], job["attempt"]) == ("running", 0), job["history"]
        (tf / "go").write_text("")
        (mpi / "go").write_text("")
        assert api.until("tf", "succeeded")["attempt"] == 0
        assert api.until("mpi", "succeeded")["attempt"] == 0


EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"
QUICK = ["--steps", "3", "--step-s", "0.05"]  # argparse takes the last: a short run


def example(file: str, *extra: str) -> dict[str, Any]:
    spec = load_job_file(EXAMPLES / file).spec
    assert spec["command"][0] == "python"
    return {**spec, "command": [sys.executable, *spec["command"][1:], *extra]}


MPI_RANKS = [f"[rank {r}/4] done" for r in range(4)]


@pytest.mark.parametrize(
    ("file", "ends"),
    [
        ("pytorch-steps.yaml", [["[rank 0/2] done"], ["[rank 1/2] done"]]),
        ("tensorflow-ps.yaml", [["[chief 0] done"], ["[worker 0] done"], ["[ps 0] SIGTERM"]]),
        ("mpi-steps.yaml", [[*MPI_RANKS, "[launcher] ranks ended with [0, 0, 0, 0]"]]),
    ],
)
def test_each_kinds_example_runs_each_member(api: Api, file: str, ends: list[list[str]]) -> None:
    """Every member's log, by its index, says what it did to the end."""
    spec = example(file, *QUICK)
    job = api.submit(**spec)
    assert job["spec"]["kind"] in file
    api.until(spec["name"], "succeeded")
    for index, lines in enumerate(ends):
        text = logs(api, spec["name"], index)
        assert all(line in text for line in lines), text
    reply = api.http.get(f"/api/v1/jobs/{spec['name']}/logs", params={"worker": len(ends)})
    assert reply.status_code == 422


def test_an_example_saves_its_step_in_the_jobs_checkpoint_directory(
    api: Api, server: ServerProcess
) -> None:
    spec = example("pytorch-steps.yaml", "--steps", "1000", "--step-s", "0.05")
    spec["name"] = "saves"
    api.submit(**spec)
    wait_for(lambda: "step 3/1000" in logs(api, "saves", 1), "a few steps")
    api.http.delete("/api/v1/jobs/saves")  # stopped with its checkpoint signal
    api.until("saves", "cancelled")
    assert "SIGUSR1: saved step" in logs(api, "saves", 1)
    saved = json.loads((server.data_dir / "runs/saves/checkpoint/rank-1.json").read_text())
    assert saved["step"] >= 3


@pytest.mark.parametrize(
    ("script", "args", "saved"),
    [
        ("checkpoint_loop.py", ["--steps", "2", "--step-time", "0.01"], "rank-0.json"),
        ("hpsearch.py", ["--trials", "2", "--trial-time", "0.01"], "rank-0.jsonl"),
        ("steps.py", QUICK, "rank-0.json"),
    ],
)
def test_the_examples_keep_their_state_where_the_server_says(
    tmp_path: Path, script: str, args: list[str], saved: str
) -> None:
    state = tmp_path / "checkpoint"
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("CHECKPOINT_DIR", "HPSEARCH_DIR")
    }
    env |= {"TOPOSCHED_CHECKPOINT_DIR": str(state), "RANK": "0", "WORLD_SIZE": "1"}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert [p.name for p in state.iterdir()] == [saved]
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint"]  # nothing beside it
