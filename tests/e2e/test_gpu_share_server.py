"""Shared GPUs on a real server (issue 42 item 3, "Done when"): an emulated DGX-1 whose
`pynvml` is FakeNvml (no NVIDIA GPU on CI machines; tests/fakes), so that each process's GPU
memory can be set while the jobs run. Four jobs of a quarter share one GPU and a fifth goes to
another; a 2-GPU job never gets a shared GPU; a job over its memory share is flagged in `get`,
`top` and /metrics (or stopped, where it asked); bad values are refused naming the flag."""

from __future__ import annotations

import json
import re
import socket
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Result, run_cli
from tests.server import Api, ServerProcess, fake_nvml_server, wait_for
from toposched.executors.supervisor import read_pids

GIB = 2**30
H100 = 81559 * 2**20  # the fake's GPU memory (tests/fakes/fake_nvml.py)


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    with fake_nvml_server(tmp_path_factory.mktemp("share")) as found:
        yield found


def cli(server: ServerProcess, *args: str) -> Result:
    return run_cli(*args, **{"TOPOSCHED_URL": server.url, "TOPOSCHED_TOKEN": server.token})


def gpus_of(job: dict[str, object]) -> list[int]:
    return [g for w in job["placement"] for g in w["gpus"]]  # type: ignore[attr-defined]


def worker_pid(server: ServerProcess, job: str) -> int:
    attempt = Api(server).job(job)["attempt"]
    run_dir = server.data_dir / "runs" / job / f"attempt-{attempt}"
    pids = wait_for(lambda: read_pids(run_dir, 0), f"{job}'s worker pid")
    return pids.worker_pid


def set_processes(state: Path, gpu: int, used: dict[int, int]) -> None:
    found = json.loads(state.read_text())
    found["gpus"] = {
        str(gpu): {
            "busy": 50,
            "memory_used": sum(used.values()),
            "pids": list(used),
            "processes": {str(pid): b for pid, b in used.items()},
        }
    }
    state.write_text(json.dumps(found))


def test_four_quarters_share_one_gpu_a_fifth_goes_to_another_and_whole_jobs_stay_off(
    nvml: tuple[ServerProcess, Path],
) -> None:
    server, _ = nvml
    api = Api(server)
    for name in "abcde":
        api.submit(name=name, gpu_fraction=0.25, command=["sleep", "600"])
    placed = {name: gpus_of(api.until(name, "running")) for name in "abcde"}
    assert all(len(gpus) == 1 for gpus in placed.values())
    first = placed["a"][0]
    assert {placed[n][0] for n in "abcd"} == {first}, placed
    assert placed["e"][0] != first
    whole = gpus_of(api.submit(name="pair", gpus=2, command=["sleep", "600"]))
    whole = gpus_of(api.until("pair", "running"))
    assert len(whole) == 2 and not set(whole) & {first, placed["e"][0]}, (whole, placed)
    (node,) = api.get("/api/v1/nodes")["nodes"]
    shares = {g["index"]: g["shares"] for g in node["gpus"]}
    assert [(s["job"], s["milli"]) for s in shares[first]] == [(n, 250) for n in "abcd"]
    assert node["gpus"][first]["job"] is None  # nobody holds a shared GPU whole
    top = cli(server, "top", "node").out
    assert re.search(rf"GPU{first} +│ a 0\.25, b 0\.25, c 0\.25, d 0\.25 \(shared, 0 left\)", top)
    assert re.search(rf"GPU{placed['e'][0]} +│ e 0\.25 \(shared, 0\.75 left\)", top), top
    listed = cli(server, "top", "job").out
    assert re.search(r"\ba +│ default +│ running +│ 1x0\.25 ", listed), listed
    api.drain()


