"""Time limits enforced by the core: a run that reaches its limit_s is stopped with its
checkpoint signal and grace, then ends timed-out; events in, the exact actions out."""

from __future__ import annotations

import pytest

from tests.builders import PCIE8, job, project, scheduler, submit
from toposched.core import (
    Checkpoint,
    JobCancelled,
    JobFinished,
    JobRestored,
    JobState,
    JobStopped,
    RestartPolicy,
    SchedulingError,
    StopJob,
    StopKind,
    Tick,
)
from toposched.placement.gang import Placement, WorkerSlot
from toposched.topology.cluster import Tier

CKPT = Checkpoint("SIGUSR1", 20.0)


def test_a_run_that_reaches_its_limit_gets_its_signal_then_ends_timed_out() -> None:
    s = scheduler(PCIE8)
    s.handle(*submit(job("short", 8, checkpoint=CKPT, limit_s=60.0), job("next", 8), t=10))
    assert s.handle(Tick(69.9)) == []
    assert s.next_due() == 70.0
    stops = s.handle(Tick(70.0))
    assert project(stops) == [
        ("stop", "short", StopKind.TIME_LIMIT),
        ("transition", "short", JobState.RUNNING, JobState.STOPPING),
    ]
    (stop,) = [a for a in stops if isinstance(a, StopJob)]
    # Its own signal, and its grace (at least the server's stop grace, 10 s by default).
    assert (stop.signal, stop.grace_s) == ("SIGUSR1", 20.0)
    why = "reached its time limit of 00:01:00 (ran 00:01:00)"
    assert stop.reason == f"stopping (time-limit): {why}"
    after = s.handle(JobStopped(75, "short"))
    assert project(after) == [
        ("transition", "short", JobState.STOPPING, JobState.TIMED_OUT),
        ("start", "next", {"n0": (0, 1, 2, 3, 4, 5, 6, 7)}),
        ("transition", "next", JobState.PENDING, JobState.RUNNING),
    ]
    assert s.job("short").reason == f"timed-out: {why}"
    assert JobState.TIMED_OUT.terminal


def test_any_event_past_the_limit_stops_the_job_not_only_a_tick() -> None:
    s = scheduler(PCIE8)
    s.handle(*submit(job("a", 4, limit_s=30.0), t=0))
    out = s.handle(*submit(job("b", 2), t=45))
    assert project(out)[:3] == [
        ("transition", "b", None, JobState.PENDING),
        ("stop", "a", StopKind.TIME_LIMIT),
        ("transition", "a", JobState.RUNNING, JobState.STOPPING),
    ]
    assert "ran 00:00:45" in s.job("a").reason


def test_a_clean_exit_on_the_signal_is_still_timed_out() -> None:
    s = scheduler(PCIE8)
    s.handle(*submit(job("a", 1, checkpoint=CKPT, limit_s=10.0)))
    s.handle(Tick(10))
    out = s.handle(JobFinished(11, "a", True))
    assert project(out) == [("transition", "a", JobState.STOPPING, JobState.TIMED_OUT)]


def test_a_job_that_ends_before_its_limit_is_not_stopped_later() -> None:
    s = scheduler(PCIE8)
    s.handle(*submit(job("a", 1, limit_s=10.0)))
    s.handle(JobFinished(5, "a", True))
    assert s.next_due() is None
    assert s.handle(Tick(20)) == []
    assert s.job("a").state is JobState.SUCCEEDED


def test_a_cancel_during_the_limits_stop_ends_cancelled() -> None:
    s = scheduler(PCIE8)
    s.handle(*submit(job("a", 1, limit_s=10.0)))
    s.handle(Tick(10))
    s.handle(JobCancelled(11, "a"))
    out = s.handle(JobStopped(12, "a"))
    assert project(out) == [("transition", "a", JobState.STOPPING, JobState.CANCELLED)]


def test_each_run_of_a_requeued_job_is_timed_from_its_own_start() -> None:
    s = scheduler(PCIE8)
    s.handle(*submit(job("b", 8, limit_s=100.0, restart=RestartPolicy.ON_FAILURE)))
    s.handle(JobFinished(50, "b", False))  # requeued, and started again at 50
    assert s.job("b").state is JobState.RUNNING
    assert s.handle(Tick(120)) == []  # the first run's deadline (100) no longer counts
    assert s.next_due() == 150.0
    assert project(s.handle(Tick(150)))[0] == ("stop", "b", StopKind.TIME_LIMIT)


def test_a_restored_job_keeps_the_start_of_its_run() -> None:
    s = scheduler(PCIE8)
    placed = Placement((WorkerSlot("n0", (0, 1)),), None, Tier.NODE)
    spec = job("a", 2, limit_s=60.0)
    s.handle(JobRestored(100, spec, 0.0, placed, started=70.0))
    assert s.next_due() == 130.0
    # Already past it: the next event stops it.
    s2 = scheduler(PCIE8)
    out = s2.handle(JobRestored(100, spec, 0.0, placed, started=20.0))
    assert project(out)[0] == ("stop", "a", StopKind.TIME_LIMIT)


def test_a_restored_start_after_the_event_is_refused_changing_nothing() -> None:
    s = scheduler(PCIE8)
    placed = Placement((WorkerSlot("n0", (0,)),), None, Tier.NODE)
    with pytest.raises(SchedulingError, match="started must be a time no later than now"):
        s.handle(JobRestored(10, job("a", 1, limit_s=5.0), 0.0, placed, started=11.0))
    assert "a" not in s.books.jobs


def test_a_restored_stop_for_the_limit_ends_timed_out() -> None:
    s = scheduler(PCIE8)
    placed = Placement((WorkerSlot("n0", (0,)),), None, Tier.NODE)
    s.handle(JobRestored(10, job("a", 1, limit_s=5.0), 0.0, placed, stopping=StopKind.TIME_LIMIT))
    out = s.handle(JobStopped(11, "a"))
    assert project(out) == [("transition", "a", JobState.STOPPING, JobState.TIMED_OUT)]
