"""Wire schemas of the REST API, in one place: what clients send and what they get back."""

from __future__ import annotations

import posixpath
import re
from signal import Signals
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from toposched.common.durations import DurationError, parse_duration
from toposched.common.frameworks import MAX_PS, Kind, KindError, kind_of
from toposched.common.wiretext import faults
from toposched.core.job import After, Checkpoint, JobError, LocalityRule
from toposched.topology.resources import (
    QuantityError,
    cpus_text,
    memory_text,
    parse_cpus,
    parse_memory,
)

NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
NAME_RULE = (
    "lower-case letters, digits, '.', '_' and '-', 1-64 long, starting and ending alphanumeric"
)


# Bounds on what a job stores, so that no answer grows without bound (a job's `get` carries
# all of it): Linux takes 2 MiB of arguments and environment, far more than a job needs here.
MAX_COMMAND_BYTES = 64 * 1024
MAX_ENV_BYTES = 64 * 1024
MAX_WORKDIR_BYTES = 4096
MAX_SELECTOR = 64
MAX_GPU_TYPES = 16
MAX_AFTER = 64  # jobs one job runs after
MAX_IDEMPOTENCY_KEY = 200  # characters of an Idempotency-Key header (at least 1)
# Signals a process cannot catch: a job cannot save its state on them.
UNCATCHABLE = ("SIGKILL", "SIGSTOP")


def check_name(value: str, what: str) -> str:
    # fullmatch: `$` would let a trailing newline through.
    if not NAME.fullmatch(value):
        raise ValueError(f"{what} {value!r}: use {NAME_RULE}")
    return value


def no_nul(value: str, what: str) -> str:
    """`value`, unless it holds a NUL: no C string (argv, environ, a path) can carry one."""
    if "\0" in value:
        raise ValueError(f"{what} {value[:60]!r} contains a NUL character")
    return value


def check_size(used: int, limit: int, what: str) -> None:
    if used > limit:
        raise ValueError(f"{what} is {used} bytes; at most {limit} bytes ({limit // 1024} KiB)")


def utf8_len(words: list[str]) -> int:
    return sum(len(word.encode("utf-8", "surrogatepass")) for word in words)


def check_workdir(value: str) -> str:
    """An absolute path with no `.` or `..` step (what it names is what the workers get)."""
    no_nul(value, "workdir")
    check_size(utf8_len([value]), MAX_WORKDIR_BYTES, "workdir")
    if not value.startswith("/"):
        raise ValueError(f"workdir {value!r} must be an absolute path")
    if any(part in (".", "..") for part in value.split("/")):
        plain = posixpath.normpath(value)
        raise ValueError(f"workdir {value!r} must not contain '.' or '..' steps (write {plain!r})")
    return value


class Strict(BaseModel):
    # Strict types: JSON `true` is no worker count, nor "5" a priority.
    model_config = ConfigDict(extra="forbid", strict=True)

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        """Refuse, by its path, any text the store could not read back and any nesting too
        deep to walk: before a field is read, so that every route applies the same rule."""
        found = list(faults(data))
        if found:
            raise ValidationError.from_exception_data(
                cls.__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError("unstorable", "{why}", {"why": why}),
                        loc=path,
                        input="(not echoed)",
                    )
                    for path, why in found
                ],
            )
        return data


Seconds = Annotated[float, Field(allow_inf_nan=False)]


class ElasticIn(Strict):
    min: Annotated[int, Field(ge=1, le=4096)]
    max: Annotated[int, Field(ge=1, le=4096)]

    @model_validator(mode="after")
    def _order(self) -> ElasticIn:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class CheckpointIn(Strict):
    signal: str = "SIGTERM"
    grace_s: Annotated[Seconds, Field(ge=0, le=86_400)] = 30.0
    interval_s: Annotated[Seconds, Field(gt=0, le=30 * 86_400)] | None = Field(
        None, description="Seconds of work between its checkpoints: what a stop would lose"
    )

    @field_validator("signal")
    @classmethod
    def _signal(cls, value: str) -> str:
        try:
            Checkpoint(value, 0)
        except JobError as err:
            raise ValueError(str(err)) from None
        # The executor sends it by name: one it does not know (SIGFOO) would make every stop
        # of the job fail, leaving it stopping for ever with its GPUs held.
        if value.upper() not in Signals.__members__:
            raise ValueError(f"checkpoint signal {value!r} is not a signal of this system")
        if value.upper() in UNCATCHABLE:
            raise ValueError(
                f"checkpoint signal {value!r} cannot be caught, so nothing can checkpoint on it; "
                "use one such as SIGUSR1 or SIGTERM"
            )
        return value


