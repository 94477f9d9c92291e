"""Idle GPUs given back: the core's answer to JobIdle (the exact actions) and IdleWatch checked
against a brute-force reading of its rule on random sample runs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.builders import PCIE8, job, project, scheduler, submit
from toposched.core import (
    Checkpoint,
    IdleAction,
    IdleRule,
    JobError,
    JobIdle,
    JobState,
    JobStopped,
    StopJob,
    StopKind,
)
from toposched.core.idle import IdleWatch

CKPT = Checkpoint("SIGUSR1", 5.0)
WHY = "its GPUs were below 5% for 10 s (busiest 0%)"


def test_an_idle_job_that_cannot_checkpoint_ends_idle_stopped_and_frees_its_gpus() -> None:
    s = scheduler(PCIE8)
    s.handle(*submit(job("nap", 8), job("next", 4, workers=2)))
    stops = s.handle(JobIdle(10, "nap", WHY))
    assert project(stops) == [
        ("stop", "nap", StopKind.IDLE),
        ("transition", "nap", JobState.RUNNING, JobState.STOPPING),
    ]
    (stop,) = [a for a in stops if isinstance(a, StopJob)]
    assert (stop.signal, stop.reason) == ("SIGTERM", f"stopping (idle): {WHY}")
    after = s.handle(JobStopped(12, "nap"))
    assert project(after) == [
        ("transition", "nap", JobState.STOPPING, JobState.IDLE_STOPPED),
        ("start", "next", {"n0": (0, 1, 2, 3, 4, 5, 6, 7)}),
        ("transition", "next", JobState.PENDING, JobState.RUNNING),
    ]
    assert s.job("nap").reason == f"idle-stopped: {WHY}"
    assert s.job("nap").state.terminal


def test_an_idle_checkpointable_job_is_stopped_with_its_signal_and_waits_again() -> None:
    s = scheduler(PCIE8)
    s.handle(*submit(job("nap", 8, checkpoint=CKPT)))
    (stop,) = [a for a in s.handle(JobIdle(10, "nap", WHY)) if isinstance(a, StopJob)]
    assert (stop.kind, stop.signal, stop.grace_s) == (StopKind.IDLE, "SIGUSR1", 5.0)
    again = s.handle(JobStopped(12, "nap"))
    # Requeued, and with the cluster empty it starts again at once: its own work resumes.
    assert project(again)[0] == ("transition", "nap", JobState.STOPPING, JobState.PENDING)
    assert ("transition", "nap", JobState.PENDING, JobState.RUNNING) in project(again)


def test_idle_news_about_a_job_no_longer_running_changes_nothing() -> None:
    s = scheduler(PCIE8)
    s.handle(*submit(job("nap", 8)))
    s.handle(JobIdle(10, "nap", WHY))
    assert s.handle(JobIdle(11, "nap", WHY)) == []  # stopping already
    assert s.job("nap").state is JobState.STOPPING


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"after_s": 0}, "after must be a positive time"),
        ({"after_s": float("inf")}, "after must be a positive time"),
        ({"after_s": 60, "below_pct": 0}, "below must be a percentage"),
        ({"after_s": 60, "below_pct": 101}, "below must be a percentage"),
    ],
)
def test_a_bad_idle_rule_is_refused(fields: dict[str, float], said: str) -> None:
    with pytest.raises(JobError, match=said):
        IdleRule(**fields)


def brute_force_fires(rule: IdleRule, samples: list[tuple[float, float]]) -> list[int]:
    """The indices of the samples at which the rule fires, straight from its definition: at
    sample k, the run of below-threshold samples ending at k began at j, has lasted after_s,
    and no earlier sample of the same run fired."""
    fired: list[int] = []
    for k, (t, pct) in enumerate(samples):
        if pct >= rule.below_pct:
            continue
        j = k
        while j > 0 and samples[j - 1][1] < rule.below_pct:
            j -= 1
        lasted = t - samples[j][0] >= rule.after_s
        if lasted and not any(j <= f < k for f in fired):
            fired.append(k)
    return fired


@given(
    after=st.sampled_from([1.0, 5.0, 10.0]),
    below=st.sampled_from([1.0, 5.0, 50.0]),
    steps=st.lists(
        st.tuples(st.floats(0.1, 4.0), st.sampled_from([0.0, 0.5, 3.0, 5.0, 20.0, 100.0])),
        max_size=40,
    ),
)
def test_idle_watch_fires_exactly_where_the_rule_says(
    after: float, below: float, steps: list[tuple[float, float]]
) -> None:
    rule = IdleRule(after, below, IdleAction.STOP)
    samples: list[tuple[float, float]] = []
    t = 0.0
    for gap, pct in steps:
        t += gap
        samples.append((t, pct))
    watch = IdleWatch()
    fired = [k for k, (t, pct) in enumerate(samples) if watch.observe("j", rule, t, pct)]
    assert fired == brute_force_fires(rule, samples)
