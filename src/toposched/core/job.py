"""What a job asks for (docs/scheduler.md): gang shape, queue, priority, locality, elasticity,
the nodes it may use, and the jobs it runs after."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

from toposched.topology.cluster import (
    ANYWHERE,
    EVERY_NODE,
    Eligibility,
    NodeSelector,
    Tier,
    Toleration,
)
from toposched.topology.resources import ANY_FIT, WorkerFit


class JobError(ValueError):
    """A job spec that cannot be scheduled as written; the message names the field."""


class Locality(StrEnum):
    """How far apart a job's workers may be: the widest network tier it accepts."""

    NODE = "node"
    RACK = "rack"
    POD = "pod"
    ANY = "any"

    @property
    def tier(self) -> Tier:
        return _TIERS[self]


_TIERS = {
    Locality.NODE: Tier.NODE,
    Locality.RACK: Tier.RACK,
    Locality.POD: Tier.POD,
    Locality.ANY: Tier.CLUSTER,
}


# Seconds in locality rules: digits 0-9 only, no sign.
_SECONDS = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)", re.ASCII)


@dataclass(frozen=True)
class LocalityRule:
    """`prefer` from the start; after waiting `relax_after_s`, accept `accept` as well."""

    prefer: Locality = Locality.ANY
    accept: Locality | None = None
    relax_after_s: float | None = None

    def __post_init__(self) -> None:
        if (self.accept is None) != (self.relax_after_s is None):
            raise JobError("locality: `accept` and `relax_after_s` go together")
        if self.relax_after_s is not None and not 0 <= self.relax_after_s < math.inf:
            # NaN compares false with everything: it would be stored, and never relax.
            raise JobError(
                f"locality: relax_after_s must be a finite number >= 0, got {self.relax_after_s}"
            )
        if self.accept is not None and self.accept.tier <= self.prefer.tier:
            raise JobError(
                f"locality: accept={self.accept} must be wider than prefer={self.prefer}"
            )

    def allowed(self, waited_s: float) -> Locality:
        """The widest locality allowed after waiting `waited_s` seconds."""
        relaxed = self.relax_after_s is not None and waited_s >= self.relax_after_s
        if self.accept is not None and relaxed:
            return self.accept
        return self.prefer

    @classmethod
    def parse(cls, text: str) -> LocalityRule:
        """`node`, `rack`, `pod`, `any`, or `node,rack@600` (node first, rack after 600 s)."""
        try:
            if "," not in text:
                return cls(Locality(text))
            prefer, rest = text.split(",", 1)
            accept, _, after = rest.partition("@")
            if after and not _SECONDS.fullmatch(after):
                # float() reads `-0`, `1_0` and other scripts' digits (`\u0661\u0662`).
                raise JobError(
                    f"locality {text!r}: the seconds after @ must be a finite number >= 0 "
                    f"written in the digits 0-9, such as 600 or 2.5, got {after!r}"
                )
            return cls(Locality(prefer), Locality(accept), float(after) if after else 0.0)
        except ValueError as err:
            if isinstance(err, JobError):
                raise
            known = ", ".join(loc.value for loc in Locality)
            raise JobError(
                f"locality {text!r}: expected one of {known}, or PREFER,ACCEPT@SECONDS"
            ) from None


class RestartPolicy(StrEnum):
    """What happens when a job fails: end it, or queue it again (up to `max_restarts`)."""

    NEVER = "never"
    ON_FAILURE = "on-failure"


@dataclass(frozen=True)
class Checkpoint:
    """The job saves its state on `signal` within `grace_s`: it may be preempted for priority or
    service and migrated (a job without one is preempted only to give back borrowed GPUs)."""

    signal: str = "SIGTERM"
    grace_s: float = 30.0
    # Seconds of work between its checkpoints, where it says: what a stop loses is the work
    # since the last one (core/stopcost.py); None: unknown.
    interval_s: float | None = None

    def __post_init__(self) -> None:
        if not self.signal.startswith("SIG") or not self.signal[3:].isalnum():
            raise JobError(f"checkpoint signal must be a name such as SIGUSR1, got {self.signal!r}")
        if self.grace_s < 0:
            raise JobError(f"checkpoint grace_s must be >= 0, got {self.grace_s}")
        if self.interval_s is not None and not 0 < self.interval_s < math.inf:
            raise JobError(f"checkpoint interval_s must be a positive time, got {self.interval_s}")


class IdleAction(StrEnum):
    """What happens to a job whose GPUs sat idle for its rule's time."""

    NOTIFY = "notify"  # say so (event, reason, metric); it keeps its GPUs
    STOP = "stop"  # stop it as a preemption would: requeued if checkpointable, else ended


