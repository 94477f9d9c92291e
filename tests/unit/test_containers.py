"""The container runtime's command line and environment for a worker (executors/containers.py)."""

from __future__ import annotations

import pytest

from toposched.executors.containers import ContainerRuntime, NoContainerRuntime, find_runtime


def test_real_gpus_go_in_as_devices_and_are_numbered_from_zero_inside() -> None:
    runtime = ContainerRuntime("/usr/bin/podman", ("--runtime=runc",), devices=True)
    env = runtime.inner_env({"CUDA_VISIBLE_DEVICES": "3,5", "RANK": "1"}, [3, 5])
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1", "TOPOSCHED_GPUS": "3,5", "RANK": "1"}
    argv = runtime.run_argv(
        "nvcr.io/nvidia/pytorch:24.05-py3",
        ["python", "train.py"],
        name="toposched-j-0-1",
        env={"SECRET": "value", "RANK": "1"},
        gpus=[3, 5],
        mounts=["/work", "/ckpt"],
        workdir="/work",
        user=(61184, 61184),
    )
    assert argv == [
        "/usr/bin/podman", "run", "--rm", "--name", "toposched-j-0-1", "--network", "host",
        "--ipc", "host", "--init", "--volume", "/work:/work", "--volume", "/ckpt:/ckpt",
        "--workdir", "/work", "--user", "61184:61184",
        "--device", "nvidia.com/gpu=3", "--device", "nvidia.com/gpu=5",
        "--env", "RANK", "--env", "SECRET",  # names only: no value in the process list
        "--runtime=runc", "nvcr.io/nvidia/pytorch:24.05-py3", "python", "train.py",
    ]  # fmt: skip
    assert "value" not in " ".join(argv)


def test_emulated_gpus_pass_no_device_and_keep_their_indices() -> None:
    runtime = ContainerRuntime("podman")
    env = runtime.inner_env({"CUDA_VISIBLE_DEVICES": "3,5"}, [3, 5])
    assert env == {"CUDA_VISIBLE_DEVICES": "3,5", "TOPOSCHED_GPUS": "3,5"}
    argv = runtime.run_argv(
        "img", ["true"], name="n", env={}, gpus=[3], mounts=[], workdir=None, user=None
    )
    assert "--device" not in argv and argv[-2:] == ["img", "true"]


def test_no_runtime_says_what_was_tried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(NoContainerRuntime) as caught:
        find_runtime()
    assert str(caught.value) == (
        "no container runtime on the server to run an image (install podman or docker); "
        "podman: not installed (not on PATH); docker: not installed (not on PATH)"
    )
