"""Jobs that run after others (`JobSpec.after`): events in, the exact actions out.

A job waits, filed in no waiting list, until the jobs it runs after have ended as asked; under
`ok`, one that ends otherwise ends it `dependency-failed`, and its own waiters after it.
"""

from __future__ import annotations

import pytest

from tests.builders import DGX1, job, project, queued, scheduler, snapshot, started, submit
from toposched.core import (
    After,
    JobCancelled,
    JobError,
    JobFinished,
    JobRestored,
    JobState,
    JobSubmitted,
    RestartPolicy,
    SchedulingError,
    Until,
)

GIB = 1 << 30
ALL8 = tuple(range(8))


def prep(**fields: object) -> object:
    """The pipeline's first stage: CPUs and memory, no GPU."""
    return job("prep", gpus=0, cpus=2000, memory=4 * GIB, **fields)


def after(*texts: str) -> tuple[After, ...]:
    return tuple(After.parse(text) for text in texts)


def test_a_pipeline_runs_in_order() -> None:
    s = scheduler(DGX1)
    assert project(s.handle(*submit(prep()))) == [
        queued("prep"),
        ("start", "prep", {"n0": ()}),
        ("transition", "prep", "pending", "running"),
    ]
    # Waiting for prep: pending, and no cycle tries it (no start though every GPU is free).
    assert project(s.handle(*submit(job("train", 8, after=after("prep"))))) == [queued("train")]
    assert project(s.handle(*submit(job("eval", 1, after=after("train:ok"))))) == [queued("eval")]
    assert s.job("train").reason == "waits for prep to succeed"
    assert s.job("eval").reason == "waits for train to succeed"
    assert s.job("train").history[-1][1] == "submitted; waits for prep to succeed"

    assert project(s.handle(JobFinished(10.0, "prep", True))) == [
        ("transition", "prep", "running", "succeeded"),
        *started("train", {"n0": ALL8}),
    ]
    assert s.job("eval").reason == "waits for train to succeed"
    assert project(s.handle(JobFinished(20.0, "train", True))) == [
        ("transition", "train", "running", "succeeded"),
        *started("eval", {"n0": (0,)}),
    ]
    assert (s.books.deps.unmet, s.books.deps.waiters) == ({}, {})


def test_a_failed_first_stage_ends_the_others_dependency_failed() -> None:
    s = scheduler(DGX1)
    s.handle(
        *submit(prep(), job("train", 4, after=after("prep")), job("eval", 1, after=after("train")))
    )
    actions = s.handle(JobFinished(5.0, "prep", False, "exit 1"))
    assert project(actions) == [
        ("transition", "prep", "running", "failed"),
        ("transition", "train", "pending", "dependency-failed"),
        ("transition", "eval", "pending", "dependency-failed"),
    ]
    assert [a.reason for a in actions[1:]] == [
        "dependency prep ended failed; it had to succeed",
        "dependency train ended dependency-failed; it had to succeed",
    ]
    assert s.job("train").state is JobState.DEPENDENCY_FAILED
    assert s.job("eval").reason == "dependency train ended dependency-failed; it had to succeed"
    assert (s.books.deps.unmet, s.books.deps.waiters) == ({}, {})


def test_any_runs_after_a_failure_and_ok_does_not() -> None:
    s = scheduler(DGX1)
    s.handle(
        *submit(
            prep(),
            job("report", 1, after=after("prep:any")),
            job("train", 1, after=after("prep:ok")),
        )
    )
    assert s.job("report").reason == "waits for prep to end"
    assert project(s.handle(JobFinished(5.0, "prep", False))) == [
        ("transition", "prep", "running", "failed"),
        ("transition", "train", "pending", "dependency-failed"),
        *started("report", {"n0": (0,)}),  # in the cycle after the event, as every start
    ]


def test_several_dependencies_are_waited_for_each() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("a", 8), job("b", gpus=0, cpus=1000)))
    s.handle(*submit(job("c", 1, after=after("a", "b:any"))))
    assert s.job("c").reason == "waits for a to succeed, b to end"
    assert project(s.handle(JobCancelled(1.0, "b"))) == [
        ("stop", "b", "cancel"),
        ("transition", "b", "running", "stopping"),
    ]
    assert project(s.handle(JobFinished(2.0, "b", False))) == [
        ("transition", "b", "stopping", "cancelled")
    ]
    assert s.job("c").reason == "waits for a to succeed"
    assert project(s.handle(JobFinished(3.0, "a", True))) == [
        ("transition", "a", "running", "succeeded"),
        *started("c", {"n0": (0,)}),
    ]


