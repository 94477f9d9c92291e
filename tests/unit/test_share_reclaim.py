"""Shares of GPUs lent beyond a queue's guarantee are given back as whole GPUs are: a job of a
queue within its guarantee preempts every job sharing a GPU it needs, and no new share joins
that GPU while it waits (the state machine's guarantee property found both missing)."""

from __future__ import annotations

from tests.builders import cluster, job, moved, node, project, queued, scheduler, started, stopping
from toposched.core import JobStopped
from toposched.core.events import JobSubmitted


def share(name: str, milli: int, queue: str = "lender") -> JobSubmitted:
    return JobSubmitted(0.0, job(name, queue=queue, gpu_milli=milli))


def test_a_guaranteed_job_takes_back_shared_gpus_and_no_new_share_joins_them() -> None:
    s = scheduler(cluster(node("n0", "pcie-4gpu-2socket")), queues={"own": 4, "lender": 0})
    # The lender borrows the whole node: two whole GPUs, and two jobs sharing a third.
    first = project(
        s.handle(
            JobSubmitted(0.0, job("w", 2, queue="lender")),
            share("s1", 500),
            share("s2", 500),
        )
    )
    shared_gpu = next(step[2]["n0"] for step in first if step[:2] == ("start", "s1"))
    assert next(step[2]["n0"] for step in first if step[:2] == ("start", "s2")) == shared_gpu
    # A 4-GPU job within its queue's guarantee: the whole job and both sharers are stopped.
    asked = project(s.handle(JobSubmitted(1.0, job("owner", 4, queue="own"))))
    assert asked[0] == queued("owner")
    assert sorted(asked[1:]) == sorted(
        [*stopping("w", "preempt"), *stopping("s1", "preempt"), *stopping("s2", "preempt")]
    )
    # A new share of the lender's does not join the GPU being freed.
    assert project(s.handle(share("s3", 250))) == [queued("s3")]
    assert project(s.handle(JobStopped(2.0, "w"), JobStopped(2.0, "s1"))) == [
        moved("w", "stopping", "pending"),
        moved("s1", "stopping", "pending"),
    ]
    last = project(s.handle(JobStopped(3.0, "s2")))
    assert last == [moved("s2", "stopping", "pending"), *started("owner", {"n0": (0, 1, 2, 3)})]