def test_a_job_over_its_memory_share_is_flagged_in_get_top_and_metrics(
    nvml: tuple[ServerProcess, Path],
) -> None:
    server, state = nvml
    api = Api(server)
    api.submit(name="big", gpu_fraction=0.25, command=["sleep", "600"])
    api.submit(name="small", gpu_fraction=0.25, gpu_memory_share="4Gi", command=["sleep", "600"])
    gpu = gpus_of(api.until("big", "running"))[0]
    assert gpus_of(api.until("small", "running")) == [gpu]
    big, small = worker_pid(server, "big"), worker_pid(server, "small")
    # big's share is a quarter of the GPU's memory (20 GiB); small asked 4 GiB and uses 3.
    set_processes(state, gpu, {big: 30 * GIB, small: 3 * GIB})
    wait_for(
        lambda: (api.job("big").get("activity") or {}).get("gpu_memory_notice"),
        "big to be flagged over its memory share",
    )
    job = api.job("big")
    assert job["state"] == "running"  # flagged, not stopped: the default action
    assert job["activity"]["gpu_memory_used"] == 30 * GIB
    assert job["activity"]["gpu_memory_share"] == H100 // 4
    assert f"over its GPU memory share: GPU{gpu} 30 GiB used of 19.91 GiB" in job["reason"]
    fine = api.job("small")["activity"]
    assert (fine["gpu_memory_used"], fine["gpu_memory_share"]) == (3 * GIB, 4 * GIB)
    assert fine["gpu_memory_notice"] is None
    assert "over its GPU memory share" in cli(server, "get", "big").out
    assert re.search(r"\bbig .*over memory share", cli(server, "top", "job").out)
    metrics = api.http.get("/metrics").text
    assert 'toposched_job_gpu_memory_over_share{job="big",queue="default"} 1.0' in metrics
    assert 'toposched_job_gpu_memory_over_share{job="small",queue="default"} 0.0' in metrics
    assert any("over its GPU memory share" in h["reason"] for h in api.job("big")["history"])
    # Back under its share, it is no longer flagged.
    set_processes(state, gpu, {big: 10 * GIB, small: 3 * GIB})
    wait_for(lambda: api.job("big")["activity"]["gpu_memory_notice"] is None, "big to be cleared")
    api.drain()


def test_a_job_that_asked_to_be_stopped_over_its_memory_share_is_stopped(
    nvml: tuple[ServerProcess, Path],
) -> None:
    server, state = nvml
    api = Api(server)
    api.submit(
        name="strict",
        gpu_fraction=0.5,
        gpu_memory_share="8Gi",
        gpu_memory_action="stop",
        command=["sleep", "600"],
    )
    gpu = gpus_of(api.until("strict", "running"))[0]
    set_processes(state, gpu, {worker_pid(server, "strict"): 9 * GIB})
    ended = api.until("strict", "idle-stopped")
    assert "over its GPU memory share" in ended["reason"]
    set_processes(state, gpu, {})
    api.drain()


@pytest.mark.parametrize(
    ("flags", "said"),
    [
        (["--gpu-fraction", "0"], "--gpu-fraction"),
        (["--gpu-fraction", "1.5"], "--gpu-fraction"),
        (["--gpu-fraction", "0.5", "--gpus", "2"], "--gpu-fraction"),
        (["--gpumemory", "4Gi", "--workers", "2"], "--gpu-memory"),
        (["--gpu-memory-action", "stop"], "--gpu-memory-action"),
    ],
)
def test_bad_shares_are_refused_naming_the_flag(
    nvml: tuple[ServerProcess, Path], flags: list[str], said: str
) -> None:
    server, _ = nvml
    refused = cli(server, "submit", *flags, "--", "sleep", "1")
    assert refused.code == 2, refused
    assert said in refused.err, refused.err


def test_the_example_job_file_runs_as_a_quarter_of_a_gpu(
    nvml: tuple[ServerProcess, Path],
) -> None:
    server, _ = nvml
    api = Api(server)
    for i in (1, 2):
        said = cli(server, "submit", "-f", "examples/jobs/shared-quarter.yaml", "--name", f"q{i}")
        assert said.code == 0, said
    gpu = gpus_of(api.until("q1", "running"))[0]
    assert gpus_of(api.until("q2", "running")) == [gpu]
    top = cli(server, "top", "node").out
    assert re.search(rf"GPU{gpu} +│ q1 0\.25 4096Mi, q2 0\.25 4096Mi \(shared, 0\.5 left\)", top)
    api.drain()


DUMP_ENV = "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps(dict(os.environ)))"


def test_a_shared_worker_gets_its_gpu_and_the_mps_limits_where_a_daemon_answers(
    nvml: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, _ = nvml
    api = Api(server)
    pipes = tmp_path / "mps"
    pipes.mkdir()
    told: dict[str, tuple[list[int], dict[str, str]]] = {}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as daemon:
        daemon.bind(str(pipes / "control"))
        daemon.listen(4)
        for name, pipe_dir in (("mps", pipes), ("slices", tmp_path)):
            out = tmp_path / f"{name}.json"
            api.submit(
                name=name,
                gpu_fraction=0.25,
                env={"CUDA_MPS_PIPE_DIRECTORY": str(pipe_dir)},
                command=[sys.executable, "-c", DUMP_ENV, str(out)],
            )
            ended = api.until(name, "succeeded")
            told[name] = (gpus_of(ended), json.loads(out.read_text()))
    (gpu,), env = told["mps"]
    assert env["CUDA_VISIBLE_DEVICES"] == str(gpu)
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    # No memory share asked: a quarter of the GPU's 81559 MiB.
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20389M"
    (gpu,), env = told["slices"]  # no daemon in that directory: time-sliced
    assert env["CUDA_VISIBLE_DEVICES"] == str(gpu)
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE" not in env
    api.drain()
