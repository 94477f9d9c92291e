"""The supervisor of one worker: runs it in its own process group and records its pids and exit."""

# Run as `python -I -m toposched.executors.supervisor RUN_DIR RANK`, with the server's own
# environment: what to run comes from `worker-RANK.start` in RUN_DIR (the executor writes it,
# owner-only, and the supervisor removes it once read), so that neither the job's command (which
# may hold secrets) shows in `ps` nor its environment reaches this process. The supervisor stays
# the server's account (root, where jobs run as accounts of their own): it writes the records and
# kills the worker's stragglers, which the worker cannot stop; so no variable of the job may
# reach it (a `PYTHONPATH` with a sitecustomize.py, an `LD_PRELOAD` would run the job's code as
# root), and its Python is isolated (-I). The job's environment is given to the worker alone, at
# its exec, after the switch to the job's account.
# The executor (or a restarted server) reads the files written here; their formats are defined in
# this module so that writer and reader cannot drift apart.

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

from toposched.executors.cores import CpuListError, parse_cpu_list

__all__ = [
    "ExitRecord",
    "PidRecord",
    "ProcStat",
    "StartRecord",
    "env_path",
    "exit_path",
    "main",
    "pid_path",
    "proc_stat",
    "read_exit",
    "read_pids",
    "signal_name",
    "start_path",
    "supervisor_environment",
    "write_json_atomic",
    "write_start",
]

USAGE = (
    "usage: python -I -m toposched.executors.supervisor RUN_DIR RANK "
    "(runs what RUN_DIR/worker-RANK.start says)"
)


def pid_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"worker-{rank}.pid"


def exit_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"worker-{rank}.exit"


def start_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"worker-{rank}.start"


def env_path(run_dir: Path, rank: int) -> Path:
    """A container's variables, which its runtime's client reads (`--env-file`)."""
    return run_dir / f"worker-{rank}.env"


# Variables that change what a program loads or runs before its first line: the job's may never
# reach a process of the server's account (the supervisor, the container runtime's client).
LOADER_PREFIXES = ("LD_", "PYTHON")


def supervisor_environment() -> dict[str, str]:
    """The supervisor's environment: the server's own, without what changes what a program
    loads (the supervisor's Python is isolated, -I, besides). Nothing of the job's."""
    return {k: v for k, v in os.environ.items() if not k.startswith(LOADER_PREFIXES)}


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat the executors need."""

    state: str
    session: int
    start: int  # clock ticks after boot: with the pid, names one process even if pids are reused

    @property
    def alive(self) -> bool:
        # A zombie keeps its /proc entry until reaped, and nobody may reap an orphan here
        return self.state not in ("Z", "X", "x")


def proc_stat(pid: int) -> ProcStat | None:
    """The process `pid` as /proc sees it now, or None if there is no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except (FileNotFoundError, ProcessLookupError):
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its last ')'
    fields = raw[raw.rfind(b")") + 2 :].split()
    try:
        return ProcStat(fields[0].decode(), int(fields[3]), int(fields[19]))
    except (IndexError, ValueError):
        return None


@dataclass(frozen=True)
class PidRecord:
    """`worker-R.pid`: written once the worker runs, so its group can always be signalled."""

    supervisor_pid: int
    supervisor_start: int
    worker_pid: int
    worker_start: int
    pgid: int

    def to_json(self) -> dict[str, int]:
        return {
            "supervisor_pid": self.supervisor_pid,
            "supervisor_start": self.supervisor_start,
            "worker_pid": self.worker_pid,
            "worker_start": self.worker_start,
            "pgid": self.pgid,
        }


@dataclass(frozen=True)
class ExitRecord:
    """`worker-R.exit`: how the worker ended, `returncode` as Popen gives it (-N for signal N)."""

    returncode: int
    ended_at: float
    # Why the command never ran (`cannot run 'mpirun': not found on PATH`); empty if it ran.
    error: str = ""

    @property
    def signal(self) -> str | None:
        return signal_name(-self.returncode) if self.returncode < 0 else None

    def to_json(self) -> dict[str, Any]:
        out = {"returncode": self.returncode, "signal": self.signal, "ended_at": self.ended_at}
        return {**out, "error": self.error} if self.error else out


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read())
    except FileNotFoundError:
        return None
    except (ValueError, UnicodeDecodeError):
        # Ours are written atomically, so this is someone else's partial file: not written yet
        return None
    return data if isinstance(data, dict) else None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def read_pids(run_dir: Path, rank: int) -> PidRecord | None:
    """The worker's pid record, or None if it is missing or not (yet) valid."""
    data = _read_json(pid_path(run_dir, rank))
    keys = ("supervisor_pid", "supervisor_start", "worker_pid", "worker_start", "pgid")
    if data is None or not all(_is_int(data.get(k)) for k in keys):
        return None
    return PidRecord(*(int(data[k]) for k in keys))


