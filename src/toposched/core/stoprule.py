"""When stopping a running job for another pays: patience, protection after stops, the cost test.

A stop costs the victim the work since its last checkpoint and a restart (core/stopcost.py).
Three rules keep least attained service from spending more on stops than it saves:

- Protection: after its k-th stop (preempted, moved or shrunk) a job runs at least
  `k * protect_s` before least attained service or a migration may stop it again, and after
  `max_stops` stops never (a queue's guarantee and a higher priority still may: those are
  promises, not estimates). Growing linearly, not doubling: on a busy cluster a doubling
  protection soon keeps the longest jobs on their GPUs for days while short jobs queue.
- Patience: least attained service stops a job for a waiting one only once that one has
  waited `patience_s`. Where jobs end often, as in a busy shared cluster, a job at the head of
  the queue gets GPUs that free up within minutes, and a stop would save it only those minutes
  at the cost of the victim's lost work and restart; a job that found none in that time (a
  large gang, a full cluster) is the one a stop serves.
- Cost: a demoted job is stopped for a job that has not been demoted only when the run time it
  is expected to have left exceeds the other's by more than the stop costs it. Under a heavy
  tail the run time left grows with the run time had (the mean residual life of a Pareto
  distribution with shape 2 equals the age), so each is estimated by its run time so far, a
  young job's by at least `young_s`, and a job with a time limit by at most what it leaves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from toposched.core.policy import SchedulerPolicy
from toposched.core.records import JobRecord
from toposched.core.stopcost import lost_s


@dataclass(frozen=True)
class StopRule:
    """The policy's numbers (core/policy.py documents each)."""

    protect_s: float
    max_stops: int | None
    restore_s: float
    checkpoint_interval_s: float
    young_s: float
    pay_margin: float | None
    patience_s: float = 0.0

    @classmethod
    def of(cls, policy: SchedulerPolicy) -> StopRule:
        return cls(
            policy.stop_protect_s,
            policy.max_stops,
            policy.restore_s,
            policy.checkpoint_interval_s,
            policy.young_job_s,
            policy.pay_margin,
            policy.preempt_patience_s,
        )

    def patient_until(self, rec: JobRecord) -> float:
        """From when the waiting `rec` may have a job stopped for it by least attained
        service."""
        return rec.waiting_since + self.patience_s

    def protected(self, rec: JobRecord, now: float) -> bool:
        """Whether `rec`, running since its last start, may not be stopped at `now`."""
        return self.protected_until(rec, rec.last_restart) > now

    def protected_until(self, rec: JobRecord, now: float) -> float:
        """Until when least attained service may not stop `rec`, which (re)starts at `now`
        (inf: never again)."""
        k = rec.stops
        if k == 0:
            return now
        if self.max_stops is not None and k >= self.max_stops:
            return math.inf
        return now + self.protect_s * k

    def cost_s(self, rec: JobRecord, now: float) -> float:
        """What stopping the running `rec` now costs it: the work since its last checkpoint
        (it restored one when it last started) and the restart."""
        return lost_s(now - rec.last_restart, self.interval_s(rec)) + self.restore_s

    def expected_left_s(self, rec: JobRecord, now: float) -> float:
        """The run time `rec` is expected to have left: the run time it has had (its GPU
        service over its GPUs), at least `young_s`, and at most what its time limit leaves it
        where its user gave one (`limit_s`: the run ends there whatever the tail says)."""
        spec = rec.spec
        gpus = (
            rec.placement.gpus
            if rec.placement is not None
            else spec.min_workers * spec.gpus_per_worker
        )
        had = rec.service(now) / gpus if gpus else 0.0
        left = max(had, self.young_s)
        if spec.limit_s is not None:
            left = min(left, max(0.0, spec.limit_s - had))
        return left

    def interval_s(self, rec: JobRecord) -> float:
        """Seconds of work between `rec`'s checkpoints: its own, else the policy's."""
        said = rec.spec.checkpoint
        return said.interval_s if said and said.interval_s else self.checkpoint_interval_s

    def next_checkpoint(self, rec: JobRecord, now: float) -> float:
        """When the running `rec` next checkpoints: a stop that did not pay may pay from then
        (within one interval the gain and the loss grow alike, so with a margin of at most 1
        the answer changes only there; with a larger one it can only turn to no)."""
        interval = self.interval_s(rec)
        return rec.last_restart + interval * (math.floor((now - rec.last_restart) / interval) + 1)

    def pays(self, victim: JobRecord, beneficiary: JobRecord, now: float) -> bool:
        """Whether stopping `victim` so that `beneficiary` starts now is expected to save more
        completion time than it costs."""
        if self.pay_margin is None:
            return True
        gain = self.expected_left_s(victim, now) - self.expected_left_s(beneficiary, now)
        return gain > self.pay_margin * self.cost_s(victim, now)
