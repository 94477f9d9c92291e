"""Whether an MPS control daemon answers (executors/mps.py), found as a CUDA client finds it:
the `control` endpoint in CUDA_MPS_PIPE_DIRECTORY. The daemon is faked by a real UNIX socket
(or named pipe) that listens there: no NVIDIA driver is on the CI machines."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from toposched.executors.mps import (
    DEFAULT_PIPE_DIRECTORY,
    PINNED_MEMORY_LIMIT,
    PIPE_DIRECTORY,
    THREAD_PERCENTAGE,
    GpuShare,
    daemon_answers,
    pipe_directory,
    share_environment,
)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Path]:
    """A pipe directory whose `control` socket listens, as the control daemon's does."""
    directory = tmp_path / "mps"
    directory.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(directory / "control"))
        server.listen(4)
        yield directory


def test_a_listening_control_socket_is_a_daemon_and_gives_the_share(daemon: Path) -> None:
    told = share_environment(GpuShare(250, 4096), {PIPE_DIRECTORY: str(daemon)})
    assert told == {
        PIPE_DIRECTORY: str(daemon),
        THREAD_PERCENTAGE: "25",
        PINNED_MEMORY_LIMIT: "0=4096M",
    }


def test_a_share_rounds_up_to_whole_percents_and_gives_only_what_was_asked(daemon: Path) -> None:
    environ = {PIPE_DIRECTORY: str(daemon)}
    assert share_environment(GpuShare(1, 0), environ)[THREAD_PERCENTAGE] == "1"
    assert share_environment(GpuShare(333, 0), environ)[THREAD_PERCENTAGE] == "34"
    memory_alone = share_environment(GpuShare(0, 512), environ)
    assert THREAD_PERCENTAGE not in memory_alone
    assert memory_alone[PINNED_MEMORY_LIMIT] == "0=512M"


def test_no_daemon_no_variables(tmp_path: Path) -> None:
    assert share_environment(GpuShare(500, 1024), {PIPE_DIRECTORY: str(tmp_path)}) == {}


def test_a_stale_socket_of_a_daemon_that_died_is_no_daemon(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as gone:
        gone.bind(str(tmp_path / "control"))  # bound, never listening: connect is refused
    assert (tmp_path / "control").exists()
    assert not daemon_answers(tmp_path)


def test_a_named_pipe_answers_only_while_someone_reads_it(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "control")
    assert not daemon_answers(tmp_path)
    reader = os.open(tmp_path / "control", os.O_RDONLY | os.O_NONBLOCK)
    try:
        assert daemon_answers(tmp_path)
    finally:
        os.close(reader)


def test_a_plain_file_is_no_daemon(tmp_path: Path) -> None:
    (tmp_path / "control").write_text("")
    assert not daemon_answers(tmp_path)


def test_the_pipe_directory_is_nvidias_default_unless_set() -> None:
    assert pipe_directory({}) == Path(DEFAULT_PIPE_DIRECTORY) == Path("/tmp/nvidia-mps")
    assert pipe_directory({PIPE_DIRECTORY: "/run/mps"}) == Path("/run/mps")