def read_exit(run_dir: Path, rank: int) -> ExitRecord | None:
    """The worker's exit record, or None if it has not ended (or left nothing readable)."""
    data = _read_json(exit_path(run_dir, rank))
    if data is None or not _is_int(data.get("returncode")):
        return None
    ended_at = data.get("ended_at")
    error = data.get("error")
    return ExitRecord(
        int(data["returncode"]),
        float(ended_at) if isinstance(ended_at, int | float) else 0.0,
        error if isinstance(error, str) else "",
    )


def write_json_atomic(path: Path, data: dict[str, Any], *, durable: bool) -> None:
    """Write `path` so readers see either nothing or all of it; `durable` also syncs the rename."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    if durable:
        fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


@dataclass(frozen=True)
class StartRecord:
    """`worker-R.start`: what the supervisor runs, written by the executor before it starts it."""

    command: list[str]
    # The worker's whole environment; None: the supervisor's own (a container runtime's
    # client, which is given the job's variables in a file of its own).
    env: dict[str, str] | None
    cwd: str | None = None
    cpus: str | None = None  # the CPUs to pin the worker to, as /proc prints them ("0-3,8")
    user: tuple[int, int] | None = None  # (uid, gid) the worker runs as; None: this process's
    # The runtime and name of the worker's container, removed once the worker has ended: a
    # runtime's client killed by SIGKILL leaves its container running.
    container: tuple[str, str] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "env": self.env,
            "cwd": self.cwd,
            "cpus": self.cpus,
            "user": list(self.user) if self.user is not None else None,
            "container": list(self.container) if self.container is not None else None,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> StartRecord | None:
        """The record, or None if `data` is not one (nothing of it is run then)."""
        command, env = data.get("command"), data.get("env")
        cwd, cpus = data.get("cwd"), data.get("cpus")
        user, container = data.get("user"), data.get("container")
        if not isinstance(command, list) or not command or not _strings(command):
            return None
        if env is not None and not (
            isinstance(env, dict) and _strings(env) and _strings(env.values())
        ):
            return None
        if not all(v is None or isinstance(v, str) for v in (cwd, cpus)):
            return None
        if user is not None and not (
            isinstance(user, list) and len(user) == 2 and all(_is_int(i) for i in user)
        ):
            return None
        if container is not None and not (
            isinstance(container, list) and len(container) == 2 and _strings(container)
        ):
            return None
        return cls(
            command,
            env,
            cwd,
            cpus,
            (user[0], user[1]) if user is not None else None,
            (container[0], container[1]) if container is not None else None,
        )


def _strings(values: Any) -> bool:
    return all(isinstance(v, str) for v in values)


def write_start(path: Path, record: StartRecord) -> None:
    """Write a start record readable by this account alone, whole or not at all."""
    write_private(path, json.dumps(record.to_json()).encode())


def write_private(path: Path, data: bytes) -> None:
    """Write `path` owner-only from its creation (it holds a job's secrets), whole or not at all."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with open(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


@dataclass(frozen=True)
class _Args:
    run_dir: Path
    rank: int
    start: StartRecord


def _parse(argv: Sequence[str]) -> _Args | str:
    """The arguments and the start record they name, or why there are none."""
    if len(argv) != 2 or not argv[1].isdigit():
        return USAGE
    run_dir, rank = Path(argv[0]), int(argv[1])
    path = start_path(run_dir, rank)
    data = _read_json(path)
    if data is None:
        return f"no readable start record {path}"
    path.unlink(missing_ok=True)  # read once: the job's secrets stay no longer than needed
    start = StartRecord.from_json(data)
    if start is None:
        return f"{path} is not a start record"
    return _Args(run_dir, rank, start)


def _pin(args: _Args) -> None:
    """Pin this process to the worker's CPUs before it starts the worker, which inherits them.

    Pinned here, before the fork, the worker runs on no other CPU from its first instruction,
    and so does every thread and child it starts; a mask set from outside after the start would
    leave out the threads it had started by then. A mask the kernel refuses (the CPUs went
    offline, a cpuset shrank) leaves the worker on the CPUs it has, and says so in its log.
    """
    cpus = args.start.cpus
    if not cpus:
        return
    try:
        os.sched_setaffinity(0, parse_cpu_list(cpus))
    except (OSError, CpuListError) as exc:
        _say(f"worker {args.rank}: cannot pin to CPUs {cpus}: {exc}; not pinned")


def _ignore(signum: int, frame: FrameType | None) -> None:
    """Installed rather than SIG_IGN: a handler resets to the default at exec, SIG_IGN would not,
    and the worker must get the default dispositions."""


def _say(message: str) -> None:
    print(f"[toposched] {message}", file=sys.stderr, flush=True)


def _kill_stragglers(pgid: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _wait(proc: subprocess.Popen[bytes]) -> int:
    # Wait without reaping: while the leader is a zombie its pid names only its group, so the
    # stragglers it left (data loaders, shells' children) can be killed without hitting a stranger.
    os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
    _kill_stragglers(proc.pid)
    return proc.wait()


def _as(user: tuple[int, int] | None) -> dict[str, Any]:
    """Popen's arguments that run the worker as `user`, in its own group alone (none of the
    supervisor's supplementary groups), its files private by default."""
    if user is None:
        return {}
    uid, gid = user
    return {"user": uid, "group": gid, "extra_groups": [], "umask": 0o077}


def _remove_container(program: str, name: str) -> None:
    """Remove the worker's container if it is still there (its client was killed)."""
    with suppress(OSError, subprocess.TimeoutExpired):
        subprocess.run(
            [program, "rm", "--force", name],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
        )


def _start_failure(args: _Args, exc: OSError) -> tuple[int, str]:
    """The shell's status (127 for not found, 126 for found but not runnable) and why, in
    the words `get` shows as the job's reason."""
    program, cwd = args.start.command[0], args.start.cwd
    if exc.filename == cwd:
        why = f"cannot run in working directory {cwd!r}: {exc.strerror or exc}"
    elif isinstance(exc, FileNotFoundError) and "/" not in program:
        why = f"cannot run {program!r}: not found on PATH"
    else:
        why = f"cannot run {program!r}: {exc.strerror or exc}"
    _say(f"worker {args.rank}: {why}")
    return (127 if isinstance(exc, FileNotFoundError) else 126), why


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(sys.argv[1:] if argv is None else argv)
    if isinstance(args, str):
        print(args, file=sys.stderr)
        return 2
    start = args.start
    # It must outlive anything sent to its session so that it can record the worker's end
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _ignore)
    _pin(args)
    error = ""
    try:
        proc = subprocess.Popen(
            start.command, process_group=0, cwd=start.cwd, env=start.env, **_as(start.user)
        )
    except OSError as exc:
        returncode, error = _start_failure(args, exc)
    else:
        # The worker cannot have been reaped yet, so its /proc entry is there even if it ended
        worker = proc_stat(proc.pid)
        me = proc_stat(os.getpid())
        record = PidRecord(
            supervisor_pid=os.getpid(),
            supervisor_start=me.start if me is not None else 0,
            worker_pid=proc.pid,
            worker_start=worker.start if worker is not None else 0,
            pgid=proc.pid,  # process_group=0 made the worker the leader of a group of its own
        )
        write_json_atomic(pid_path(args.run_dir, args.rank), record.to_json(), durable=False)
        returncode = _wait(proc)
        if start.container is not None:
            _remove_container(*start.container)
            env_path(args.run_dir, args.rank).unlink(missing_ok=True)
        if returncode < 0:
            _say(f"worker {args.rank} killed by {signal_name(-returncode)}")
    ended = ExitRecord(returncode, time.time(), error)
    write_json_atomic(exit_path(args.run_dir, args.rank), ended.to_json(), durable=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
