"""examples/sdk_submit.py, as docs/sdk.md runs it, against a real server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.server import REPO, Api, running_server

EXAMPLE = REPO / "examples" / "sdk_submit.py"


def test_the_sdk_example_submits_waits_and_prints_each_workers_log(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:

        def example(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, str(EXAMPLE), *args],
                env=server.env(),
                capture_output=True,
                text=True,
                timeout=120,
            )

        done = example("--name", "sdk-hello", "--workers", "2", "--gpus", "2")
        assert done.returncode == 0, done.stderr
        job = Api(server).job("sdk-hello")
        assert job["state"] == "succeeded"
        lines = done.stdout.splitlines()
        assert lines[0].startswith("submitted sdk-hello: ")
        assert lines[1] == "sdk-hello: succeeded (all workers exited 0)"
        for slot in job["placement"]:
            gpus = ",".join(map(str, slot["gpus"]))
            assert f"--- worker {slot['worker']} on node-a GPUs {slot['gpus']}" in lines
            assert f"rank {slot['worker']} of 2 on GPUs {gpus}" in lines

        taken = example("--name", "sdk-hello")
        assert taken.returncode == 5
        assert "a job named 'sdk-hello' already exists (succeeded)" in taken.stderr

        refused = example("--gpus", "9")
        assert (refused.returncode, refused.stdout) == (2, "")
        assert "body.gpus" in refused.stderr
