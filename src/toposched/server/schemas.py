"""Wire schemas of the REST API: what clients send and what they get back (a job's submit,
JobSubmit, is made from the job's fields in jobschema.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator, model_validator

from toposched.server.jobschema import IdleIn as IdleIn
from toposched.server.jobschema import JobSubmit as JobSubmit
from toposched.server.wirebase import MAX_COMMAND_BYTES as MAX_COMMAND_BYTES
from toposched.server.wirebase import MAX_ENV_BYTES as MAX_ENV_BYTES
from toposched.server.wirebase import MAX_IDEMPOTENCY_KEY as MAX_IDEMPOTENCY_KEY
from toposched.server.wirebase import Strict, no_nul
from toposched.server.wirebase import check_name as check_name


class WorkerOut(BaseModel):
    worker: int
    node: str
    gpus: list[int]
    mig_start: int | None = Field(
        None, description="A MIG job's instance: its first memory slice on its one GPU"
    )


class ActivityOut(BaseModel):
    """How busy a running job's GPUs are (server/activity.py; docs/idle.md)."""

    source: str = Field(description="nvml, or cpu: the CPU time of its processes (no NVML)")
    busy_pct: float = Field(description="At the last sample, the mean over its GPUs")
    mean_pct: float = Field(description="The mean of its samples since it started")
    samples: int
    idle_since: float | None = Field(
        default=None,
        description="Since when every GPU it holds has been below its idle rule's threshold",
    )
    idle_notice: str | None = Field(default=None, description="What its `notify` idle rule said")
    gpu_memory_used: int | None = Field(
        default=None, description="A shared job: bytes of GPU memory its processes use (NVML)"
    )
    gpu_memory_share: int | None = Field(
        default=None, description="A shared job: bytes of its GPU's memory that are its share"
    )
    gpu_memory_notice: str | None = Field(
        default=None, description="Said while a shared job uses more GPU memory than its share"
    )


class ActivityHistory(BaseModel):
    """A running job's samples: [time, percent busy (mean over its GPUs)], oldest first."""

    name: str
    source: str | None
    samples: list[tuple[float, float]]


class PredictedOut(BaseModel):
    """The performance model's prediction for a placement (server/predicted.py)."""

    model: str
    samples_per_s: float
    best_samples_per_s: float = Field(description="Of the best placement of as many GPUs")
    share: float = Field(description="samples_per_s over best_samples_per_s")


class HistoryOut(BaseModel):
    time: float
    old: str | None
    new: str
    reason: str


class JobSummary(BaseModel):
    """A job in a list: what `get` shows but its command, environment and history (a list
    stays cheap however large those are)."""

    name: str
    owner: str
    queue: str
    priority: int
    state: str
    reason: str
    workers: int
    gpus_per_worker: int
    placement: list[WorkerOut]
    ring_gbps: float | None = Field(
        None, description="The ring bandwidth of the GPUs it holds (None: none, or one GPU)"
    )
    predicted: PredictedOut | None = Field(
        None, description="The performance model's speed of its placement, while it holds one"
    )
    port: int | None = Field(
        default=None,
        description="An interactive session's port on the server's machine, while it runs",
    )
    activity: ActivityOut | None = Field(
        default=None, description="How busy its GPUs are, while it runs (after its first sample)"
    )
    attempt: int
    restarts: int
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    spec: dict[str, Any]


class CoresOut(BaseModel):
    """The CPU cores one of a job's processes is pinned to (the local executor)."""

    process: int
    name: str = Field(description="worker-0, ps-0 or launcher-0")
    cores: str = Field(description="as a CPU list: 0-3,8")
    note: str = ""


class AfterOut(BaseModel):
    """A job it runs after, as `get` shows it."""

    job: str
    until: Literal["ok", "any"] = Field(description="ok: it must succeed; any: end, however")
    state: str = Field(description="Its state now; `deleted` once removed")


class JobOut(JobSummary):
    """The whole job, as `get` shows it."""

    command: list[str]
    history: list[HistoryOut] | None = None
    cores: list[CoresOut] | None = None
    after: list[AfterOut] | None = Field(
        None, description="In `get`: the jobs it runs after (spec.after), each with its state"
    )
    deleted: bool = Field(
        False, description="In a DELETE's answer: the ended job was removed, its name is free."
    )


DEFAULT_PAGE = 100
MAX_PAGE = 1000


