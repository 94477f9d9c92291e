"""Events the scheduler core is fed: everything it knows about the world arrives as one of these."""

from __future__ import annotations

from dataclasses import dataclass

from toposched.core.actions import StopKind
from toposched.core.job import JobSpec, JobState
from toposched.placement.gang import Placement
from toposched.topology.cluster import Node


@dataclass(frozen=True)
class Event:
    """`time` is the driver's clock (seconds); the core never reads one of its own."""

    time: float


# (job, the state it ended in): what a driver knows of jobs the core may no longer hold.
Ended = tuple[tuple[str, JobState], ...]


@dataclass(frozen=True)
class JobSubmitted(Event):
    """A new job. `ended`: how the jobs it runs after (`spec.after`) ended, for those the
    driver knows have ended (the core forgets ended jobs in time; its own word wins)."""

    spec: JobSpec
    ended: Ended = ()


@dataclass(frozen=True)
class JobRestored(Event):
    """A driver that restarted hands back a job it had persisted: waiting since `submitted`
    when `placement` is None, else running there already (its workers were adopted), or being
    stopped there when `stopping` names the stop under way (answer it with JobStopped).
    `service_gpu_s`: the GPU-seconds of service it had had by the event's time (least attained
    service counts them, as the old core did since the job's last promotion).
    `ended`: as JobSubmitted's, for a waiting job; a job it runs after that the core neither
    holds nor is told of is taken as met (deleted after it ended: the job was let go then).
    `started`: when a running job's run began, which its time limit counts from (None: the
    event's time)."""

    spec: JobSpec
    submitted: float
    placement: Placement | None = None
    restarts: int = 0
    stopping: StopKind | None = None
    service_gpu_s: float = 0.0
    ended: Ended = ()
    started: float | None = None


@dataclass(frozen=True)
class JobCancelled(Event):
    job: str


@dataclass(frozen=True)
class JobFinished(Event):
    """Every worker of the job has ended; `succeeded` when all exited cleanly."""

    job: str
    succeeded: bool
    reason: str = ""


@dataclass(frozen=True)
class JobIdle(Event):
    """The driver saw every GPU of a running job stay below its idle rule's threshold for the
    rule's time (`why` says it in figures), and the rule says stop: the core stops the job."""

    job: str
    why: str


@dataclass(frozen=True)
class WorkerFailed(Event):
    """One worker died: the rest of the gang must be stopped."""

    job: str
    worker: int
    reason: str = ""


@dataclass(frozen=True)
class JobStopped(Event):
    """The driver carried out a StopJob: no process of the job holds its GPUs any more."""

    job: str


@dataclass(frozen=True)
class NodeAdded(Event):
    node: Node


@dataclass(frozen=True)
class NodeRemoved(Event):
    node: str


@dataclass(frozen=True)
class NodeLabelled(Event):
    """Set (or, with value None, remove) one label of a node."""

    node: str
    key: str
    value: str | None


@dataclass(frozen=True)
class NodeChanged(Event):
    """A present node's labels, hardware (GPU type and memory, CPUs and memory for workers)
    or taints changed; its GPUs and their wiring did not. Jobs running there go on, even if it
    now has less than they hold (another scheduler's pods): nothing new fits until they end."""

    node: Node


@dataclass(frozen=True)
class NodeCordoned(Event):
    """A node takes no new work (cordoned, drained, not ready), or takes it again
    (`cordoned=False`); the jobs running there go on, and their GPUs stay off limits once they
    end."""

    node: str
    cordoned: bool = True


@dataclass(frozen=True)
class GpuHealth(Event):
    node: str
    gpu: int
    healthy: bool


@dataclass(frozen=True)
class QueueConfigured(Event):
    """Set a queue's guaranteed share in GPUs (creating the queue if it is new)."""

    queue: str
    guaranteed_gpus: int


@dataclass(frozen=True)
class Tick(Event):
    """Time passed: waits may have crossed a locality deadline."""
