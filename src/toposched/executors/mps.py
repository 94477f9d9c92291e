"""Whether an MPS control daemon answers here, and what a shared job's worker is told by it."""

from __future__ import annotations

import contextlib
import errno
import math
import os
import socket
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# NVIDIA's names (the MPS documentation, "Environment variables").
PIPE_DIRECTORY = "CUDA_MPS_PIPE_DIRECTORY"
DEFAULT_PIPE_DIRECTORY = "/tmp/nvidia-mps"
THREAD_PERCENTAGE = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
PINNED_MEMORY_LIMIT = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
CONTROL = "control"  # the daemon's endpoint in the pipe directory, which its clients open


@dataclass(frozen=True)
class GpuShare:
    """A worker's share of its one GPU: thousandths of its compute (0: none asked) and MiB
    of its memory (0: none asked, or the GPU's memory unknown)."""

    milli: int
    mib: int


def pipe_directory(environ: Mapping[str, str]) -> Path:
    """Where a CUDA client in `environ` looks for the MPS control daemon."""
    return Path(environ.get(PIPE_DIRECTORY) or DEFAULT_PIPE_DIRECTORY)


def daemon_answers(directory: Path) -> bool:
    """Whether an MPS control daemon listens in `directory`: its `control` endpoint (a UNIX
    socket, or a named pipe in older drivers) takes a connection now. A stale socket left by
    a daemon that died refuses, and a pipe nobody reads says ENXIO: both are no daemon."""
    control = directory / CONTROL
    try:
        mode = control.stat().st_mode
    except OSError:
        return False
    if stat.S_ISSOCK(mode):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
            client.settimeout(1.0)
            try:
                client.connect(str(control))
            except OSError:
                return False
            return True
    if stat.S_ISFIFO(mode):
        try:
            fd = os.open(control, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as err:
            if err.errno not in (errno.ENXIO, errno.EACCES, errno.ENOENT):
                raise
            return False
        with contextlib.suppress(OSError):
            os.close(fd)
        return True
    return False


def share_environment(share: GpuShare, environ: Mapping[str, str]) -> dict[str, str]:
    """The MPS variables for a worker holding `share` of the one GPU it sees, where a control
    daemon answers for a client of `environ`; none where it does not (time-slicing then, its
    memory watched by the server)."""
    directory = pipe_directory(environ)
    if not daemon_answers(directory):
        return {}
    told = {PIPE_DIRECTORY: str(directory)}
    if share.milli:
        # Percent of the GPU's threads; MPS takes whole percents, so a share rounds up.
        told[THREAD_PERCENTAGE] = str(max(1, math.ceil(share.milli / 10)))
    if share.mib:
        told[PINNED_MEMORY_LIMIT] = f"0={share.mib}M"  # device 0: the one GPU it sees
    return told