@dataclass(frozen=True)
class IdleRule:
    """A job is idle once every GPU it holds stays below `below_pct` percent busy for
    `after_s` seconds (docs/idle.md)."""

    after_s: float
    below_pct: float = 5.0
    action: IdleAction = IdleAction.NOTIFY

    def __post_init__(self) -> None:
        if not 0 < self.after_s < math.inf:
            raise JobError(f"idle: after must be a positive time, got {self.after_s!r}")
        if not 0 < self.below_pct <= 100:
            raise JobError(f"idle: below must be a percentage in (0, 100], got {self.below_pct!r}")


@dataclass(frozen=True)
class Elastic:
    """The job runs with any number of workers in [min_workers, max_workers]."""

    min_workers: int
    max_workers: int

    def __post_init__(self) -> None:
        if not 1 <= self.min_workers <= self.max_workers:
            raise JobError(
                f"elastic range {self.min_workers}:{self.max_workers}: need 1 <= min <= max"
            )


def _positive_int(name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise JobError(f"{name} must be a positive integer, got {value!r}")


class Until(StrEnum):
    """How a job it runs after must end: succeeded (`ok`, Slurm's afterok), or at all (`any`,
    Slurm's afterany: succeeded, failed, cancelled...)."""

    OK = "ok"
    ANY = "any"


@dataclass(frozen=True)
class After:
    """The job waits until job `job` has ended as `until` asks; under `ok`, if it ends any
    other way, the job ends `dependency-failed` without running."""

    job: str
    until: Until = Until.OK

    def __post_init__(self) -> None:
        if not self.job or not isinstance(self.job, str) or ":" in self.job:
            raise JobError(f"after: {self.job!r} is not a job name")

    @classmethod
    def parse(cls, text: str) -> After:
        """`NAME`, `NAME:ok` or `NAME:any`."""
        name, sep, until = text.rpartition(":")
        if not sep:
            return cls(text)
        if until not in {u.value for u in Until}:
            raise JobError(f"after: {text!r}: expected NAME, NAME:ok or NAME:any")
        return cls(name, Until(until))

    def met_by(self, state: JobState) -> bool:
        """Whether ending in `state` lets the waiting job run."""
        return state is JobState.SUCCEEDED or (self.until is Until.ANY and state.terminal)

    def __str__(self) -> str:
        return f"{self.job}:{self.until.value}"

    def waits(self) -> str:
        """`prep to succeed` / `prep to end`: what the waiting job waits for."""
        return f"{self.job} to {'succeed' if self.until is Until.OK else 'end'}"


@dataclass(frozen=True)
class Needs:
    """What a job asks of nodes besides GPUs: with its gang's shape, a waiting list's key."""

    where: Eligibility = ANYWHERE
    fit: WorkerFit = ANY_FIT
    mixed_types: bool = False
    # (thousandths, MiB) of one GPU for a share of it: shares wait in lists of their own,
    # and so do MIG instances, by profile.
    share: tuple[int, int] = (0, 0)
    # (required, preferred) network level: what one domain must or should hold.
    levels: tuple[str | None, str | None] = (None, None)
    mig: str = ""

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((self.where, self.fit, self.mixed_types, self.share, self.levels, self.mig))


NO_NEEDS = Needs()


@dataclass(frozen=True)
class JobSpec:
    """A gang of `workers` x `gpus_per_worker`. A job asked for as "G GPUs in total" is G 1-GPU
    workers (`JobSpec.total`): placement may then put any number of them on each node."""

    name: str
    workers: int = 1
    gpus_per_worker: int = 1
    queue: str = "default"
    owner: str = ""
    priority: int = 0
    locality: LocalityRule = LocalityRule()
    elastic: Elastic | None = None
    checkpoint: Checkpoint | None = None
    restart: RestartPolicy = RestartPolicy.NEVER
    max_restarts: int = 3
    limit_s: float | None = None
    selector: NodeSelector = EVERY_NODE  # the node labels it needs
    # The performance catalog's name for what it trains: placement by the model needs it.
    model: str | None = None
    # A network level (clique, leaf, ...) one domain of which must hold the whole gang, or
    # should (docs/placement.md, "Levels"); None: the fastest that holds it, as placed.
    topology_level: str | None = None
    topology_prefer: str | None = None
    # Per worker: millicores and bytes of memory; the least memory per GPU; the GPU types it
    # accepts (empty: any). A gang runs on one GPU type unless `mixed_types`.
    cpus: int = 0
    memory: int = 0
    gpu_memory: int = 0
    gpu_types: tuple[str, ...] = ()
    mixed_types: bool = False
    tolerations: tuple[Toleration, ...] = ()  # the node taints it accepts
    # False: the job is placed by plain GPU counting (the lowest free indices, first fit), as
    # a topology-unaware device plugin would place it (Arena's `--gputopology=false`).
    topology: bool = True
    # Given back when its GPUs sit idle (None: the queue's default rule, if any, applies).
    idle: IdleRule | None = None
    # A session (notebook, shell): drivers give it a port and, without a rule, a default one.
    interactive: bool = False
    # The jobs it runs after (Slurm's --dependency=afterok/afterany): until they have ended as
    # asked it waits without being tried (core/dependencies.py).
    after: tuple[After, ...] = ()
    # A share of one GPU (docs/placement.md, "Sharing a GPU"): compute in thousandths
    # (1-999; 0: whole GPUs) and/or GPU memory in MiB (0: none asked). A job that asks either
    # is one worker on part of one GPU, placed by the scheduler's share policy.
    gpu_milli: int = 0
    gpu_share_mib: int = 0
    # A MIG instance of this profile (`3g.40gb`; docs/placement.md, "MIG"): one worker on an
    # instance carved from a GPU in MIG mode ("": none).
    mig: str = ""

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise JobError("a job needs a name")
        if not self.queue:
            raise JobError(f"job {self.name!r}: queue must not be empty")
        _positive_int("workers", self.workers)
        if self.gpus_per_worker != 0:  # 0: a job of CPUs and memory alone (_check_cpu_only)
            _positive_int("gpus_per_worker", self.gpus_per_worker)
        if isinstance(self.priority, bool) or not isinstance(self.priority, int):
            raise JobError(f"priority must be an integer, got {self.priority!r}")
        if self.max_restarts < 0:
            raise JobError(f"max_restarts must be >= 0, got {self.max_restarts}")
        if self.limit_s is not None and not self.limit_s > 0:
            raise JobError(f"limit_s must be positive, got {self.limit_s}")
        for field_name in ("cpus", "memory", "gpu_memory", "gpu_milli", "gpu_share_mib"):
            value = getattr(self, field_name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise JobError(f"{field_name} must be a whole number >= 0, got {value!r}")
        if not isinstance(self.gpu_types, tuple) or not all(
            isinstance(t, str) and t.strip() for t in self.gpu_types
        ):
            raise JobError(f"gpu_types must be names of GPU types, got {self.gpu_types!r}")
        if self.elastic is not None and not (
            self.elastic.min_workers <= self.workers <= self.elastic.max_workers
        ):
            raise JobError(
                f"workers={self.workers} must lie in the elastic range "
                f"{self.elastic.min_workers}:{self.elastic.max_workers}"
            )
        if self.cpu_only:
            self._check_cpu_only()
        if self.shared:
            self._check_shared()
        if self.mig:
            self._check_mig()
        self._check_after()

    def _check_cpu_only(self) -> None:
        """A job without GPUs is placed by its CPUs and memory alone: it must ask for CPUs (or
        it would hold nothing), and nothing that only GPUs have."""
        if not self.cpus:
            raise JobError(
                f"job {self.name!r}: a job without GPUs (gpus_per_worker=0) must ask for CPUs"
            )
        for field_name, value in (
            ("elastic", self.elastic),
            ("gpu_types", self.gpu_types),
            ("gpu_memory", self.gpu_memory),
        ):
            if value:
                raise JobError(
                    f"job {self.name!r}: {field_name} is for jobs with GPUs; this one asks "
                    "for none (gpus_per_worker=0)"
                )

    def _check_shared(self) -> None:
        """A share is of one GPU, for one worker: only a single GPU per worker can be
        fractional, and a gang of shares is not offered yet."""
        if self.gpu_milli >= 1000:
            raise JobError(
                f"job {self.name!r}: gpu_milli is a share of one GPU in thousandths (1-999), "
                f"got {self.gpu_milli}; for whole GPUs leave it 0"
            )
        if self.gpus_per_worker != 1 or self.workers != 1 or self.elastic is not None:
            raise JobError(
                f"job {self.name!r}: a share of a GPU (gpu_milli or gpu_share_mib) is for one "
                f"worker of one GPU; this one asks {self.workers} worker(s) x "
                f"{self.gpus_per_worker} GPU(s){' and is elastic' if self.elastic else ''}"
            )

    def _check_mig(self) -> None:
        """A MIG instance is for one worker, and is all the GPU it gets."""
        if not isinstance(self.mig, str) or not self.mig.strip():
            raise JobError(f"job {self.name!r}: mig must name a MIG profile, got {self.mig!r}")
        others = [
            what
            for what, asked in (
                (f"{self.workers} workers", self.workers != 1),
                (f"{self.gpus_per_worker} GPUs per worker", self.gpus_per_worker != 1),
                ("a share of a GPU", self.shared),
                ("elastic workers", self.elastic is not None),
            )
            if asked
        ]
        if others:
            raise JobError(
                f"job {self.name!r}: mig {self.mig} is one MIG instance for one worker; "
                f"it cannot also ask {', '.join(others)}"
            )

    def _check_after(self) -> None:
        if not isinstance(self.after, tuple) or not all(isinstance(a, After) for a in self.after):
            raise JobError(f"after must be a tuple of After, got {self.after!r}")
        seen: set[str] = set()
        for dep in self.after:
            if dep.job == self.name:
                raise JobError(
                    f"after: job {self.name!r} cannot wait for itself (a cycle of dependencies)"
                )
            if dep.job in seen:
                raise JobError(f"after: {dep.job!r} is named twice")
            seen.add(dep.job)

    @classmethod
    def total(cls, name: str, gpus: int, **fields: object) -> JobSpec:
        _positive_int("gpus", gpus)
        return cls(name, workers=gpus, gpus_per_worker=1, **fields)  # type: ignore[arg-type]

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_worker

    @property
    def min_workers(self) -> int:
        """Workers the gang needs to start: the elastic minimum, or all of them."""
        return self.elastic.min_workers if self.elastic else self.workers

    @property
    def max_workers(self) -> int:
        return self.elastic.max_workers if self.elastic else self.workers

    @cached_property
    def fit(self) -> WorkerFit:
        """What each worker needs of a node besides its GPUs (the one shared object when it
        needs nothing: keys of the waiting lists compare by identity first)."""
        if not (self.gpu_types or self.gpu_memory or self.cpus or self.memory):
            return ANY_FIT
        return WorkerFit(self.gpu_types, self.gpu_memory, self.cpus, self.memory)

    @cached_property
    def where(self) -> Eligibility:
        """The nodes it may use at all."""
        if not (self.selector or self.gpu_types or self.gpu_memory or self.tolerations):
            return ANYWHERE
        return Eligibility(self.selector, self.gpu_types, self.gpu_memory, self.tolerations)

    @cached_property
    def needs(self) -> Needs:
        """All it asks of nodes besides GPUs, in one key."""
        share = (self.gpu_milli, self.gpu_share_mib)
        plain = self.where is ANYWHERE and self.fit is ANY_FIT and not self.mixed_types
        levels = (self.topology_level, self.topology_prefer)
        if plain and not self.part_of_gpu and levels == (None, None):
            return NO_NEEDS
        return Needs(self.where, self.fit, self.mixed_types, share, levels, self.mig)

    @property
    def cpu_only(self) -> bool:
        """No GPUs: its workers hold CPUs and memory alone (a pipeline's preparation stage)."""
        return self.gpus_per_worker == 0

    @property
    def shared(self) -> bool:
        """It asks part of one GPU (compute or memory), not whole GPUs."""
        return bool(self.gpu_milli or self.gpu_share_mib)

    @property
    def part_of_gpu(self) -> bool:
        """It asks part of one GPU: a share of it, or a MIG instance."""
        return self.shared or bool(self.mig)

    @property
    def share_milli(self) -> int:
        """The thousandths of a GPU it counts for: its compute share, a whole GPU (1000)
        for a job of whole GPUs, 0 for a memory share alone (it takes no compute)."""
        return self.gpu_milli if self.shared else 1000

    @property
    def checkpointable(self) -> bool:
        """Jobs with a checkpoint contract lose no work when stopped and restarted elsewhere."""
        return self.checkpoint is not None


class JobState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    REJECTED = "rejected"
    IDLE_STOPPED = "idle-stopped"  # stopped by its idle rule, and not checkpointable
    # A job it had to run after (`After`, until ok) ended otherwise: it never ran.
    DEPENDENCY_FAILED = "dependency-failed"
    TIMED_OUT = "timed-out"  # its run reached its time limit (limit_s), as Slurm's TIMEOUT

    @property
    def terminal(self) -> bool:
        return self in (
            JobState.SUCCEEDED,
            JobState.FAILED,
            JobState.CANCELLED,
            JobState.REJECTED,
            JobState.IDLE_STOPPED,
            JobState.DEPENDENCY_FAILED,
            JobState.TIMED_OUT,
        )
