"""The README's first commands, exactly as a new user types them: `make serve`, then the tour."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server import kill_leftover_workers

REPO = Path(__file__).resolve().parents[2]
PORT = 8080  # the README's server listens on the default port


def bash_blocks() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```bash\n(.*?)```", text, flags=re.S)


def port_taken() -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", PORT)) == 0


def test_the_first_two_commands_are_make_serve_and_make_test() -> None:
    first = [line.split("#")[0].strip() for line in bash_blocks()[0].splitlines()]
    assert first == ["make serve", "make test"]


@pytest.mark.skipif(port_taken(), reason=f"port {PORT} is in use, and the README uses it")
def test_make_serve_then_the_tour(tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("TOPOSCHED_")}
    env["TOPOSCHED_DATA_DIR"] = str(tmp_path / "data")
    env.pop("COLUMNS", None)
    log = (tmp_path / "serve.log").open("wb")
    server = subprocess.Popen(
        ["make", "serve"], cwd=REPO, env=env, stdout=log, stderr=log, start_new_session=True
    )
    try:
        deadline = time.monotonic() + 120  # make may (re)install the venv first
        while True:
            assert server.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                if httpx.get(f"http://127.0.0.1:{PORT}/api/v1/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "make serve did not start the server"
            time.sleep(0.2)
        said = (tmp_path / "serve.log").read_text()
        assert "admin token written to" in said
        tour = bash_blocks()[1]
        done = subprocess.run(
            ["bash", "-e", "-c", tour], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        for name in ("pt", "tf", "mpi"):
            assert f"submitted {name} to queue default: running" in done.stdout
        # The fourth job waits for GPUs and says why; deleted, its name is free again.
        assert "submitted vgg16-4gpu to queue default: pending (needs 4 GPUs" in done.stdout
        assert "deleted vgg16-4gpu (cancelled): its name is free" in done.stdout
        assert "[ps 0] serving the variables of" in done.stdout
        toposched = str(REPO / ".venv" / "bin" / "toposched")

        def run(*args: str) -> str:
            got = subprocess.run([toposched, *args], env=env, capture_output=True, text=True)
            assert got.returncode == 0, got.stderr
            return got.stdout

        def job(name: str) -> dict[str, Any]:
            found: dict[str, Any] = json.loads(run("get", name, "--json"))
            return found

        deadline = time.monotonic() + 90
        while any(job(n)["state"] != "succeeded" for n in ("pt", "tf", "mpi", "vgg16-4gpu")):
            assert time.monotonic() < deadline, "the README's jobs did not finish"
            time.sleep(0.5)
        # `logs -f` followed rank 1 to its end, on the GPU it was given.
        gpu = job("pt")["placement"][1]["gpus"][0]
        assert f"[rank 1/2] attempt 0, GPU {gpu}: from step 0 of 30" in done.stdout
        assert "[rank 1/2] done" in done.stdout
        # The resubmitted job is a new one: its history starts afresh.
        again = job("vgg16-4gpu")
        assert [h["new"] for h in again["history"]] == ["pending", "running", "succeeded"]
        assert [j["name"] for j in json.loads(run("list", "--all", "--json"))["jobs"]] == [
            "pt",
            "tf",
            "mpi",
            "vgg16-4gpu",
        ]
        # The comparison, on the idle node.
        shell = {**env, "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"}
        compared = subprocess.run(  # in the tour's shell, which has the venv on its PATH
            ["bash", "-e", "-c", bash_blocks()[2]],
            cwd=REPO,
            env=shell,
            capture_output=True,
            text=True,
        )
        assert compared.returncode == 0, compared.stderr
        lines = [" ".join(line.split()) for line in compared.stdout.splitlines()]
        keys = [line.split(" ", 1)[0] for line in lines if line.startswith(("reason", "speed"))]
        assert keys == ["reason", "speed", "reason", "speed"]
        got = "\n".join(lines)
        assert "GPUs 4,5,6,7 (ring 25 GB/s): best placement now" in got
        assert "speed ring 25 GB/s, predicted 855 samples/s (100% of best)" in got
        assert "GPUs 1,2,3,4 (ring 6 GB/s): topology off for this job" in got
        assert "speed ring 6 GB/s, predicted 438 samples/s (51% of best)" in got
        said = (tmp_path / "serve.log").read_text()
        assert "job vgg16-4gpu: pending -> cancelled: cancelled while pending" in said
        assert "job pt: running -> succeeded: all workers exited 0" in said
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()
        kill_leftover_workers(tmp_path / "data")
