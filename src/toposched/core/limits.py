"""Time limits: when each running job's run reaches its `limit_s` (fed starts, no clock)."""

from __future__ import annotations

import heapq
import itertools

from toposched.core.job import JobState
from toposched.core.records import JobRecord


class TimeLimits:
    """The deadlines of running jobs that have a limit, earliest first.

    A run is timed from its start (`JobRecord.started`): a move or resize goes on with the
    same run, a requeue begins a new one, as Slurm times each run of a requeued job. Entries
    are never removed when a job stops early; one whose job is no longer that run is dropped
    when it comes due (cheaper than finding it in the heap at every stop)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, JobRecord, float]] = []
        self._order = itertools.count()  # ties in time never compare records

    def started(self, rec: JobRecord) -> None:
        """`rec` runs (started, resumed after a move, or restored running)."""
        limit, started = rec.spec.limit_s, rec.started
        if limit is None or started is None:
            return
        heapq.heappush(self._heap, (started + limit, next(self._order), rec, started))

    def due(self, now: float) -> list[JobRecord]:
        """The jobs whose run has reached its limit by `now`, each once, in deadline order.
        A job moving then (stopping to resume elsewhere) is not among them: its resume
        enters its run again (`started`), and it comes due at the next event."""
        out: dict[str, JobRecord] = {}  # by name: a run entered twice (a move) is due once
        heap = self._heap
        while heap and heap[0][0] <= now:
            _, _, rec, started = heapq.heappop(heap)
            if rec.state is JobState.RUNNING and rec.started == started:
                out.setdefault(rec.name, rec)
        return list(out.values())

    def next_at(self) -> float | None:
        """The earliest deadline of a run that may still be going, or None (after `due`, all
        are later than now)."""
        heap = self._heap
        while heap and not _going(heap[0][2], heap[0][3]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None


def _going(rec: JobRecord, started: float) -> bool:
    """Whether `rec` may still be in the run that began at `started`."""
    return rec.state in (JobState.RUNNING, JobState.STOPPING) and rec.started == started