class IdleIn(Strict):
    """Give back a job's GPUs when every one stays below `below` percent busy for `after`."""

    after: str | Annotated[float, Field(gt=0, allow_inf_nan=False)] = Field(
        description="How long, e.g. 30m, 1h30m, 45s, or seconds"
    )
    below: Annotated[float, Field(gt=0, le=100, allow_inf_nan=False)] = Field(
        5.0, description="Percent busy (NVML utilization, or the CPU stand-in without NVML)"
    )
    action: Literal["notify", "stop"] = Field(
        "notify", description="notify: say so and keep the GPUs; stop: stop as a preemption"
    )

    @field_validator("after")
    @classmethod
    def _after(cls, value: str | float) -> float:
        try:
            seconds = parse_duration(value, "idle after")
        except DurationError as err:
            raise ValueError(str(err)) from None
        if seconds > 30 * 86_400:
            raise ValueError(f"idle after must be at most 30 days, got {value!r}")
        return seconds


class JobSubmit(Strict):
    """A job as a client submits it (the YAML job spec has the same fields)."""

    name: str | None = None
    queue: str | None = None
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    workers: Annotated[int, Field(ge=1, le=4096)] = 1
    gpus: Annotated[
        int,
        Field(
            ge=0,
            le=64,
            description="GPUs per worker; 0: a job of CPUs and memory alone (it must give cpus)",
        ),
    ] = 1
    kind: str = Field(
        Kind.PYTORCH.value,
        description="pytorch, tensorflow or mpi (Arena's pytorchjob, tfjob, mpijob accepted)",
    )
    ps: Annotated[
        int, Field(ge=0, le=MAX_PS, description="parameter servers (tensorflow only; no GPU)")
    ] = 0
    locality: str = "node"
    selector: dict[str, str] = Field(
        default_factory=dict,
        description="Node labels the job needs, every one (as Kubernetes' nodeSelector)",
    )
    cpus: str | int | float | None = Field(
        None, description="CPUs per worker: 4, 2.5 or 500m (a Kubernetes quantity)"
    )
    memory: str | int | None = Field(
        None, description="Memory per worker: 16Gi, 512Mi, 16G, or bytes (a Kubernetes quantity)"
    )
    gpu_memory: str | int | None = Field(
        None, description="The least memory each GPU must have, e.g. 32Gi"
    )
    gpu_type: list[str] | None = Field(
        None,
        description="The GPU types the job accepts, any one of them (default: any); a gang "
        "runs on one type unless mixed_types",
    )
    mixed_types: bool = Field(False, description="Whether one gang may span GPU types")
    gputopology: bool = Field(
        True,
        description="Arena's switch: false places the job as plain GPU counting does (the "
        "lowest free indices, first fit), true by the GPUs' topology",
    )
    image: str | None = Field(
        None,
        min_length=1,
        max_length=512,
        description="A container image the workers run in (podman or docker on the server)",
    )
    model: str | None = Field(
        None,
        max_length=100,
        description="What the job trains, a model of the performance catalog (`toposched perf "
        "--list`), for its predicted speed (default resnet50)",
    )
    elastic: ElasticIn | None = None
    checkpoint: CheckpointIn | None = None
    idle: IdleIn | None = Field(
        None, description="Give its GPUs back when they sit idle (default: the queue's rule)"
    )
    restart: Literal["never", "on-failure"] = "never"
    max_restarts: Annotated[int, Field(ge=0, le=100)] = 3
    limit_s: Annotated[Seconds, Field(gt=0)] | None = None
    command: Annotated[list[str], Field(min_length=1)]
    env: dict[str, str] = Field(default_factory=dict)
    exported: list[str] = Field(
        default_factory=list,
        description="The names in `env` that came from the submitter's environment "
        "(`submit --export`), which `get` shows",
    )
    workdir: str | None = None
    command_visible: bool = Field(
        False, description="Whether other teams may see the command (their view hides it)."
    )
    interactive: bool = Field(
        False,
        description="A session (a notebook, a shell): one worker, a port of its own (in "
        "TOPOSCHED_PORT, and for $(TOPOSCHED_PORT) in the command) that `get` shows, never "
        "restarted, given back when idle by default (docs/idle.md)",
    )
    after: list[str] = Field(
        default_factory=list,
        description="Jobs it runs after (Slurm's --dependency): NAME or NAME:ok, the job must "
        "succeed; NAME:any, it must end, however. The job waits until they have; if one under "
        "ok does not succeed, it ends dependency-failed without running. Each must exist.",
    )

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "job name")

    @field_validator("queue")
    @classmethod
    def _queue(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "queue")

    @field_validator("kind")
    @classmethod
    def _kind(cls, value: str) -> str:
        try:
            return kind_of(value).value  # stored by its own name: `tfjob` is `tensorflow`
        except KindError as err:
            raise ValueError(str(err)) from None

    @field_validator("ps")
    @classmethod
    def _ps(cls, value: int, info: ValidationInfo) -> int:
        kind = info.data.get("kind")  # absent when the kind itself was refused
        if value and kind is not None and kind != Kind.TENSORFLOW.value:
            raise ValueError(f"parameter servers (ps={value}) are for tensorflow jobs, not {kind}")
        return value

    @field_validator("selector")
    @classmethod
    def _selector(cls, value: dict[str, str]) -> dict[str, str]:
        if len(value) > MAX_SELECTOR:
            raise ValueError(f"a selector has at most {MAX_SELECTOR} labels, got {len(value)}")
        for key, text in value.items():
            # A node label's own bounds (LabelIn): a longer one could never match.
            if not key or len(key) > 300 or len(text) > 300:
                raise ValueError(f"selector label {key[:60]!r}: 1-300 characters, value 0-300")
            no_nul(key, "selector label")
            no_nul(text, f"the value of selector label {key}")
        return value

    @field_validator("cpus")
    @classmethod
    def _cpus(cls, value: str | float | None) -> str | None:
        # Stored as its shortest exact text: what `get` shows, and what the executor reads.
        return None if value is None else cpus_text(_quantity(parse_cpus, value, "cpus"))

    @field_validator("memory", "gpu_memory")
    @classmethod
    def _memory(cls, value: str | int | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        return memory_text(_quantity(parse_memory, value, str(info.field_name)))

    @field_validator("gpu_type")
    @classmethod
    def _gpu_type(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("give at least one GPU type (e.g. [V100, A100]), or leave it out")
        if len(value) > MAX_GPU_TYPES:
            raise ValueError(f"at most {MAX_GPU_TYPES} GPU types, got {len(value)}")
        # `V100,A100` is two types, as `submit --gpu-type V100,A100` says it: no type's name
        # holds a comma, and a job waiting for one that does would wait for ever.
        names = [name.strip() for item in value for name in item.split(",")]
        for name in names:
            if not name or len(name) > 100:
                raise ValueError(f"a GPU type is 1-100 characters, got {name[:60]!r}")
            no_nul(name, "a GPU type")
        return names

    @field_validator("locality")
    @classmethod
    def _locality(cls, value: str) -> str:
        try:
            LocalityRule.parse(value)
        except JobError as err:
            raise ValueError(str(err)) from None
        return value

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the command's first word (the program) must not be empty")
        for i, word in enumerate(value):
            no_nul(word, f"word {i} of the command")
        check_size(utf8_len(value), MAX_COMMAND_BYTES, "the command")
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key, text in value.items():
            if not ENV_KEY.fullmatch(key):
                raise ValueError(f"environment variable name {key[:60]!r} is not valid")
            no_nul(text, f"the value of environment variable {key}")
        check_size(utf8_len([*value, *value.values()]), MAX_ENV_BYTES, "the environment")
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str | None) -> str | None:
        # A reference as registries write them: no spaces, and never read as an option.
        if value is not None and (not IMAGE.fullmatch(value) or value.startswith("-")):
            raise ValueError(f"{value[:80]!r} is not an image reference (e.g. nvcr.io/x/y:1.0)")
        return value

    @field_validator("workdir")
    @classmethod
    def _workdir(cls, value: str | None) -> str | None:
        return None if value is None else check_workdir(value)

    @field_validator("after")
    @classmethod
    def _after(cls, value: list[str], info: ValidationInfo) -> list[str]:
        # Stored as NAME:ok or NAME:any, each once: what `get` shows and the core reads.
        if len(value) > MAX_AFTER:
            raise ValueError(f"at most {MAX_AFTER} jobs to run after, got {len(value)}")
        out: list[str] = []
        for text in value:
            try:
                dep = After.parse(text)
            except JobError as err:
                raise ValueError(str(err).removeprefix("after: ")) from None
            check_name(dep.job, "the job to run after")
            if dep.job == info.data.get("name"):
                raise ValueError(
                    f"job {dep.job!r} cannot run after itself (a cycle of dependencies)"
                )
            if any(After.parse(seen).job == dep.job for seen in out):
                raise ValueError(f"{dep.job!r} is named twice")
            out.append(str(dep))
        return out

    @model_validator(mode="after")
    def _elastic_range(self) -> JobSubmit:
        if self.elastic is not None and not self.elastic.min <= self.workers <= self.elastic.max:
            raise ValueError(
                f"workers ({self.workers}) must lie in the elastic range "
                f"{self.elastic.min}:{self.elastic.max}"
            )
        missing = [name for name in self.exported if name not in self.env]
        if missing:
            raise ValueError(f"exported names {missing[0][:60]!r}, which env does not hold")
        if self.interactive:
            self._one_session()
        if self.gpus == 0:
            self._cpus_alone()
        return self

    def _one_session(self) -> None:
        """An interactive session is one process that is never restarted or moved."""
        wrong = [
            ("workers", self.workers != 1, f"workers must be 1, got {self.workers}"),
            ("elastic", self.elastic is not None, "it cannot be elastic"),
            ("kind", self.kind != Kind.PYTORCH.value, f"it has no kind ({self.kind})"),
            ("restart", self.restart != "never", "restart must be never: it is not restarted"),
            ("checkpoint", self.checkpoint is not None, "it cannot checkpoint"),
        ]
        for field, bad, why in wrong:
            if bad:
                raise _field_error(field, f"an interactive session runs one worker once: {why}")

    def _cpus_alone(self) -> None:
        """A job of CPUs alone (gpus 0) is placed by its CPUs: it must ask for some, and
        nothing that only GPUs have; refused by the field at fault."""
        if self.cpus is None:
            raise _field_error(
                "cpus", "a job without GPUs (gpus 0) must ask for CPUs (e.g. 2 or 500m)"
            )
        for name in ("elastic", "gpu_type", "gpu_memory"):
            if getattr(self, name) is not None:
                raise _field_error(name, "is for jobs with GPUs; this one asks for none (gpus 0)")


def _field_error(field: str, message: str) -> ValidationError:
    """A refusal of the whole submission that names `field` (a check across fields)."""
    error = PydanticCustomError("value_error", "Value error, {why}", {"why": message})
    return ValidationError.from_exception_data(
        JobSubmit.__name__, [InitErrorDetails(type=error, loc=(field,), input="(not echoed)")]
    )


class WorkerOut(BaseModel):
    worker: int
    node: str
    gpus: list[int]


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


def _quantity(parse: Any, value: object, what: str) -> int:
    try:
        amount: int = parse(value, what)
    except QuantityError as err:
        raise ValueError(str(err)) from None
    if amount > 2**62:
        raise ValueError(f"{what} {value!r} is more than any machine has")
    return amount


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


class GpuOut(BaseModel):
    index: int
    job: str | None
    healthy: bool
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
