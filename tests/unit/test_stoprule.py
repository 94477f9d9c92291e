"""The stop rule (core/stoprule.py): least attained service stops a job only when it pays, and
a job stopped before is protected for a while, then for good."""

from __future__ import annotations

import math

import pytest

from tests.builders import DGX1, job, moved, project, scheduler, started, stopping, submit
from toposched.core import Checkpoint, JobStopped, SchedulerPolicy, Tick
from toposched.core.demotion import Demotions
from toposched.core.records import JobRecord
from toposched.core.stoprule import StopRule
from toposched.placement.gang import Placement, WorkerSlot
from toposched.topology.cluster import Tier

CKPT = Checkpoint("SIGUSR1", 0.0)
# Demoted after 3,600 GPU-seconds (450 s on 8 GPUs); jobs checkpoint every 300 s of work and
# restart in 120 s; a young job is expected to have 600 s left.
COST = {
    "demote_after_gpu_h": 1.0,
    "young_job_s": 600.0,
    "checkpoint_interval_s": 300.0,
    "restore_s": 120.0,
    "pay_margin": 1.0,
    "max_stops": None,
    "stop_protect_s": 0.0,
    "preempt_patience_s": 0.0,
}


def test_a_demoted_job_is_stopped_only_once_the_stop_pays() -> None:
    """`long` is demoted at 450 s, and `new` waits from 500 s. Stopping `long` pays once the
    run time it is expected to have left (its 900 s so far) exceeds `new`'s (600 s) by more
    than the stop costs it: before 720 s the gain is under the restart alone; from 720 to
    900 s the work since its checkpoint at 600 s is lost as well; at 900 s it has just
    checkpointed and the stop costs the restart alone (300 > 120)."""
    s = scheduler(DGX1, **COST)
    assert project(s.handle(*submit(job("long", 8, checkpoint=CKPT)))) == [
        ("transition", "long", None, "pending"),
        *started("long", {"n0": tuple(range(8))}),
    ]
    assert project(s.handle(*submit(job("new", 8, checkpoint=CKPT), t=500))) == [
        ("transition", "new", None, "pending")
    ]
    for t in (600, 720, 850, 899):
        assert project(s.handle(Tick(t))) == [], t
    assert project(s.handle(Tick(900))) == stopping("long", "preempt")
    assert project(s.handle(JobStopped(900, "long"))) == [
        moved("long", "stopping", "pending"),
        *started("new", {"n0": tuple(range(8))}),
    ]


def test_a_time_limit_bounds_the_run_time_a_job_is_expected_to_have_left() -> None:
    """As above, but `long` may run 1,000 s at most: at 900 s it has 100 s left, not 900 s,
    and stopping it for `new` (600 s expected) would cost more than it saves."""
    s = scheduler(DGX1, **COST)
    s.handle(*submit(job("long", 8, checkpoint=CKPT, limit_s=1000.0)))
    s.handle(*submit(job("new", 8, checkpoint=CKPT), t=500))
    for t in (600, 720, 900, 950):
        assert project(s.handle(Tick(t))) == [], t


def test_a_waiting_job_with_a_short_time_limit_is_worth_a_stop_sooner() -> None:
    """`new` may run 60 s at most, so at 500 s stopping `long` (500 s had) gains 440 s for the
    320 s it costs (200 s since its checkpoint at 300 s, and the restart): at once, where
    without the limit the stop waits until 900 s."""
    s = scheduler(DGX1, **COST)
    s.handle(*submit(job("long", 8, checkpoint=CKPT)))
    quick = job("new", 8, checkpoint=CKPT, limit_s=60.0)
    assert project(s.handle(*submit(quick, t=500))) == [
        ("transition", "new", None, "pending"),
        *stopping("long", "preempt"),
    ]


def test_without_the_cost_test_the_demoted_job_goes_at_once() -> None:
    s = scheduler(DGX1, **{**COST, "pay_margin": None})
    s.handle(*submit(job("long", 8, checkpoint=CKPT)))
    assert project(s.handle(*submit(job("new", 8, checkpoint=CKPT), t=500))) == [
        ("transition", "new", None, "pending"),
        *stopping("long", "preempt"),
    ]


