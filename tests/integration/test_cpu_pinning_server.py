"""A real server pins each worker to its GPUs' NUMA cores, and `get` says which cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_cpu_pinning import SHOW
from tests.server import TOPOSCHED, Api, running_server, wait_for

pytestmark = [
    pytest.mark.skipif(
        not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1 to pin workers to"
    ),
]


def topology(tmp_path: Path, *affinity: str) -> Path:
    """An `nvidia-smi topo -m` capture of two NVLinked GPUs with these CPU lists."""
    rows = [
        f"GPU{i}\t{'NV1' if i else ' X '}\t{' X ' if i else 'NV1'}\t{cpus}\t{i}"
        for i, cpus in enumerate(affinity)
    ]
    path = tmp_path / "two-gpus.txt"
    path.write_text("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n" + "\n".join(rows) + "\n")
    return path


def masks(out: Path, count: int) -> list[list[int]]:
    """The CPU masks the job's `count` processes saw, in no set order."""
    wait_for(lambda: len(list(out.glob("*.json"))) >= count, f"{count} workers to report")
    return sorted(json.loads(path.read_text())["mask"] for path in out.glob("*.json"))


def pinned(api: Api, name: str, count: int) -> Any:
    """The job once `get` shows the cores of its `count` processes (written as it starts)."""
    return wait_for(
        lambda: len((job := api.job(name))["cores"] or []) == count and job, f"{name}'s cores"
    )


def test_get_shows_each_worker_on_its_gpus_numa_node(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    emulate = topology(tmp_path, "1", "0")
    with running_server(tmp_path, args=("--emulate", str(emulate))) as server:
        api = Api(server)
        command = [sys.executable, "-c", SHOW, str(out), "sleep"]
        api.submit(name="pin", workers=2, gpus=1, command=command)
        job = pinned(api, "pin", 2)
        # GPU 0's node has CPU 1, GPU 1's CPU 0: each worker is on the one of its GPU
        want = {slot["worker"]: "1" if slot["gpus"] == [0] else "0" for slot in job["placement"]}
        assert [(c["process"], c["name"], c["cores"], c["note"]) for c in job["cores"]] == [
            (w, f"worker-{w}", want[w], "") for w in (0, 1)
        ]
        assert masks(out, 2) == [[0], [1]]
        shown = subprocess.run(
            [*TOPOSCHED, "get", "pin"], env=server.env(), capture_output=True, text=True
        )
        assert shown.returncode == 0, shown.stderr
        assert "CPU cores" in shown.stdout
        assert "worker-1" in shown.stdout
        api.http.delete("/api/v1/jobs/pin")


def test_workers_asking_a_cpu_each_get_a_core_each(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    emulate = topology(tmp_path, "0-1", "0-1")
    with running_server(tmp_path, args=("--emulate", str(emulate))) as server:
        api = Api(server)
        command = [sys.executable, "-c", SHOW, str(out), "sleep"]
        api.submit(name="cpus", workers=2, gpus=1, cpus="1", command=command)
        job = pinned(api, "cpus", 2)
        assert sorted(c["cores"] for c in job["cores"]) == ["0", "1"]
        assert masks(out, 2) == [[0], [1]]
        api.http.delete("/api/v1/jobs/cpus")
