"""Runs each job's workers as processes on this machine, one supervisor per worker."""

from __future__ import annotations

import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from signal import SIGKILL, Signals

from toposched.executors.supervisor import (
    ExitRecord,
    PidRecord,
    exit_path,
    pid_path,
    proc_stat,
    read_exit,
    read_pids,
    signal_name,
)

__all__ = ["ExecutorError", "LocalExecutor", "RunSpec", "WorkerExit"]

# How long a start waits for every supervisor to report its worker's pids
START_TIMEOUT_S = 5.0
LOST = "lost: supervisor vanished without recording the exit"


class ExecutorError(RuntimeError):
    """An executor request that failed; the message names the job and worker."""


@dataclass(frozen=True)
class RunSpec:
    """One start of a job: what to run, and where each rank runs."""

    job: str
    attempt: int  # 0, 1, 2 ... one per start of the job (a restart or migration is a new attempt)
    queue: str
    command: tuple[str, ...]
    env: Mapping[str, str]  # the job's own variables
    workdir: str | None
    workers: tuple[tuple[str, tuple[int, ...]], ...]  # per rank: (node name, GPU indices)
    restart_count: int


@dataclass(frozen=True)
class WorkerExit:
    """The end of one worker, reported once."""

    job: str
    attempt: int
    rank: int
    returncode: int | None  # None: lost, its supervisor vanished without recording the exit
    reason: str  # "exited 0", "exited 3", "killed by SIGKILL", "lost: ..."


@dataclass
class _Worker:
    rank: int
    supervisor: subprocess.Popen[bytes] | None  # None once reaped, or when adopted
    pids: PidRecord | None  # None: never ran (its command could not be executed) or unknown
    deadline: float | None = None  # time.monotonic() after which a stopped worker is SIGKILLed
    reported: bool = False


@dataclass
class _Run:
    job: str
    attempt: int
    dir: Path
    workers: list[_Worker] = field(default_factory=list)

    def describe(self, rank: int | None = None) -> str:
        where = f"job {self.job!r} attempt {self.attempt}"
        return where if rank is None else f"{where} worker {rank}"


def _reason(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal_name(-returncode)}"
    return f"exited {returncode}"


def _ended(run: _Run, worker: _Worker, record: ExitRecord) -> WorkerExit:
    return WorkerExit(
        run.job, run.attempt, worker.rank, record.returncode, _reason(record.returncode)
    )


def _parse_signal(name: str) -> Signals:
    key = name.upper()
    try:
        return Signals[key if key.startswith("SIG") else f"SIG{key}"]
    except KeyError:
        raise ExecutorError(f"unknown signal {name!r}") from None


def _free_port() -> int:
    # The port is free now, not reserved: the job's rank 0 binds it moments later, as torchrun does
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _signal_group(pids: PidRecord, sig: Signals) -> None:
    """Send `sig` to the worker's process group unless its number now belongs to someone else."""
    leader = proc_stat(pids.pgid)
    # While any member of the group lives, its number cannot be reused; with no process of that
    # pid the group is either still ours (the leader ended before its children) or empty. A
    # process of that pid with another start time is a stranger who got the number after us.
    if leader is not None and leader.start != pids.worker_start:
        return
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pids.pgid, sig)


def _supervises(pid: int, run_dir: bytes) -> bool:
    """Whether process `pid` is the supervisor of a worker in `run_dir` (see `_spawn`)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except OSError:
        return False
    module = b"toposched.executors.supervisor"
    at = argv.index(module) + 1 if module in argv else len(argv)
    return argv[at : at + 1] == [run_dir]


def _kill_session(sid: int) -> None:
    """SIGKILL every process left in a dead supervisor's session (its worker and their children)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (stat := proc_stat(int(entry))) and stat.session == sid:
            with suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry), SIGKILL)


