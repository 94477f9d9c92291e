"""A run's records: what one start of a job runs (RunSpec), its processes as the executor
tracks them, and their ends as it reports them (WorkerExit)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from toposched.common.frameworks import Kind, Member
from toposched.executors.cores import CoreChoice
from toposched.executors.mps import GpuShare
from toposched.executors.supervisor import ExitRecord, PidRecord, signal_name

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
    kind: Kind = Kind.PYTORCH
    ps: int = 0  # TensorFlow parameter servers, which hold no GPU
    cpus: int = 0  # millicores each worker (and parameter server) asked for; 0: none asked
    owner: str = ""  # the user who submitted it: whose account runs it, where accounts are by user
    image: str | None = None  # each process runs in this container image (executors/containers.py)
    share: GpuShare | None = None  # a share of its worker's one GPU (None: whole GPUs)
    mig_device: str | None = None  # its one worker's MIG instance (MIG-<uuid>), seen for its GPU


@dataclass(frozen=True)
class WorkerExit:
    """The end of one process of a job (a worker, a parameter server, a launcher), reported once."""

    job: str
    attempt: int
    rank: int  # the process's index: workers first, then parameter servers
    returncode: int | None  # None: lost, its supervisor vanished without recording the exit
    reason: str  # "exited 0", "exited 3", "killed by SIGKILL", "lost: ...", "ps-0 exited 1"
    expected: bool = False  # a parameter server stopped here because every worker had ended

    @property
    def failed(self) -> bool:
        """Whether this end fails the job (a worker's non-zero status, a lost process)."""
        return self.returncode != 0 and not self.expected


@dataclass
class Worker:
    rank: int
    member: Member
    supervisor: subprocess.Popen[bytes] | None  # None once reaped, or when adopted
    pids: PidRecord | None  # None: never ran (its command could not be executed) or unknown
    deadline: float | None = None  # time.monotonic() after which a stopped worker is SIGKILLed
    reported: bool = False
    cores: CoreChoice | None = None  # None: started by an executor that did not pin


@dataclass
class Run:
    job: str
    attempt: int
    dir: Path
    workers: list[Worker] = field(default_factory=list)  # every process, in rank order
    ps_stopped: bool = False  # the parameter servers were told to end: every worker had ended

    def describe(self, rank: int | None = None) -> str:
        where = f"job {self.job!r} attempt {self.attempt}"
        return where if rank is None else f"{where} worker {rank}"


def status_words(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal_name(-returncode)}"
    return f"exited {returncode}"


def end_of(run: Run, worker: Worker, returncode: int | None, reason: str) -> WorkerExit:
    member = worker.member
    # A parameter server's end once every worker has ended is the job's end, not a failure,
    # whether it was told to go here or before a restart of the server (the flag is not kept).
    expected = member.role == "ps" and (
        run.ps_stopped or all(w.reported for w in run.workers if w.member.role == "worker")
    )
    if member.role != "worker":
        reason = f"{member.name} {reason}"
    return WorkerExit(run.job, run.attempt, worker.rank, returncode, reason, expected)


def recorded_end(run: Run, worker: Worker, record: ExitRecord) -> WorkerExit:
    why = record.error or status_words(record.returncode)
    return end_of(run, worker, record.returncode, why)
