"""`Scheduler.handle_batch`: many events, one scheduling cycle, and a refused event's answer."""

from __future__ import annotations

import pytest

from tests.builders import DGX1, job, project, scheduler
from toposched.core import JobFinished, JobSubmitted, SchedulingError, StartJob
from toposched.core.errors import BatchRefused


def test_a_batch_decides_once_after_all_its_events() -> None:
    """Two gangs end and a waiting 8-GPU job is in the batch: one cycle, after both ends,
    starts it on the whole node, as cycles after each event would."""
    batched, single = scheduler(DGX1), scheduler(DGX1)
    for s in (batched, single):
        s.handle(JobSubmitted(0, job("a", gpus=4)), JobSubmitted(0, job("b", gpus=4)))
        s.handle(JobSubmitted(1, job("big", gpus=8)))
    ends = [JobFinished(2, "a", True), JobFinished(2, "b", True)]
    assert batched.gang is not None and single.gang is not None
    before = batched.gang.cycles
    answer = batched.handle_batch(ends)
    assert batched.gang.cycles == before + 1
    assert project(answer) == project(single.handle(*ends))
    assert single.gang.cycles == before + 2
    placement = batched.job("big").placement
    assert placement is not None and sorted(g for _, g in placement.pairs()) == list(range(8))


def test_a_refused_event_keeps_the_answer_to_those_before_it() -> None:
    s = scheduler(DGX1)
    with pytest.raises(BatchRefused) as refused:
        s.handle_batch([JobSubmitted(0, job("a", gpus=4)), JobFinished(0, "nobody", True)])
    assert isinstance(refused.value, SchedulingError)
    assert "nobody" in str(refused.value.cause)
    assert [a.job for a in refused.value.actions if isinstance(a, StartJob)] == ["a"]
    assert s.job("a").state.value == "running"