def test_a_waiting_job_has_a_job_stopped_for_it_only_once_it_has_waited_its_patience() -> None:
    """`new` waits from 500 s; with 300 s of patience it may have the demoted `long` stopped
    from 800 s (the cost test off), not before: GPUs freed meanwhile would have been its own."""
    s = scheduler(DGX1, **{**COST, "pay_margin": None, "preempt_patience_s": 300.0})
    s.handle(*submit(job("long", 8, checkpoint=CKPT)))
    assert project(s.handle(*submit(job("new", 8, checkpoint=CKPT), t=500))) == [
        ("transition", "new", None, "pending")
    ]
    assert s.next_due() == 800  # when it becomes patient: a driver without a clock ticks then
    assert project(s.handle(Tick(799))) == []
    assert project(s.handle(Tick(800))) == stopping("long", "preempt")


def test_a_job_says_its_own_checkpoint_interval() -> None:
    """Checkpointing every 100 s, `long` loses at most 100 s: at 500 s the gain (0: it is
    expected to have 600 s left as `new` is) is still too small; at 801 s (last checkpoint at
    800 s) it pays, where the policy's 300 s interval would wait for 900 s."""
    s = scheduler(DGX1, **COST)
    every_100 = Checkpoint("SIGUSR1", 0.0, interval_s=100.0)
    s.handle(*submit(job("long", 8, checkpoint=every_100)))
    s.handle(*submit(job("new", 8, checkpoint=CKPT), t=500))
    assert project(s.handle(Tick(799))) == []
    assert project(s.handle(Tick(801))) == stopping("long", "preempt")


def record(name: str, stops: int, started_at: float) -> JobRecord:
    rec = JobRecord(job(name, 8, checkpoint=CKPT), seq=stops, submitted=0.0)
    rec.stops = stops
    rec.placement = Placement((WorkerSlot("n0", tuple(range(8))),), None, Tier.NODE)
    rec.last_restart = started_at
    return rec


RULE = StopRule(
    patience_s=0.0,
    protect_s=1000.0,
    max_stops=4,
    restore_s=120.0,
    checkpoint_interval_s=300.0,
    young_s=600.0,
    pay_margin=1.0,
)


@pytest.mark.parametrize(
    ("stops", "until"),
    [(0, 50.0), (1, 1050.0), (2, 2050.0), (3, 3050.0), (4, math.inf), (7, math.inf)],
)
def test_protection_grows_with_each_stop_and_ends_at_the_cap(stops: int, until: float) -> None:
    assert RULE.protected_until(record("j", stops, 50.0), 50.0) == until


def test_a_protected_job_is_demoted_but_not_a_victim_until_its_protection_ends() -> None:
    """Demoted 450 s after it starts (3,600 GPU-s on 8 GPUs), but stopped once before, so
    protected for 1,000 s: a victim from 1,050 s. Stopped four times (the cap): never a
    victim, though demoted (it ranks as demoted when it waits again)."""
    nodes: dict[str, dict[int, int]] = {"once": {0: 0xFF}, "capped": {0: 0xFF}}
    demotions = Demotions(3600.0, nodes, RULE)
    once, capped = record("once", 1, 50.0), record("capped", 4, 50.0)
    demotions.started(once, 50.0)
    demotions.started(capped, 50.0)
    assert demotions.is_demoted("once", 600.0) and demotions.is_demoted("capped", 600.0)
    assert demotions.victims(600.0) == {}
    assert demotions.next_at() == 1050.0
    assert set(demotions.victims(1050.0)) == {"once"}
    assert set(demotions.victims(10**9)) == {"once"}
    assert demotions.next_at() == math.inf


def test_the_policy_checks_the_rule_numbers() -> None:
    with pytest.raises(ValueError, match="max_stops must be at least 1"):
        SchedulerPolicy(max_stops=0)
    with pytest.raises(ValueError, match="demoted_levels must be at least 1, got 0"):
        SchedulerPolicy(demoted_levels=0)
    with pytest.raises(ValueError, match=r"level_ratio must be more than 1, got 1\.0"):
        SchedulerPolicy(level_ratio=1.0)
    with pytest.raises(ValueError, match="pay_margin must be >= 0"):
        SchedulerPolicy(pay_margin=-1.0)
    with pytest.raises(ValueError, match="checkpoint_interval_s must be positive"):
        SchedulerPolicy(checkpoint_interval_s=0.0)
