"""Figures of merit of one simulated run: JCT, queueing, utilisation, placement quality."""

from __future__ import annotations

import math
from collections.abc import Sequence

from toposched.core import JobState
from toposched.sim.engine import SimJob, SimResult


def percentile(ordered: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of sorted values (q in 0..100); 0 for no values."""
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def quality(job: SimJob) -> float | None:
    """Mean speed over the job's running time relative to its ideal placement."""
    return job.speed_s / job.run_s if job.run_s > 0 else None


def summarise(result: SimResult) -> dict[str, float | int | bool]:
    """The keys `toposched sim --json` promises, plus a few more."""
    jobs = result.jobs
    done = [j for j in jobs if j.finish is not None]
    jct = sorted(j.finish - j.trace.submit_s for j in done if j.finish is not None)
    # A job ended because one it ran after failed never ran: neither done nor waiting.
    never = [j for j in jobs if j.state is JobState.DEPENDENCY_FAILED]
    waits = [
        (j.first_start if j.first_start is not None else result.end) - j.trace.submit_s
        for j in jobs
        if j.state is not JobState.DEPENDENCY_FAILED
    ]
    started = [j.first_start - j.trace.submit_s for j in jobs if j.first_start is not None]
    first = min((j.trace.submit_s for j in jobs), default=0.0)
    last = max((j.finish for j in done if j.finish is not None), default=first)
    makespan = last - first
    capacity = result.cluster.gpus * makespan
    allocated = sum(j.gpu_s for j in jobs)
    effective = sum(j.gpu_speed_s for j in jobs)
    qualities = [q for j in jobs if (q := quality(j)) is not None]
    alone = [j.alone_s / j.run_s for j in jobs if j.run_s > 0]
    return {
        "jobs": len(jobs),
        "finished": len(done),
        "unfinished": len(jobs) - len(done),
        "dependency_failed": len(never),
        "avg_jct_s": sum(jct) / len(jct) if jct else 0.0,
        "p50_jct_s": percentile(jct, 50),
        "p95_jct_s": percentile(jct, 95),
        "p99_jct_s": percentile(jct, 99),
        "avg_queue_s": sum(started) / len(started) if started else 0.0,
        "max_wait_s": max(waits, default=0.0),
        "makespan_s": makespan,
        "gpu_alloc_util": allocated / capacity if capacity else 0.0,
        "effective_util": effective / capacity if capacity else 0.0,
        "placement_quality_mean": sum(qualities) / len(qualities) if qualities else 0.0,
        # The same without the slowdown from neighbours: what the GPU choice alone cost.
        "placement_quality_alone_mean": sum(alone) / len(alone) if alone else 0.0,
        "preemptions": sum(j.preemptions for j in jobs),
        "preemptions_per_job": sum(j.preemptions for j in jobs) / len(jobs) if jobs else 0.0,
        "preemptions_per_job_p99": percentile(sorted(j.preemptions for j in jobs), 99),
        "stopped_share": sum(1 for j in jobs if j.stops) / len(jobs) if jobs else 0.0,
        "lost_gpu_hours": sum(j.lost_gpu_s for j in jobs) / 3600,
        "migrations": sum(j.migrations for j in jobs),
        "partial_hold_gpu_hours": sum(j.partial_gpu_s for j in jobs) / 3600,
        "deadlocked": result.deadlocked,
        "fragmentation_mean": (
            sum(s.fragmentation for s in result.samples) / len(result.samples)
            if result.samples
            else 0.0
        ),
        "wall_s": result.wall_s,
    }


# Figures a deadlocked run cannot be compared on: they count only the jobs that finished or
# started before the deadlock (and the span up to its last finish), not the jobs stuck for good.
DEADLOCK_BLIND = (
    "avg_jct_s",
    "p50_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "makespan_s",
    "gpu_alloc_util",
    "effective_util",
)


def comparable(summary: dict[str, float | int | bool]) -> dict[str, float | int | bool | None]:
    """`summary` as reports show it: a deadlocked run's DEADLOCK_BLIND figures are None."""
    if not summary["deadlocked"]:
        return dict(summary)
    return {k: None if k in DEADLOCK_BLIND else v for k, v in summary.items()}


def team_shares(result: SimResult) -> dict[str, dict[str, float]]:
    """Each queue's share of the GPU-time that jobs held while running, and the share of the
    cluster's GPUs it is guaranteed."""
    guarantees = result.guarantees
    per: dict[str, float] = dict.fromkeys(guarantees, 0.0)
    for job in result.jobs:
        per[job.trace.queue] = per.get(job.trace.queue, 0.0) + job.gpu_s
    total = sum(per.values())
    gpus = result.cluster.gpus
    return {
        q: {"share": v / total if total else 0.0, "guaranteed": guarantees.get(q, 0) / gpus}
        for q, v in sorted(per.items())
    }
