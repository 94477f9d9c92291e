"""Runs each job's processes on this machine, one supervisor each, as its kind has them."""

# What each kind runs here (the members and what they are told come from common.frameworks):
# - pytorch: one process per worker, with torchrun's variables;
# - tensorflow: the workers, then `ps` parameter servers (no GPU), each told TF_CONFIG with
#   127.0.0.1 and a port of its own; once every worker has ended the parameter servers are
#   stopped (SIGTERM, SIGKILL after PS_GRACE_S) and that end is no failure, while a parameter
#   server that ends otherwise with a non-zero status is a failed member (it fails the job);
# - mpi: the launcher alone, holding every GPU of the job, with the hostfile `127.0.0.1
#   slots=N` (N = workers x GPUs) in the run directory: mpirun starts the N ranks itself as its
#   children, so the launcher's end is the job's end and the ranks' output is in its log.
# Processes are numbered workers first, then parameter servers (an MPI job's launcher is 0):
# that index names their files (`worker-I.log`, `.pid`, `.exit`, `.cores`) and their ends.
# Each process is pinned to CPU cores (executors.cores says which; the supervisor pins).

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Collection
from pathlib import Path
from signal import SIGKILL, SIGTERM, Signals
from typing import Any

from toposched.common.frameworks import (
    Kind,
    KindError,
    Member,
    environment,
    hostfile,
    local_members,
)
from toposched.executors.accounts import Account, AccountError, Accounts, may_work_in
from toposched.executors.containers import Containers, NoContainerRuntime, env_file
from toposched.executors.cores import CoreChoice, cores_path, cpu_list, plan, read_cores
from toposched.executors.mps import share_environment
from toposched.executors.processes import (
    LOOPBACK,
    free_ports,
    kill_session,
    signal_group,
    supervises,
)
from toposched.executors.runs import (
    LOST,
    ExecutorError,
    Run,
    RunSpec,
    Worker,
    WorkerExit,
    end_of,
    recorded_end,
)
from toposched.executors.supervisor import (
    StartRecord,
    env_path,
    exit_path,
    pid_path,
    proc_stat,
    read_exit,
    read_pids,
    start_path,
    supervisor_environment,
    write_json_atomic,
    write_private,
    write_start,
)
from toposched.topology.node import NodeTopology

__all__ = ["ExecutorError", "LocalExecutor", "RunSpec", "WorkerExit"]

# How long a start waits for every supervisor to report its worker's pids
START_TIMEOUT_S = 5.0
# How long TensorFlow parameter servers have to end once every worker has ended
PS_GRACE_S = 10.0


def _container_name(run: RunSpec, rank: int) -> str:
    """One container per process and attempt (a job's name is a valid container name)."""
    return f"toposched-{run.job}-{run.attempt}-{rank}"


def _parse_signal(name: str) -> Signals:
    key = name.upper()
    try:
        return Signals[key if key.startswith("SIG") else f"SIG{key}"]
    except KeyError:
        raise ExecutorError(f"unknown signal {name!r}") from None


# An interactive session's port: in its environment, and for `$(TOPOSCHED_PORT)` in its command.
SESSION_PORT = "TOPOSCHED_PORT"


def _members(job: str, kind: Kind, workers: int, ps: int) -> list[Member]:
    try:
        return local_members(kind, workers, ps)
    except KindError as err:
        raise ExecutorError(f"job {job!r}: {err}") from None


