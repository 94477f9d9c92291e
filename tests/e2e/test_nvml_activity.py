"""GPU utilization through NVML, per GPU and per job, in `top`, `get`, the API and /metrics: a
real server whose `pynvml` is FakeNvml (no NVIDIA GPU on CI machines; tests/fakes)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Result, run_cli
from tests.server import Api, ServerProcess, fake_nvml_server, wait_for

GIB = 2**30


@pytest.fixture
def nvml(tmp_path: Path) -> Iterator[tuple[ServerProcess, Path]]:
    with fake_nvml_server(tmp_path) as found:
        yield found


def cli(server: ServerProcess, *args: str) -> Result:
    return run_cli(*args, **{"TOPOSCHED_URL": server.url, "TOPOSCHED_TOKEN": server.token})


def set_gpus(state: Path, gpus: dict[int, dict[str, object]]) -> None:
    found = json.loads(state.read_text())
    found["gpus"] = {str(i): gpu for i, gpu in gpus.items()}
    state.write_text(json.dumps(found))


def test_utilization_per_gpu_and_job_in_top_get_api_and_metrics(
    nvml: tuple[ServerProcess, Path],
) -> None:
    server, state = nvml
    api = Api(server)
    (node,) = api.get("/api/v1/nodes")["nodes"]
    assert node["source"] == "nvml"
    assert node["activity_source"] == "NVML GPU utilization"
    api.submit(name="train", gpus=2, command=["sleep", "600"])
    gpus = [g for w in api.until("train", "running")["placement"] for g in w["gpus"]]
    free = next(g for g in range(8) if g not in gpus)
    first, second = gpus
    set_gpus(
        state,
        {
            first: {"busy": 90, "memory_used": 10 * GIB, "pids": [4242]},
            second: {"busy": 70, "memory_used": 6 * GIB, "pids": [4243]},
            free: {"busy": 35, "memory_used": GIB, "pids": [31337]},
        },
    )
    wait_for(
        lambda: (api.job("train").get("activity") or {}).get("busy_pct") == 80.0,
        "the job's mean over its GPUs",
    )
    job = api.job("train")
    assert job["activity"]["source"] == "nvml"
    by_index = {g["index"]: g for g in api.get("/api/v1/nodes")["nodes"][0]["gpus"]}
    assert (by_index[first]["busy_pct"], by_index[first]["memory_used"]) == (90.0, 10 * GIB)
    assert by_index[first]["outside"] == []  # its job's own process
    assert by_index[free]["job"] is None and by_index[free]["outside"] == [31337]
    get = cli(server, "get", "train").out
    assert re.search(r"activity +GPUs 80% busy now, \d+% on average \(\d+ samples\)", get), get
    top = cli(server, "top", "node").out
    assert re.search(rf"GPU{first} +│ train +│ +90% 10\.0 GiB", top), top
    assert "pids 31337 outside the scheduler" in top
    assert "BUSY: NVML GPU utilization" in top
    jobs = json.loads(cli(server, "top", "job", "--json").out)["jobs"]
    assert [j["activity"]["busy_pct"] for j in jobs] == [80.0]
    metrics = api.http.get("/metrics").text
    assert (
        f'toposched_gpu_busy_percent{{gpu="{first}",job="train",node="node-a",'
        'queue="default",source="nvml"} 90.0'
    ) in metrics
    assert 'toposched_job_busy_percent{job="train",queue="default",source="nvml"} 80.0' in metrics
    assert f'toposched_gpu_outside_processes{{gpu="{free}",node="node-a"}} 1.0' in metrics
    assert "process 31337 runs on it but no job holds it" in server.log()


def test_an_idle_rule_reads_the_busiest_gpu(nvml: tuple[ServerProcess, Path]) -> None:
    server, state = nvml
    api = Api(server)
    idle = {"after": "1s", "below": 10, "action": "stop"}
    api.submit(name="half", gpus=2, idle=idle, command=["sleep", "600"])
    first, second = [g for w in api.until("half", "running")["placement"] for g in w["gpus"]]
    # One GPU busy keeps the job: the rule needs every GPU below the threshold.
    set_gpus(state, {first: {"busy": 0}, second: {"busy": 50}})
    wait_for(lambda: (api.job("half").get("activity") or {}).get("samples", 0) >= 6, "samples")
    assert api.state("half") == "running"
    set_gpus(state, {first: {"busy": 0}, second: {"busy": 9}})
    ended = api.until("half", "idle-stopped")
    assert "its GPUs stayed below 10% busy for 1s (busiest 9% now" in ended["reason"]
