"""The executor's reach into processes: free ports, signals to a worker's group, and the
sessions of supervisors (found through /proc)."""

from __future__ import annotations

import os
import socket
from contextlib import suppress
from signal import SIGKILL, Signals

from toposched.executors.supervisor import PidRecord, proc_stat

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """A port free on this machine now (for a session to listen on)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    # Free now, not reserved: the job binds them moments later, as torchrun does. All are held
    # open together so that no two are the same.
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind((LOOPBACK, 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def signal_group(pids: PidRecord, sig: Signals) -> None:
    """Send `sig` to the worker's process group unless its number now belongs to someone else."""
    leader = proc_stat(pids.pgid)
    # While any member of the group lives, its number cannot be reused; with no process of that
    # pid the group is either still ours (the leader ended before its children) or empty. A
    # process of that pid with another start time is a stranger who got the number after us.
    if leader is not None and leader.start != pids.worker_start:
        return
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pids.pgid, sig)


def supervises(pid: int, run_dir: bytes) -> bool:
    """Whether process `pid` is the supervisor of a worker in `run_dir` (see `_spawn`)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    module = b"toposched.executors.supervisor"
    at = argv.index(module) + 1 if module in argv else len(argv)
    return argv[at : at + 1] == [run_dir]


def kill_session(sid: int) -> None:
    """SIGKILL every process left in a dead supervisor's session (its worker and their children)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := proc_stat(int(entry))) and stat.session == sid:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), SIGKILL)