class LocalExecutor:
    """Starts, signals and watches gangs of worker processes under `root`/JOB/attempt-N.

    Each process is pinned to cores of its GPUs' NUMA node, read from `topology`'s CPU lists
    (without one, any core), among `host_cores` (default: the cores this process may use).
    With `accounts` (the server runs as root), each job's processes run as its team's (or
    user's) account: its log and checkpoint directory are that account's alone, and the rest
    of `root` is the server's.
    """

    def __init__(
        self,
        root: Path,
        python: str = sys.executable,
        *,
        topology: NodeTopology | None = None,
        host_cores: Collection[int] | None = None,
        accounts: Accounts | None = None,
        containers: Containers | None = None,
    ) -> None:
        self.root = Path(root).absolute()
        self.containers = containers  # None: a job with an image cannot start here
        self.root.mkdir(parents=True, exist_ok=True)
        self.accounts = accounts
        if accounts is not None:
            # Other accounts may pass through (to their own checkpoint directories), not list.
            self.root.chmod(0o711)
        self.python = python
        self.affinity = topology.cpu_affinity if topology is not None else ()
        self.host_cores = frozenset(os.sched_getaffinity(0) if host_cores is None else host_cores)
        if not self.host_cores:
            raise ExecutorError("host_cores is empty: a worker needs a core to run on")
        self._runs: dict[tuple[str, int], Run] = {}
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

    def cores(self, job: str, attempt: int, processes: int) -> list[CoreChoice | None]:
        """The cores each of a run's `processes` was given (None: no record), from its files."""
        run_dir = self.run_dir(job, attempt)
        return [read_cores(run_dir, rank) for rank in range(processes)]

    def pinned(
        self, job: str, attempt: int, workers: int, kind: Kind = Kind.PYTORCH, ps: int = 0
    ) -> list[dict[str, Any]]:
        """The cores of each process of a run (as `adopt` names the run), as `get` shows them:
        its index (as `logs --worker` counts), name, cores ("0-3"), and what was not as asked
        (""). A process started before pinning, or whose record is gone, is left out."""
        members = _members(job, kind, workers, ps)
        return [
            {"process": rank, "name": member.name, "cores": cpu_list(got.cores), "note": got.note}
            for rank, (member, got) in enumerate(
                zip(members, self.cores(job, attempt, len(members)), strict=True)
            )
            if got is not None
        ]

    def checkpoint_dir(self, job: str) -> Path:
        """Where the job keeps its checkpoints: the same for every attempt, beside their runs."""
        return self.run_dir(job, 0).parent / "checkpoint"

    def start(self, run: RunSpec) -> None:
        """Start every worker of `run` or none of them; returns once each worker has a pid."""
        with self._lock:
            self._start(run)

    def _start(self, run: RunSpec) -> None:
        run_dir = self.run_dir(run.job, run.attempt)
        tracked = Run(run.job, run.attempt, run_dir)
        where = tracked.describe()
        if (run.job, run.attempt) in self._runs:
            raise ExecutorError(f"{where} is already started")
        if not run.command:
            raise ExecutorError(f"{where}: empty command")
        if not run.workers:
            raise ExecutorError(f"{where}: no workers")
        members = _members(run.job, run.kind, len(run.workers), run.ps)
        # A second start would read the first one's records as its own
        if any(run_dir.glob("worker-*.pid")) or any(run_dir.glob("worker-*.exit")):
            raise ExecutorError(f"{where} was already started (records in {run_dir})")
        try:
            account = None if self.accounts is None else self.accounts.for_job(run.queue, run.owner)
        except (AccountError, OSError) as exc:
            raise ExecutorError(f"{where}: no account to run it as: {exc}") from exc
        try:
            run_dir.mkdir(parents=True, exist_ok=True)
            self.checkpoint_dir(run.job).mkdir(exist_ok=True)
            if run.kind is Kind.MPI:
                slots = max(1, len(run.workers[0][1]))  # a worker with no GPU still runs a rank
                text = hostfile([LOOPBACK] * len(run.workers), slots)
                (run_dir / "hostfile").write_text(text, encoding="utf-8")
            if account is not None:
                self._hand_over(run, run_dir, account)
        except OSError as exc:
            raise ExecutorError(f"{where}: cannot write to {run_dir.parent}: {exc}") from exc
        try:
            envs = self._environments(run, members, run_dir / "hostfile", account)
        except OSError as exc:
            raise ExecutorError(f"{where}: cannot pick free ports: {exc}") from exc
        started: list[subprocess.Popen[bytes]] = []
        try:
            choices = self._pin(run, members, run_dir)
            for rank, env in enumerate(envs):
                try:
                    started.append(self._spawn(run, run_dir, rank, env, choices[rank], account))
                except (OSError, ValueError) as exc:
                    raise ExecutorError(
                        f"{tracked.describe(rank)}: cannot start its supervisor: {exc}"
                    ) from exc
            tracked.workers = self._await_pids(tracked, members, started)
        except ExecutorError:
            self._abort(run_dir, started, len(members))
            raise
        for worker, choice in zip(tracked.workers, choices, strict=True):
            worker.cores = choice
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
                signal_group(worker.pids, sig)
                if grace_s == 0:
                    signal_group(worker.pids, SIGKILL)
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
                self._stop_parameter_servers(run, now)
            return ended

    def _stop_parameter_servers(self, run: Run, now: float) -> None:
        """Once every worker has ended, the parameter servers (which serve for ever) must go."""
        live = [w for w in run.workers if w.member.role == "ps" and not w.reported]
        if run.ps_stopped or not live:
            return
        if any(w.member.role == "worker" and not w.reported for w in run.workers):
            return
        run.ps_stopped = True
        for worker in live:
            if worker.pids is not None:
                signal_group(worker.pids, SIGTERM)
            deadline = now + PS_GRACE_S
            if worker.deadline is None or deadline < worker.deadline:
                worker.deadline = deadline

    def adopt(
        self, job: str, attempt: int, workers: int, kind: Kind = Kind.PYTORCH, ps: int = 0
    ) -> None:
        """Watch a run started by an earlier executor (before a server restart) from its files:
        a job of `kind` on `workers` workers, with `ps` parameter servers."""
        with self._lock:
            run_dir = self.run_dir(job, attempt)
            if (job, attempt) in self._runs:
                raise ExecutorError(f"job {job!r} attempt {attempt} is already tracked")
            if workers < 1:
                raise ExecutorError(
                    f"job {job!r} attempt {attempt}: workers must be >= 1, got {workers}"
                )
            members = _members(job, kind, workers, ps)
            tracked = [
                Worker(
                    rank, member, None, read_pids(run_dir, rank), cores=read_cores(run_dir, rank)
                )
                for rank, member in enumerate(members)
            ]
            self._runs[(job, attempt)] = Run(job, attempt, run_dir, tracked)

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
                if entry.isdigit() and supervises(int(entry), wanted):
                    kill_session(int(entry))  # a supervisor leads a session of its own
            for path in run_dir.glob("worker-*.pid"):
                rank = path.stem.removeprefix("worker-")
                if rank.isdigit() and (pids := read_pids(run_dir, int(rank))) is not None:
                    signal_group(pids, SIGKILL)  # a worker whose supervisor is gone

    def running(self, job: str, attempt: int) -> set[int]:
        """Ranks whose end `poll` has not reported yet."""
        with self._lock:
            return {w.rank for w in self._get(job, attempt).workers if not w.reported}

    def process_groups(self) -> dict[tuple[str, int], list[int]]:
        """The process group of each live worker, per tracked run (job, attempt): what the
        CPU-time stand-in for GPU activity reads."""
        with self._lock:
            return {
                key: [w.pids.pgid for w in run.workers if w.pids is not None and not w.reported]
                for key, run in self._runs.items()
            }

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

    def _get(self, job: str, attempt: int) -> Run:
        run = self._runs.get((job, attempt))
        if run is None:
            raise ExecutorError(f"job {job!r} attempt {attempt} is not tracked by this executor")
        return run

    def _hand_over(self, run: RunSpec, run_dir: Path, account: Account) -> None:
        """What the job's account needs of its run: a way through to its run directory (which it
        may not list), its checkpoint directory and MPI hostfile its own."""
        for step in (run_dir.parent, run_dir):
            step.chmod(0o711)
        checkpoint = self.checkpoint_dir(run.job)
        checkpoint.chmod(0o700)
        os.chown(checkpoint, account.uid, account.gid)
        if run.kind is Kind.MPI:
            os.chown(run_dir / "hostfile", account.uid, account.gid)

    def _environments(
        self,
        run: RunSpec,
        members: list[Member],
        hostfile_path: Path,
        account: Account | None = None,
    ) -> list[dict[str, str]]:
        """Each process's environment, in rank order: ours over the kind's over the job's own.

        A job run as an account of its own gets the server's environment without the
        server's own settings (TOPOSCHED_*: a database URL may hold a password), and the
        account's HOME, USER and LOGNAME."""
        inherited = dict(os.environ)
        if account is not None:
            inherited = {k: v for k, v in inherited.items() if not k.startswith("TOPOSCHED_")}
            home = str(account.home)
            inherited |= {"HOME": home, "USER": account.name, "LOGNAME": account.name}
        base = {**inherited, **run.env}
        if "PYTHONUNBUFFERED" not in run.env:
            base["PYTHONUNBUFFERED"] = "1"  # so that a Python worker's log is live
        ours = {
            "TOPOSCHED_JOB": run.job,
            "TOPOSCHED_QUEUE": run.queue,
            "TOPOSCHED_RESTART_COUNT": str(run.restart_count),
            "TOPOSCHED_ATTEMPT": str(run.attempt),
            "TOPOSCHED_CHECKPOINT_DIR": str(self.checkpoint_dir(run.job)),
        }
        roles = Counter(m.role for m in members)
        roles["worker"] = len(run.workers)  # an MPI job's workers are its launcher's ranks
        hosts = {role: [LOOPBACK] * count for role, count in roles.items()}
        # Every member listens on this machine: a port each (TensorFlow), or the master alone
        if run.kind is Kind.TENSORFLOW:
            free = iter(free_ports(roles["worker"] + roles["ps"]))
            ports = {role: [next(free) for _ in range(roles[role])] for role in ("worker", "ps")}
        else:
            ports = {"worker": free_ports(1)}  # MASTER_PORT (an MPI job needs none)
        everything = tuple(g for _, gpus in run.workers for g in gpus)
        envs = []
        for member in members:
            gpus: tuple[int, ...] = ()
            if member.role == "worker":
                gpus = run.workers[member.index][1]
            elif member.role == "launcher":
                gpus = everything  # for the ranks mpirun starts
            kind_env = environment(
                run.kind,
                member,
                hosts,
                ports=ports,
                machines=[node for node, _ in run.workers],
                hostfile_path=str(hostfile_path),
            )
            visible = {"CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus)}
            if run.mig_device is not None and member.role == "worker":
                visible = {"CUDA_VISIBLE_DEVICES": run.mig_device}
            if run.share is not None and member.role == "worker":
                visible |= share_environment(run.share, base)
            envs.append(base | visible | kind_env | ours)
        return envs

    def _pin(self, run: RunSpec, members: list[Member], run_dir: Path) -> list[CoreChoice]:
        """Each process's cores, recorded before any starts (a restarted server reads them)."""
        held = {
            core
            for tracked in self._runs.values()
            for w in tracked.workers
            if not w.reported and w.cores is not None and w.cores.holds
            for core in w.cores.cores
        }
        everything = tuple(g for _, gpus in run.workers for g in gpus)
        choices = []
        for member in members:
            gpus: tuple[int, ...] = ()
            if member.role == "worker":
                gpus = run.workers[member.index][1]
            elif member.role == "launcher":
                gpus = everything
            choice = plan(
                member, gpus, self.affinity, self.host_cores, held, run.cpus, len(run.workers)
            )
            if choice.holds:
                held.update(choice.cores)
            choices.append(choice)
        try:
            for rank, choice in enumerate(choices):
                write_json_atomic(cores_path(run_dir, rank), choice.to_json(), durable=False)
        except OSError as exc:
            raise ExecutorError(f"job {run.job!r}: cannot write to {run_dir}: {exc}") from exc
        return choices

    def _spawn(
        self,
        run: RunSpec,
        run_dir: Path,
        rank: int,
        env: dict[str, str],
        cores: CoreChoice,
        account: Account | None,
    ) -> subprocess.Popen[bytes]:
        cwd = run.workdir
        # The worker enters it before it drops root (Popen changes directory first), and a
        # container mounts it: the account must be able to reach it by itself.
        why = None if cwd is None or account is None else may_work_in(Path(cwd), *account.ids)
        if why is not None:
            assert account is not None
            raise ExecutorError(
                f"job {run.job!r}: workdir {cwd!r} is not for {account.describe()}: {why}"
            )
        if cwd is None and account is not None:
            # Not the server's own directory: the account's home, else its checkpoints.
            home = account.home
            cwd = str(home if home.is_dir() else self.checkpoint_dir(run.job))
        start = StartRecord(
            list(run.command),
            env,
            cwd,
            cpu_list(cores.cores) if cores.cores else None,
            (account.uid, account.gid) if account is not None else None,
        )
        if run.image is not None:
            command = self._contained(run, run_dir, rank, env, cwd, account)
            name = _container_name(run, rank)
            # The runtime's client runs as the server, with the server's environment: the job's
            # variables reach the container through its env file only.
            start = StartRecord(command, None, cwd, start.cpus, None, (command[0], name))
        write_start(start_path(run_dir, rank), start)
        # Owner-only from its creation; a job's own account owns its log (the server reads it
        # as root), no other job can read it.
        fd = os.open(run_dir / f"worker-{rank}.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        if account is not None:
            try:
                os.fchown(fd, account.uid, account.gid)
            except OSError:
                os.close(fd)
                raise
        argv = [self.python, "-I", "-m", "toposched.executors.supervisor", str(run_dir), str(rank)]
        with open(fd, "ab") as log:
            # A session of its own: the supervisor outlives a server that is kill -9ed, and no
            # signal meant for the server's group reaches it
            return subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=supervisor_environment(),
                start_new_session=True,
            )

    def _contained(
        self,
        run: RunSpec,
        run_dir: Path,
        rank: int,
        env: dict[str, str],
        cwd: str | None,
        account: Account | None,
    ) -> list[str]:
        """The runtime's `run` of rank `rank` in the job's image; the job's own variables and
        the executor's (not the server's) go in the run's env file, which the client reads."""
        if self.containers is None or run.image is None:
            raise ExecutorError(f"job {run.job!r}: no container runtime to run image {run.image}")
        try:
            runtime = self.containers.get()
        except NoContainerRuntime as err:
            raise ExecutorError(f"job {run.job!r}: {err}") from None
        if run.mig_device is not None:
            # The runtimes are handed GPU indices; a MIG device would need its UUID passed.
            raise ExecutorError(f"job {run.job!r}: a MIG instance cannot go to a container yet")
        visible = env.get("CUDA_VISIBLE_DEVICES", "")
        gpus = [int(g) for g in visible.split(",") if g]
        env = runtime.inner_env(env, gpus)
        inner = {k: v for k, v in env.items() if k in run.env or os.environ.get(k) != v}
        try:
            text = env_file(inner)
        except ValueError as err:
            raise ExecutorError(f"job {run.job!r}: {err}") from None
        variables = env_path(run_dir, rank)
        write_private(variables, text.encode())
        checkpoints = str(self.checkpoint_dir(run.job))
        mounts = sorted({p for p in (cwd, checkpoints, str(run_dir)) if p is not None})
        user = (account.uid, account.gid) if account is not None else None
        return runtime.run_argv(
            run.image,
            run.command,
            name=_container_name(run, rank),
            env_file=str(variables),
            gpus=gpus,
            mounts=mounts,
            workdir=cwd,
            user=user,
        )

    def _await_pids(
        self, run: Run, members: list[Member], started: list[subprocess.Popen[bytes]]
    ) -> list[Worker]:
        """Wait until each supervisor has recorded its worker's pids (or that it could not run)."""
        deadline = time.monotonic() + START_TIMEOUT_S
        workers = [
            Worker(rank, member, proc, None)
            for rank, (member, proc) in enumerate(zip(members, started, strict=True))
        ]
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

    def _abort(self, run_dir: Path, started: list[subprocess.Popen[bytes]], processes: int) -> None:
        """Undo a failed start: kill what was started and remove its records."""
        for proc in started:
            # One that already ended (and was reaped) did so before it recorded a worker
            if proc.returncode is None:
                # os.kill, not proc.kill: that may reap it, and the unreaped zombie is what keeps
                # its session id from being reused while we look for the session's processes
                os.kill(proc.pid, SIGKILL)
                os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOWAIT)
                # A supervisor that had not yet written its pid file may already have a worker
                kill_session(proc.pid)
                proc.wait()
        for rank in range(processes):
            for path in (
                pid_path(run_dir, rank),
                exit_path(run_dir, rank),
                cores_path(run_dir, rank),
                start_path(run_dir, rank),
                env_path(run_dir, rank),
            ):
                path.unlink(missing_ok=True)

    def _check(self, run: Run, worker: Worker, now: float) -> WorkerExit | None:
        """The worker's end if it has ended; escalates an overdue stop to SIGKILL."""
        ended = read_exit(run.dir, worker.rank)
        if ended is not None:
            return recorded_end(run, worker, ended)
        if worker.deadline is not None and now >= worker.deadline and worker.pids is not None:
            worker.deadline = None
            signal_group(worker.pids, SIGKILL)
        if self._supervisor_alive(run, worker):
            return None
        # It may have recorded the exit just before it ended
        ended = read_exit(run.dir, worker.rank)
        if ended is not None:
            return recorded_end(run, worker, ended)
        if worker.pids is not None:
            signal_group(worker.pids, SIGKILL)  # an unwatched worker must not run on
        return end_of(run, worker, None, LOST)

    def _supervisor_alive(self, run: Run, worker: Worker) -> bool:
        if worker.supervisor is not None:
            return worker.supervisor.poll() is None
        if worker.pids is None:
            # Adopted with no pid file: look once more in case it was being written
            worker.pids = read_pids(run.dir, worker.rank)
            if worker.pids is None:
                return False
        stat = proc_stat(worker.pids.supervisor_pid)
        return stat is not None and stat.alive and stat.start == worker.pids.supervisor_start
