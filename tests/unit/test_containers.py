"""The container runtime's command line and environment for a worker (executors/containers.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from toposched.executors.accounts import may_work_in
from toposched.executors.containers import (
    ContainerRuntime,
    NoContainerRuntime,
    env_file,
    find_runtime,
)


def test_real_gpus_go_in_as_devices_and_are_numbered_from_zero_inside() -> None:
    runtime = ContainerRuntime("/usr/bin/podman", ("--runtime=runc",), devices=True)
    env = runtime.inner_env({"CUDA_VISIBLE_DEVICES": "3,5", "RANK": "1"}, [3, 5])
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1", "TOPOSCHED_GPUS": "3,5", "RANK": "1"}
    argv = runtime.run_argv(
        "nvcr.io/nvidia/pytorch:24.05-py3",
        ["python", "train.py"],
        name="toposched-j-0-1",
        env_file="/data/runs/j/attempt-0/worker-1.env",
        gpus=[3, 5],
        mounts=["/work", "/ckpt"],
        workdir="/work",
        user=(61184, 61184),
    )
    assert argv == [
        "/usr/bin/podman", "run", "--rm", "--name", "toposched-j-0-1", "--network", "host",
        "--ipc", "host", "--init", "--security-opt=no-new-privileges", "--cap-drop=ALL",
        "--volume", "/work:/work", "--volume", "/ckpt:/ckpt",
        "--workdir", "/work", "--user", "61184:61184",
        "--device", "nvidia.com/gpu=3", "--device", "nvidia.com/gpu=5",
        # the values in a file of the server's: not in the process list, not in the client's
        # own environment
        "--env-file", "/data/runs/j/attempt-0/worker-1.env",
        "--runtime=runc", "nvcr.io/nvidia/pytorch:24.05-py3", "python", "train.py",
    ]  # fmt: skip


def test_emulated_gpus_pass_no_device_and_keep_their_indices() -> None:
    runtime = ContainerRuntime("podman")
    env = runtime.inner_env({"CUDA_VISIBLE_DEVICES": "3,5"}, [3, 5])
    assert env == {"CUDA_VISIBLE_DEVICES": "3,5", "TOPOSCHED_GPUS": "3,5"}
    argv = runtime.run_argv(
        "img", ["true"], name="n", env_file="e", gpus=[3], mounts=[], workdir=None, user=None
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


def test_the_env_file_carries_values_verbatim_and_refuses_what_a_line_cannot() -> None:
    assert env_file({"B": " a=b ", "A": '"q"'}) == 'A="q"\nB= a=b \n'
    with pytest.raises(ValueError, match="variable 'K' holds a line break"):
        env_file({"K": "one\ntwo"})
    for name in ("", "A=B", "#A", "A B"):
        with pytest.raises(ValueError, match="cannot be passed into a container"):
            env_file({name: "v"})


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory under /tmp that every user may pass through (pytest's own are closed)."""
    made = Path(tempfile.mkdtemp(dir="/tmp"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made)


def test_an_account_may_work_only_where_its_modes_let_it(open_dir: Path) -> None:
    uid, gid, tmp_path = 61184, 61184, open_dir
    closed = tmp_path / "closed"
    (closed / "in").mkdir(parents=True)
    closed.chmod(0o711)  # passable, not listable
    assert may_work_in(closed / "in", uid, gid) is None
    assert may_work_in(closed, uid, gid) == (
        f"it may not list and enter {closed} (mode 711, owner {os.getuid()}:{os.getgid()})"
    )
    closed.chmod(0o700)
    assert f"it may not pass through {closed} (mode 700" in str(
        may_work_in(closed / "in", uid, gid)
    )
    if os.geteuid() == 0:
        os.chown(closed, uid, gid)  # its own: the owner's bits count
        assert may_work_in(closed / "in", uid, gid) is None
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "nowhere")
    assert may_work_in(link, uid, gid) == f"{tmp_path / 'nowhere'} is not a directory"
