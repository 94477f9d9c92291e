"""Actions the core asks its driver to carry out, each with the reason it was decided."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from toposched.core.job import JobState
from toposched.placement.gang import Placement, WorkerSlot

__all__ = [
    "Action",
    "Placement",
    "StartJob",
    "StopJob",
    "StopKind",
    "Transition",
    "WorkerSlot",
]


class StopKind(StrEnum):
    CANCEL = "cancel"
    FAILURE = "failure"
    PREEMPT = "preempt"
    MIGRATE = "migrate"
    RESIZE = "resize"
    IDLE = "idle"  # its GPUs sat idle for its idle rule's time
    TIME_LIMIT = "time-limit"  # its run reached its limit_s


@dataclass(frozen=True)
class Action:
    job: str
    reason: str


@dataclass(frozen=True)
class StartJob(Action):
    placement: Placement


@dataclass(frozen=True)
class StopJob(Action):
    """Stop every worker: send `signal`, wait `grace_s`, then kill; answer with JobStopped."""

    kind: StopKind
    signal: str = "SIGTERM"
    grace_s: float = 0.0


@dataclass(frozen=True)
class Transition(Action):
    """A job changed state; drivers persist these (one transaction each)."""

    old: JobState | None
    new: JobState
