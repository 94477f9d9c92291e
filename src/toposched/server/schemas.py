"""Wire schemas of the REST API, in one place: what clients send and what they get back."""

from __future__ import annotations

import re
from signal import Signals
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from toposched.core.job import Checkpoint, JobError, LocalityRule

NAME = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
NAME_RULE = (
    "lower-case letters, digits, '.', '_' and '-', 1-64 long, starting and ending alphanumeric"
)


def check_name(value: str, what: str) -> str:
    if not NAME.match(value):
        raise ValueError(f"{what} {value!r}: use {NAME_RULE}")
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ElasticIn(Strict):
    min: Annotated[int, Field(ge=1)]
    max: Annotated[int, Field(ge=1)]

    @model_validator(mode="after")
    def _order(self) -> ElasticIn:
        if self.min > self.max:
            raise ValueError(f"min ({self.min}) must be <= max ({self.max})")
        return self


class CheckpointIn(Strict):
    signal: str = "SIGTERM"
    grace_s: Annotated[float, Field(ge=0, le=86_400)] = 30.0

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
        return value


class JobSubmit(Strict):
    """A job as a client submits it (the YAML job spec has the same fields)."""

    name: str | None = None
    queue: str | None = None
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    workers: Annotated[int, Field(ge=1, le=4096)] = 1
    gpus: Annotated[int, Field(ge=1, le=64, description="GPUs per worker")] = 1
    locality: str = "node"
    elastic: ElasticIn | None = None
    checkpoint: CheckpointIn | None = None
    restart: Literal["never", "on-failure"] = "never"
    max_restarts: Annotated[int, Field(ge=0, le=100)] = 3
    limit_s: Annotated[float, Field(gt=0)] | None = None
    command: Annotated[list[str], Field(min_length=1)]
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "job name")

    @field_validator("queue")
    @classmethod
    def _queue(cls, value: str | None) -> str | None:
        return None if value is None else check_name(value, "queue")

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
        return value

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not ENV_KEY.match(key):
                raise ValueError(f"environment variable name {key!r} is not valid")
        return value

    @model_validator(mode="after")
    def _elastic_range(self) -> JobSubmit:
        if self.elastic is not None and not self.elastic.min <= self.workers <= self.elastic.max:
            raise ValueError(
                f"workers ({self.workers}) must lie in the elastic range "
                f"{self.elastic.min}:{self.elastic.max}"
            )
        return self


class WorkerOut(BaseModel):
    worker: int
    node: str
    gpus: list[int]


class HistoryOut(BaseModel):
    time: float
    old: str | None
    new: str
    reason: str


class JobOut(BaseModel):
    name: str
    owner: str
    queue: str
    priority: int
    state: str
    reason: str
    workers: int
    gpus_per_worker: int
    placement: list[WorkerOut]
    attempt: int
    restarts: int
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    command: list[str]
    spec: dict[str, Any]
    history: list[HistoryOut] | None = None


class JobList(BaseModel):
    jobs: list[JobOut]


class Explanation(BaseModel):
    name: str
    state: str
    text: str


class GpuOut(BaseModel):
    index: int
    job: str | None
    healthy: bool


class NodeOut(BaseModel):
    name: str
    topology: str
    source: str
    gpus: list[GpuOut]
    labels: dict[str, str]
    links: list[list[str]]


class NodeList(BaseModel):
    nodes: list[NodeOut]


class LabelIn(Strict):
    key: Annotated[str, Field(min_length=1, max_length=300)]
    value: Annotated[str, Field(max_length=300)] | None


class QueueOut(BaseModel):
    name: str
    guaranteed_gpus: int
    used_gpus: int
    pending: int
    running: int


class QueueList(BaseModel):
    queues: list[QueueOut]


class QueueIn(Strict):
    guaranteed_gpus: Annotated[int, Field(ge=0, le=1_000_000)]


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