def test_cancelling_a_waiting_job_ends_its_own_waiters() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("a", 8), job("b", 1, after=after("a")), job("c", 1, after=after("b"))))
    assert project(s.handle(JobCancelled(1.0, "b"))) == [
        ("transition", "b", "pending", "cancelled"),
        ("transition", "c", "pending", "dependency-failed"),
    ]
    # a no longer has a waiter; its end starts nothing.
    assert project(s.handle(JobFinished(2.0, "a", True))) == [
        ("transition", "a", "running", "succeeded")
    ]
    assert (s.books.deps.unmet, s.books.deps.waiters) == ({}, {})


def test_a_dependency_that_restarts_is_waited_for_until_it_ends() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("a", 8, restart=RestartPolicy.ON_FAILURE, max_restarts=1)))
    s.handle(*submit(job("b", 1, after=after("a"))))
    assert project(s.handle(JobFinished(1.0, "a", False))) == [
        ("transition", "a", "running", "pending"),
        *started("a", {"n0": ALL8}),
    ]
    assert s.job("b").reason == "waits for a to succeed"
    assert project(s.handle(JobFinished(2.0, "a", True))) == [
        ("transition", "a", "running", "succeeded"),
        *started("b", {"n0": (0,)}),
    ]


def test_submitted_after_its_dependency_ended() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("ok", 1), job("bad", 1)))
    s.handle(JobFinished(1.0, "ok", True), JobFinished(1.0, "bad", False))
    assert project(s.handle(*submit(job("next", 1, after=after("ok")), t=2.0))) == [
        queued("next"),
        *started("next", {"n0": (0,)}),
    ]
    actions = s.handle(*submit(job("never", 1, after=after("ok", "bad")), t=3.0))
    assert project(actions) == [
        queued("never"),
        ("transition", "never", "pending", "dependency-failed"),
    ]
    assert actions[-1].reason == "dependency bad ended failed; it had to succeed"


def test_unknown_dependency_is_refused_and_changes_nothing() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("a", 8)))
    before = snapshot(s)
    with pytest.raises(SchedulingError, match="after: no job named 'ghost'"):
        s.handle(*submit(job("b", 1, after=after("a", "ghost"))))
    assert snapshot(s) == before
    assert not s.view.knows("b")


def test_a_cycle_and_bad_names_are_refused_in_the_spec() -> None:
    with pytest.raises(JobError, match="cannot wait for itself"):
        job("loop", 1, after=after("loop"))
    with pytest.raises(JobError, match="'a' is named twice"):
        job("b", 1, after=after("a", "a:any"))
    with pytest.raises(JobError, match="expected NAME, NAME:ok or NAME:any"):
        After.parse("a:maybe")
    assert After.parse("a") == After("a", Until.OK)
    assert str(After.parse("a:any")) == "a:any"


def test_the_drivers_word_on_jobs_the_core_no_longer_holds() -> None:
    s = scheduler(DGX1, keep_finished=0)  # ended jobs are forgotten at once
    s.handle(*submit(job("a", 1)))
    s.handle(JobFinished(1.0, "a", True))
    assert not s.view.knows("a")
    with pytest.raises(SchedulingError, match="no job named 'a'"):
        s.handle(*submit(job("b", 1, after=after("a"))))
    with pytest.raises(SchedulingError, match="given as ended, but as running"):
        s.handle(JobSubmitted(2.0, job("b", 1, after=after("a")), (("a", JobState.RUNNING),)))
    ended = (("a", JobState.SUCCEEDED),)
    assert project(s.handle(JobSubmitted(2.0, job("b", 1, after=after("a")), ended))) == [
        queued("b"),
        *started("b", {"n0": (0,)}),
    ]


def test_restored_waiting_jobs_wait_again() -> None:
    s = scheduler(DGX1)
    s.handle(JobRestored(0.0, job("a", 8), 0.0))
    assert project(s.handle(JobRestored(0.0, job("b", 1, after=after("a", "gone")), 0.0))) == []
    # `gone` was deleted after it ended (b was let go of it then): taken as met.
    assert s.job("b").reason == "waits for a to succeed"
    failed = (("x", JobState.CANCELLED),)
    assert project(
        s.handle(JobRestored(0.0, job("c", 1, after=after("x")), 0.0, ended=failed))
    ) == [("transition", "c", "pending", "dependency-failed")]
    assert project(s.handle(JobFinished(1.0, "a", False))) == [
        ("transition", "a", "running", "failed"),
        ("transition", "b", "pending", "dependency-failed"),
    ]


def test_a_released_job_waits_its_turn_and_says_why() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("a", 1), job("big", 8)))
    s.handle(*submit(job("b", 8, after=after("a"))))
    assert project(s.handle(JobFinished(1.0, "a", True))) == [
        ("transition", "a", "running", "succeeded"),
        *started("big", {"n0": ALL8}),
    ]
    assert s.job("b").state is JobState.PENDING
    assert "waits for" not in s.job("b").reason
    assert s.books.deps.unmet == {}
    assert "after: a:ok (succeeded)" in s.explain("b")