class ListQuery(BaseModel):
    """The query of `GET /api/v1/jobs`: its filters, order and page. Read as one model, which
    costs FastAPI a fraction of reading seven parameters one by one, on every list."""

    state: list[str] | None = Field(None, description="Repeat for several.")
    queue: str | None = None
    owner: str | None = None
    all: bool = Field(False, description="Include ended jobs.")
    limit: int = Field(
        DEFAULT_PAGE, ge=1, description=f"Jobs per page; at most {MAX_PAGE} are given."
    )
    newest_first: bool = Field(False, description="Newest first (pages go back in time).")
    continue_: str | None = Field(
        None,
        alias="continue",
        max_length=200,
        description="The `metadata.continue` of the page before, with the same filters.",
    )


class ListMeta(BaseModel):
    # Named as Kubernetes names it: pass it back as `?continue=` for the next page.
    continue_: str | None = Field(None, alias="continue", serialization_alias="continue")


class JobPage(BaseModel):
    """A page of `GET /api/v1/jobs`: `metadata.continue` is set while more remain."""

    jobs: list[JobSummary]
    metadata: ListMeta


class Explanation(BaseModel):
    name: str
    state: str
    text: str


class ShareOut(BaseModel):
    """A job's share of a shared GPU."""

    job: str
    milli: int = Field(description="Thousandths of the GPU's compute (0: a memory share alone)")
    memory_mib: int = Field(description="MiB of its memory asked (0: none asked)")


class GpuOut(BaseModel):
    index: int
    job: str | None
    healthy: bool
    shares: list[ShareOut] = Field(
        default_factory=list, description="The jobs holding shares of it (a shared GPU)"
    )
    busy_pct: float | None = Field(
        default=None, description="How busy at the last sample (activity_source says how measured)"
    )
    memory_used: int | None = Field(default=None, description="Bytes in use (NVML only)")
    outside: list[int] = Field(
        default_factory=list,
        description="Pids on this GPU while no job holds it: run outside the scheduler",
    )


class NodeOut(BaseModel):
    name: str
    topology: str
    source: str
    activity_source: str | None = Field(
        default=None,
        description="How busy_pct is measured: NVML GPU utilization, or (no NVML) the CPU "
        "time of the jobs' processes as a stand-in; None where nothing is sampled",
    )
    gpus: list[GpuOut]
    labels: dict[str, str]
    links: list[list[str]]
    gpu_type: str = Field(
        default="", description="The GPU type, as scheduling compares it ('' unknown)"
    )
    gpu_memory: int = Field(default=0, description="Bytes of memory per GPU (0 unknown)")
    cpus: int | None = Field(default=None, description="Millicores for workers (null: not counted)")
    cpus_used: int = Field(default=0, description="Millicores its jobs' workers hold")
    memory: int | None = Field(
        default=None, description="Bytes of memory for workers (null: not counted)"
    )
    memory_used: int = Field(default=0, description="Bytes of memory its jobs' workers hold")


class NodeList(BaseModel):
    nodes: list[NodeOut]


class LabelIn(Strict):
    key: Annotated[str, Field(min_length=1, max_length=300)]
    value: Annotated[str, Field(max_length=300)] | None

    @field_validator("key", "value")
    @classmethod
    def _no_nul(cls, value: str | None, info: ValidationInfo) -> str | None:
        return None if value is None else no_nul(value, f"label {info.field_name}")


class IdleOut(BaseModel):
    """An idle rule as stored: `after` in seconds."""

    after: float
    below: float
    action: str


class QueueOut(BaseModel):
    name: str
    guaranteed_gpus: int
    used_gpus: int
    pending: int
    running: int
    idle: IdleOut | None = Field(
        default=None, description="The idle rule of its jobs that set none of their own (admin-set)"
    )


class QueueList(BaseModel):
    queues: list[QueueOut]


class QueueIn(Strict):
    """What a PUT changes: the fields given (`idle: null` removes the queue's rule)."""

    guaranteed_gpus: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    idle: IdleIn | None = None

    @model_validator(mode="after")
    def _something(self) -> QueueIn:
        if not self.model_fields_set:
            raise ValueError("give guaranteed_gpus, idle, or both")
        if "guaranteed_gpus" in self.model_fields_set and self.guaranteed_gpus is None:
            raise ValueError("guaranteed_gpus must be a number of GPUs >= 0")
        return self


class TokenIn(Strict):
    user: str
    team: str
    admin: bool = False

    @field_validator("user")
    @classmethod
    def _user(cls, value: str) -> str:
        return check_name(value, "user")

    @field_validator("team")
    @classmethod
    def _team(cls, value: str) -> str:
        return check_name(value, "team")


class TokenOut(BaseModel):
    token: str
    user: str
    team: str
    role: str


class WhoAmI(BaseModel):
    user: str
    team: str
    role: str


class Health(BaseModel):
    status: str  # ok, degraded (changes are refused: see `degraded`), or broken: ...
    degraded: str | None = None  # why the server cannot store changes now
    version: str
    node: str
    gpus: int
    database: str
    auth: bool
