"""When a job's GPUs have sat idle for its rule's time: fed samples with their times, no clock."""

from __future__ import annotations

from dataclasses import dataclass

from toposched.core.job import IdleRule


@dataclass
class _Spell:
    since: float  # the first sample of the current run of idle samples
    said: bool = False  # the rule fired for this run already


class IdleWatch:
    """Per job, the run of samples in which every GPU it holds was below its rule's threshold.

    `observe` answers True once per idle run: at the first sample `after_s` or more after the
    run's first sample. A sample at or above the threshold ends the run. A driver forgets a job
    when it stops or starts again, so each attempt is judged on its own samples."""

    def __init__(self) -> None:
        self._spells: dict[str, _Spell] = {}

    def observe(self, job: str, rule: IdleRule, time: float, busiest_pct: float) -> bool:
        """Take one sample of `job`: `busiest_pct`, the busiest of its GPUs at `time`."""
        if busiest_pct >= rule.below_pct:
            self._spells.pop(job, None)
            return False
        spell = self._spells.setdefault(job, _Spell(time))
        if spell.said or time - spell.since < rule.after_s:
            return False
        spell.said = True
        return True

    def idle_since(self, job: str) -> float | None:
        """Since when `job` has been idle (its current run of idle samples), or None."""
        spell = self._spells.get(job)
        return None if spell is None else spell.since

    def forget(self, job: str) -> None:
        self._spells.pop(job, None)

    def jobs(self) -> set[str]:
        return set(self._spells)
