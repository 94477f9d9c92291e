"""Jobs that run after others (`JobSpec.after`): which waiting job waits for which job.

A job with dependencies not yet met is pending but filed in no waiting list, so no cycle ever
tries it. Nothing is scanned: when a job ends, only the jobs waiting for it are looked at
(`Changes.end`), and those it lets run are filed then.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from toposched.core.errors import SchedulingError
from toposched.core.job import After, JobSpec, JobState


class Dependencies:
    """The waiting jobs' unmet dependencies, and each job's waiters (both in submission
    order, so that every answer is deterministic)."""

    def __init__(self) -> None:
        self.unmet: dict[str, list[After]] = {}  # waiting job -> what it still waits for
        self.waiters: dict[str, dict[str, None]] = {}  # job -> the jobs waiting for it

    def blocked(self, name: str) -> bool:
        """`name` waits for a job it runs after: no cycle may try it."""
        return name in self.unmet

    def waits(self, name: str) -> str:
        """`waits for prep to succeed, data to end`: why a blocked job waits."""
        return "waits for " + ", ".join(dep.waits() for dep in self.unmet[name])

    def hold(self, name: str, unmet: list[After]) -> None:
        self.unmet[name] = list(unmet)
        for dep in unmet:
            self.waiters.setdefault(dep.job, {})[name] = None

    def ended(self, job: str) -> list[tuple[str, After]]:
        """The jobs that waited for `job`, which has just ended, with what each asked of it;
        they no longer wait for it (`release` or `drop` each)."""
        out = []
        for name in self.waiters.pop(job, {}):
            unmet = self.unmet[name]
            dep = next(d for d in unmet if d.job == job)
            unmet.remove(dep)
            out.append((name, dep))
        return out

    def release(self, name: str) -> bool:
        """Whether `name` waits for nothing more (it is forgotten here if so)."""
        if self.unmet[name]:
            return False
        del self.unmet[name]
        return True

    def drop(self, name: str) -> None:
        """`name` ended while it waited: it waits for nothing any more."""
        for dep in self.unmet.pop(name, []):
            waiting = self.waiters[dep.job]
            del waiting[name]
            if not waiting:
                del self.waiters[dep.job]


def resolve(
    spec: JobSpec,
    state_of: Callable[[str], JobState | None],
    ended: Mapping[str, JobState],
    unknown_met: bool,
) -> tuple[list[After], tuple[After, JobState] | None]:
    """What `spec` still waits for, and the first dependency already ended otherwise than it
    asks (None if none). `state_of` gives a job the core holds; `ended`, the end state of one
    it may no longer hold (its driver's word). A job neither knows is refused
    (SchedulingError), unless `unknown_met`: a driver restoring a job whose dependency it has
    deleted since it ended, when the job was let go already."""
    waiting: list[After] = []
    failed: tuple[After, JobState] | None = None
    for dep in spec.after:
        state = state_of(dep.job)
        if state is None:
            state = ended.get(dep.job)
            if state is not None and not state.terminal:
                raise SchedulingError(
                    f"job {spec.name!r}: {dep.job!r} is given as ended, but as {state.value}"
                )
        if state is None:
            if unknown_met:
                continue
            raise SchedulingError(f"job {spec.name!r}: after: no job named {dep.job!r}")
        if not state.terminal:
            waiting.append(dep)
        elif not dep.met_by(state) and failed is None:
            failed = (dep, state)
    return waiting, failed


def failed_why(dep: After, state: JobState) -> str:
    """The reason of a job ended `dependency-failed`: which job ended how."""
    return f"dependency {dep.job} ended {state.value}; it had to succeed"
