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
        assert "submitted hello" in done.stdout
        toposched = str(REPO / ".venv" / "bin" / "toposched")

        def state(name: str) -> str:
            got = subprocess.run(
                [toposched, "get", name, "--json"], env=env, capture_output=True, text=True
            )
            return str(json.loads(got.stdout)["state"])

        deadline = time.monotonic() + 60
        while state("hello") != "succeeded" or state("vgg16-4gpu") != "succeeded":
            assert time.monotonic() < deadline, "the README's jobs did not finish"
            time.sleep(0.2)
        logs = subprocess.run(
            [toposched, "logs", "hello", "--worker", "1"], env=env, capture_output=True, text=True
        )
        hello = json.loads(
            subprocess.run(
                [toposched, "get", "hello", "--json"], env=env, capture_output=True, text=True
            ).stdout
        )
        gpus = ",".join(map(str, hello["placement"][1]["gpus"]))
        assert logs.stdout.strip() == f"1 {gpus}"
    finally:
        os.killpg(server.pid, signal.SIGINT)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
        log.close()
        kill_leftover_workers(tmp_path / "data")