class LocalExecutor:
    """Starts, signals and watches gangs of worker processes under `root`/JOB/attempt-N."""

    def __init__(self, root: Path, python: str = sys.executable) -> None:
        self.root = Path(root).absolute()
        self.root.mkdir(parents=True, exist_ok=True)
        self.python = python
        self._runs: dict[tuple[str, int], _Run] = {}
        self._unreaped: list[subprocess.Popen[bytes]] = []  # supervisors of forgotten runs
        # The server may call in from more than one thread; a start holds the others back until
        # its workers have pids (at most START_TIMEOUT_S)
        self._lock = threading.Lock()

    def run_dir(self, job: str, attempt: int) -> Path:
        # The job name becomes a directory name: keep it from naming one outside the root
        if not job or job in (".", "..") or "/" in job or "\0" in job:
            raise ExecutorError(f"job name {job!r} cannot name a run directory")
        if attempt < 0:
            raise ExecutorError(f"job {job!r}: attempt must be >= 0, got {attempt}")
        return self.root / job / f"attempt-{attempt}"

    def log_path(self, job: str, attempt: int, rank: int) -> Path:
        return self.run_dir(job, attempt) / f"worker-{rank}.log"

    def start(self, run: RunSpec) -> None:
        """Start every worker of `run` or none of them; returns once each worker has a pid."""
        with self._lock:
            self._start(run)

    def _start(self, run: RunSpec) -> None:
        run_dir = self.run_dir(run.job, run.attempt)
        tracked = _Run(run.job, run.attempt, run_dir)
        where = tracked.describe()
        if (run.job, run.attempt) in self._runs:
            raise ExecutorError(f"{where} is already started")
        if not run.command:
            raise ExecutorError(f"{where}: empty command")
        if not run.workers:
            raise ExecutorError(f"{where}: no workers")
        # A second start would read the first one's records as its own
        if any(run_dir.glob("worker-*.pid")) or any(run_dir.glob("worker-*.exit")):
            raise ExecutorError(f"{where} was already started (records in {run_dir})")
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ExecutorError(f"{where}: cannot create {run_dir}: {exc}") from exc
        try:
            envs = self._environments(run)
        except OSError as exc:
            raise ExecutorError(f"{where}: cannot pick a free MASTER_PORT: {exc}") from exc
        started: list[subprocess.Popen[bytes]] = []
        try:
            for rank, env in enumerate(envs):
                try:
                    started.append(self._spawn(run, run_dir, rank, env))
                except (OSError, ValueError) as exc:
                    raise ExecutorError(
                        f"{tracked.describe(rank)}: cannot start its supervisor: {exc}"
                    ) from exc
            tracked.workers = self._await_pids(tracked, started)
        except ExecutorError:
            self._abort(run_dir, started)
            raise
        self._runs[(run.job, run.attempt)] = tracked

    def stop(self, job: str, attempt: int, signal: str, grace_s: float) -> None:
        """Signal every live worker's group; `poll` SIGKILLs those still alive after `grace_s`.

        A second stop can bring the SIGKILL forward, never put it off; `math.inf` never sends it.
        """
        with self._lock:
            run = self._get(job, attempt)
            sig = _parse_signal(signal)
            if math.isnan(grace_s) or grace_s < 0:
                raise ExecutorError(f"{run.describe()}: grace_s must be >= 0, got {grace_s}")
            deadline = time.monotonic() + grace_s
            for worker in run.workers:
                if worker.reported or worker.pids is None:
                    continue
                _signal_group(worker.pids, sig)
                if grace_s == 0:
                    _signal_group(worker.pids, SIGKILL)
                elif worker.deadline is None or deadline < worker.deadline:
                    worker.deadline = deadline

    def poll(self) -> list[WorkerExit]:
        """Ends of workers not reported before; never blocks."""
        with self._lock:
            self._unreaped = [p for p in self._unreaped if p.poll() is None]
            now = time.monotonic()
            ended: list[WorkerExit] = []
            for run in self._runs.values():
                for worker in run.workers:
                    if worker.supervisor is not None and worker.supervisor.poll() is not None:
                        worker.supervisor = None  # reaped: no zombie left behind
                    if not worker.reported and (end := self._check(run, worker, now)) is not None:
                        worker.reported = True
                        ended.append(end)
            return ended

    def adopt(self, job: str, attempt: int, ranks: int) -> None:
        """Watch a run started by an earlier executor (before a server restart) from its files."""
        with self._lock:
            run_dir = self.run_dir(job, attempt)
            if (job, attempt) in self._runs:
                raise ExecutorError(f"job {job!r} attempt {attempt} is already tracked")
            if ranks < 1:
                raise ExecutorError(
                    f"job {job!r} attempt {attempt}: ranks must be >= 1, got {ranks}"
                )
            workers = [_Worker(rank, None, read_pids(run_dir, rank)) for rank in range(ranks)]
            self._runs[(job, attempt)] = _Run(job, attempt, run_dir, workers)

    def abandon(self, job: str, attempt: int) -> None:
        """Kill what a start cut short (by the server's death) left of a run no executor tracks.

        A supervisor that had not recorded its worker's pids yet goes on to start it unwatched,
        on GPUs that are given to others: it is found by its command line.
        """
        with self._lock:
            run_dir = self.run_dir(job, attempt)
            if (job, attempt) in self._runs:
                raise ExecutorError(f"job {job!r} attempt {attempt} is tracked: stop it instead")
            wanted = os.fsencode(run_dir)
            for entry in os.listdir("/proc"):
                if entry.isdigit() and _supervises(int(entry), wanted):
                    _kill_session(int(entry))  # a supervisor leads a session of its own
            for path in run_dir.glob("worker-*.pid"):
                rank = path.stem.removeprefix("worker-")
                if rank.isdigit() and (pids := read_pids(run_dir, int(rank))) is not None:
                    _signal_group(pids, SIGKILL)  # a worker whose supervisor is gone

    def running(self, job: str, attempt: int) -> set[int]:
        """Ranks whose end `poll` has not reported yet."""
        with self._lock:
            return {w.rank for w in self._get(job, attempt).workers if not w.reported}

    def forget(self, job: str, attempt: int) -> None:
        """Stop tracking a run whose workers have all been reported ended; unknown runs are fine."""
        with self._lock:
            run = self._runs.get((job, attempt))
            if run is None:
                return
            if live := sorted(w.rank for w in run.workers if not w.reported):
                raise ExecutorError(
                    f"{run.describe()}: workers {live} have not been reported ended"
                )
            del self._runs[(job, attempt)]
            self._unreaped.extend(w.supervisor for w in run.workers if w.supervisor is not None)

    def release_all(self) -> None:
        """Stop tracking every run, as a new executor would start: each is adopted again from
        its files (a runtime rebuilding its state); the supervisors started here are reaped."""
        with self._lock:
            for run in self._runs.values():
                self._unreaped.extend(w.supervisor for w in run.workers if w.supervisor is not None)
            self._runs.clear()

    def _get(self, job: str, attempt: int) -> _Run:
        run = self._runs.get((job, attempt))
        if run is None:
            raise ExecutorError(f"job {job!r} attempt {attempt} is not tracked by this executor")
        return run

    def _environments(self, run: RunSpec) -> list[dict[str, str]]:
        base = {**os.environ, **run.env}
        if "PYTHONUNBUFFERED" not in run.env:
            base["PYTHONUNBUFFERED"] = "1"  # so that a Python worker's log is live
        port = str(_free_port())
        per_node = Counter(node for node, _ in run.workers)
        seen: Counter[str] = Counter()
        envs = []
        for rank, (node, gpus) in enumerate(run.workers):
            envs.append(
                base
                | {
                    "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
                    "WORLD_SIZE": str(len(run.workers)),
                    "RANK": str(rank),
                    "LOCAL_RANK": str(seen[node]),
                    "LOCAL_WORLD_SIZE": str(per_node[node]),
                    "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": port,
                    "TOPOSCHED_JOB": run.job,
                    "TOPOSCHED_QUEUE": run.queue,
                    "TOPOSCHED_RESTART_COUNT": str(run.restart_count),
                    "TOPOSCHED_ATTEMPT": str(run.attempt),
                }
            )
            seen[node] += 1
        return envs

    def _spawn(
        self, run: RunSpec, run_dir: Path, rank: int, env: dict[str, str]
    ) -> subprocess.Popen[bytes]:
        argv = [self.python, "-m", "toposched.executors.supervisor", str(run_dir), str(rank)]
        if run.workdir is not None:
            argv += ["--cwd", run.workdir]
        argv += ["--", *run.command]
        with open(run_dir / f"worker-{rank}.log", "ab") as log:
            # A session of its own: the supervisor outlives a server that is kill -9ed, and no
            # signal meant for the server's group reaches it
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )

    def _await_pids(self, run: _Run, started: list[subprocess.Popen[bytes]]) -> list[_Worker]:
        """Wait until each supervisor has recorded its worker's pids (or that it could not run)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        workers = [_Worker(rank, proc, None) for rank, proc in enumerate(started)]
        pending = list(workers)
        pause = 0.002
        while pending:
            for worker in list(pending):
                worker.pids = read_pids(run.dir, worker.rank)
                if worker.pids is not None or read_exit(run.dir, worker.rank) is not None:
                    pending.remove(worker)
                    continue
                assert worker.supervisor is not None
                if (code := worker.supervisor.poll()) is not None:
                    log = self.log_path(run.job, run.attempt, worker.rank)
                    raise ExecutorError(
                        f"{run.describe(worker.rank)}: its supervisor exited with status {code} "
                        f"before starting the worker (see {log})"
                    )
            if pending and time.monotonic() > deadline:
                ranks = [w.rank for w in pending]
                raise ExecutorError(
                    f"{run.describe()}: supervisors of workers {ranks} did not start their worker "
                    f"within {START_TIMEOUT_S:g} s"
                )
            if pending:
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
        return workers

    def _abort(self, run_dir: Path, started: list[subprocess.Popen[bytes]]) -> None:
        """Undo a failed start: kill what was started and remove its records."""
        for proc in started:
            # One that already ended (and was reaped) did so before it recorded a worker
            if proc.returncode is None:
                # os.kill, not proc.kill: that may reap it, and the unreaped zombie is what keeps
                # its session id from being reused while we look for the session's processes
                os.kill(proc.pid, SIGKILL)
                os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
                # A supervisor that had not yet written its pid file may already have a worker
                _kill_session(proc.pid)
                proc.wait()
        for rank in range(len(started)):
            for path in (pid_path(run_dir, rank), exit_path(run_dir, rank)):
                path.unlink(missing_ok=True)

    def _check(self, run: _Run, worker: _Worker, now: float) -> WorkerExit | None:
        """The worker's end if it has ended; escalates an overdue stop to SIGKILL."""
        ended = read_exit(run.dir, worker.rank)
        if ended is not None:
            return _ended(run, worker, ended)
        if worker.deadline is not None and now >= worker.deadline and worker.pids is not None:
            worker.deadline = None
            _signal_group(worker.pids, SIGKILL)
        if self._supervisor_alive(run, worker):
            return None
        # It may have recorded the exit just before it ended
        ended = read_exit(run.dir, worker.rank)
        if ended is not None:
            return _ended(run, worker, ended)
        if worker.pids is not None:
            _signal_group(worker.pids, SIGKILL)  # an unwatched worker must not run on
        return WorkerExit(run.job, run.attempt, worker.rank, None, LOST)

    def _supervisor_alive(self, run: _Run, worker: _Worker) -> bool:
        if worker.supervisor is not None:
            return worker.supervisor.poll() is None
        if worker.pids is None:
            # Adopted with no pid file: look once more in case it was being written
            worker.pids = read_pids(run.dir, worker.rank)
            if worker.pids is None:
                return False
        stat = proc_stat(worker.pids.supervisor_pid)
        return stat is not None and stat.alive and stat.start == worker.pids.supervisor_start
