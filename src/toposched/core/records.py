"""The core's mutable view of each job and queue, and the reservation; only the core changes
these."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

from toposched.core.actions import StopKind
from toposched.core.job import JobSpec, JobState
from toposched.placement.capacity import Capacity
from toposched.placement.gang import Placement, WorkerSlot
from toposched.topology.cluster import Tier

LOG_LINES = 32


@dataclass
class JobRecord:
    spec: JobSpec
    seq: int
    submitted: float
    state: JobState = JobState.PENDING
    waiting_since: float = 0.0
    placement: Placement | None = None
    # While a migration or resize stops the job, the GPUs it moves to are already its own
    # (`target`), and `resume` is the placement it restarts on once stopped.
    target: Placement | None = None
    resume: Placement | None = None
    # Workers bound so far by a non-gang policy while the job still waits for the rest.
    partial: list[WorkerSlot] = field(default_factory=list)
    last_restart: float = 0.0
    stop_kind: StopKind | None = None
    stop_why: str = ""
    cancel_requested: bool = False
    started: float | None = None
    # GPU-seconds of service from runs that have ended (the current run counts on top).
    banked_service: float = 0.0
    # Service a promotion forgave (least attained service): demotion counts what came after.
    forgiven: float = 0.0
    restarts: int = 0
    # Times the core stopped it to make room (preempted, moved, shrunk): what protects it from
    # more (core/stoprule.py).
    stops: int = 0
    reason: str = ""
    said: Said | None = None  # what `reason` states that may change before it is read
    tried: int = 0  # the last scheduling cycle that looked at this job
    log: deque[tuple[float, str]] = field(default_factory=lambda: deque(maxlen=LOG_LINES))

    @property
    def name(self) -> str:
        return self.spec.name

    def note(self, time: float, text: str) -> None:
        """Record why something happened (or did not); repeats of the last line are dropped."""
        self.reason = text
        self.said = None
        if not self.log or self.log[-1][1] != text:
            self.log.append((time, text))

    def held(self) -> list[Placement]:
        held = [p for p in (self.placement, self.target) if p is not None]
        if self.partial:
            held.append(Placement(tuple(self.partial), None, Tier.NODE))
        return held

    def gpus_held(self) -> int:
        held = self.placement.gpus if self.placement is not None else 0
        if self.target is not None:
            held += self.target.gpus
        return held + sum(len(slot.gpus) for slot in self.partial)

    def service(self, now: float) -> float:
        """GPU-seconds this job has run so far (least-attained-service ordering)."""
        if self.placement is None:
            return self.banked_service
        return self.banked_service + self.placement.gpus * (now - self.last_restart)

    def bank_service(self, now: float) -> None:
        """Count the current run's service, before its placement changes or it stops."""
        self.banked_service = self.service(now)
        self.last_restart = now

    def expected_end(self, default_runtime_s: float | None) -> float:
        limit = self.spec.limit_s if self.spec.limit_s is not None else default_runtime_s
        if self.started is None or limit is None:
            return math.inf
        return self.started + limit


@dataclass(frozen=True)
class Said:
    """Facts a waiting job's note states that later events change: the free GPU count, and
    the job whose reservation it waits behind (views.CoreView says them as they are when read)."""

    free: int | None = None
    behind: str | None = None
    reserved: bool = False  # it describes the job's own reservation (its holders change)


@dataclass
class QueueRecord:
    """A team's queue: its guaranteed GPUs and the GPUs its jobs hold now."""

    name: str
    guaranteed: int = 0
    used: int = 0
    # Thousandths of GPUs its jobs hold as shares of GPUs (whole GPUs are in `used`).
    used_milli: int = 0
    version: int = 0  # bumped whenever `used` changes (ranks of its jobs are kept until then)

    def within_guarantee(self, extra: int) -> bool:
        if self.used_milli:
            return (self.used + extra) * 1000 + self.used_milli <= self.guaranteed * 1000
        return self.used + extra <= self.guaranteed

    def share(self, used: int | None = None) -> float:
        """Usage (now, or `used`) against guarantee: the queue furthest below its share goes
        first."""
        used = self.used if used is None else used
        if self.guaranteed == 0:
            return math.inf if used or self.used_milli else 0.0
        if self.used_milli:
            return (used * 1000 + self.used_milli) / (self.guaranteed * 1000)
        return used / self.guaranteed


@dataclass
class Reservation:
    """GPUs kept for the first blocked job; `until` is when they are expected to be free, and
    `awaiting` the jobs being stopped to free them."""

    job: str
    gpus: dict[int, int]
    until: float
    awaiting: set[str] = field(default_factory=set)
    _text: str = field(default="", repr=False, compare=False)

    def holds_free(self, capacity: Capacity) -> bool:
        """Whether any reserved GPU is free now (else keeping it from others changes nothing)."""
        return any(capacity.free[i] & mask for i, mask in self.gpus.items())

    def describe(self, capacity: Capacity, holders: Mapping[str, float]) -> str:
        """The GPUs kept, the jobs holding them now (`holders`: each with its expected end,
        inf where it declares no time limit), and when the job is expected to start."""
        if not self._text:  # the GPUs never change once reserved
            self._text = self._gpus(capacity)
        text = f"reserved {self._text}"
        if holders:
            text += f", held by {', '.join(sorted(holders))}"
        if not math.isinf(self.until):
            return f"{text}; expected to start by t={self.until:g}"
        unknown = sorted(job for job, end in holders.items() if math.isinf(end))
        why = ""
        if unknown:
            has = "has no time limit" if len(unknown) == 1 else "have no time limits"
            why = f": {', '.join(unknown)} {has}"
        return f"{text}; start time unknown{why}"

    def _gpus(self, capacity: Capacity) -> str:
        parts = []
        for i, mask in sorted(self.gpus.items()):
            gpus = ",".join(str(g) for g in range(capacity.nodes[i].size) if mask >> g & 1)
            parts.append(f"{capacity.nodes[i].name} GPUs {gpus}")
        return "; ".join(parts)
