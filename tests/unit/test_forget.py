"""The core forgets an ended job its driver deleted, so that a new job may take its name."""

from __future__ import annotations

import pytest

from tests.builders import DGX1, scheduler
from toposched.core import JobCancelled, JobFinished, JobSpec, JobSubmitted, Scheduler
from toposched.core.errors import SchedulingError


def core(keep: int = 10_000) -> Scheduler:
    return scheduler(DGX1, keep_finished=keep)


def test_an_ended_job_is_forgotten_and_its_name_taken_again() -> None:
    s = core()
    s.handle(JobSubmitted(0, JobSpec("a")))
    s.handle(JobFinished(1, "a", True))
    with pytest.raises(SchedulingError, match="already exists"):
        s.handle(JobSubmitted(2, JobSpec("a")))
    s.forget("a")
    s.handle(JobSubmitted(3, JobSpec("a", gpus_per_worker=2)))
    assert s.job("a").state.value == "running"
    s.check()


def test_a_live_job_is_not_forgotten() -> None:
    s = core()
    s.handle(JobSubmitted(0, JobSpec("a")))
    with pytest.raises(SchedulingError, match="only an ended job"):
        s.forget("a")
    assert s.job("a").state.value == "running"
    s.forget("never-held")  # nothing to do


def test_a_forgotten_name_leaves_the_retirement_line() -> None:
    # With room for one ended job, the old `a`'s turn in the line must not drop the new `a`.
    s = core(keep=1)
    s.handle(JobSubmitted(0, JobSpec("a")))
    s.handle(JobFinished(1, "a", False))
    s.forget("a")
    s.handle(JobSubmitted(2, JobSpec("a")))
    s.handle(JobSubmitted(3, JobSpec("b", gpus_per_worker=8)))
    s.handle(JobCancelled(4, "b"))  # still waiting: ends at once
    assert s.job("a").state.value == "running"
