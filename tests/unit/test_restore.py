"""JobRestored: a restarted driver hands back running and waiting jobs, in submission order."""

from __future__ import annotations

import pytest

from tests.builders import DGX1, LAS, job, moved, project, scheduler, snapshot, started, submit
from toposched.core import (
    Checkpoint,
    JobFinished,
    JobRestored,
    JobState,
    JobStopped,
    Scheduler,
    SchedulerPolicy,
    SchedulingError,
    StopKind,
    Tick,
    WorkerSlot,
)
from toposched.placement.gang import Placement
from toposched.topology import preset
from toposched.topology.cluster import Cluster, Node, Tier
from toposched.topology.resources import Hardware


def placed(node: str, *gpus: tuple[int, ...]) -> Placement:
    return Placement(tuple(WorkerSlot(node, g) for g in gpus), None, Tier.NODE)


def test_running_job_keeps_its_gpus_and_waiting_jobs_their_order() -> None:
    s = scheduler(DGX1)
    got = project(
        s.handle(
            JobRestored(100, job("run", 4), 10, placed("n0", (0, 1, 2, 3)), restarts=1),
            JobRestored(100, job("first", 8), 20),
            JobRestored(100, job("second", 4), 30),
        )
    )
    # "second" fits on 4-7 but may not pass "first", which is reserved the whole node.
    assert got == []
    assert s.job("run").state is JobState.RUNNING
    assert s.job("run").restarts == 1
    assert s.books.owner[(0, 0)] == "run"
    assert [r.name for r in s.pending()] == ["first", "second"]
    got = project(s.handle(JobFinished(200, "run", True)))
    assert got == [
        moved("run", "running", "succeeded"),
        *started("first", {"n0": tuple(range(8))}),
    ]


def test_restored_waiting_job_starts_when_room_exists() -> None:
    s = scheduler(DGX1)
    got = project(s.handle(JobRestored(5, job("w", 4), 1)))
    assert got == started("w", {"n0": (0, 1, 2, 3)})


def test_restored_waiting_job_that_no_longer_fits_is_rejected() -> None:
    s = scheduler(DGX1)
    got = project(s.handle(JobRestored(5, job("big", 16), 1)))
    assert got == [moved("big", "pending", "rejected")]
    assert "largest node has 8" in s.job("big").reason


@pytest.mark.parametrize(
    ("restored", "message"),
    [
        pytest.param(
            JobRestored(1, job("x", 2), 0, placed("n9", (0, 1))), "node 'n9'", id="unknown-node"
        ),
        pytest.param(JobRestored(1, job("x", 2), 0, placed("n0", (7, 8))), "no GPU 8", id="gpu"),
        pytest.param(
            JobRestored(1, job("x", 2), 0, placed("n0", (0, 4))), "held by another", id="taken"
        ),
        pytest.param(
            JobRestored(1, job("x", 2), 0, placed("n0", (5,))), "holds 1 GPUs", id="worker-size"
        ),
        pytest.param(
            JobRestored(1, job("x", 1, workers=2), 0, placed("n0", (5,))),
            "1 workers placed",
            id="worker-count",
        ),
        pytest.param(
            JobRestored(1, job("x", 1, workers=2), 0, placed("n0", (5,), (5,))),
            "held by another",
            id="twice",
        ),
        pytest.param(JobRestored(1, job("run", 1), 0), "already exists", id="duplicate"),
    ],
)
def test_a_placement_this_cluster_cannot_hold_is_refused_and_changes_nothing(
    restored: JobRestored, message: str
) -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("run", 4)))
    before = snapshot(s)
    with pytest.raises(SchedulingError, match=message):
        s.handle(restored)
    assert snapshot(s) == before


def test_a_gang_of_one_gpu_type_never_fits_where_no_type_has_room_for_it() -> None:
    """3 workers x 3 GPUs: the cluster holds three (one on the T4 node, two on the V100 one),
    but a gang runs on one type unless it accepts mixed ones, and no type holds three. Kept,
    it reserved GPUs it could never use and held a 1-GPU job back on an idle cluster for ever
    (found by tests/property/test_scheduler_machine.py)."""
    t4 = Node("t4", preset("pcie-4gpu-2socket"), hardware=Hardware("T4", 16 * 2**30))
    v100 = Node("v100", preset("pcie-8gpu-2socket"), hardware=Hardware("V100", 16 * 2**30))
    s = Scheduler(Cluster((t4, v100)), SchedulerPolicy(), validate=True)
    assert s.never_fits(job("gang", 3, workers=3)) == (
        "rejected: needs 3 workers x 3 GPUs of one GPU type (mixed_types is off) within the "
        "cluster; at most 2 fit there even when it is empty"
    )
    assert s.never_fits(job("mixed", 3, workers=3, mixed_types=True)) is None
    assert s.never_fits(job("pair", 3, workers=2)) is None


def test_never_fits_is_answerable_without_submitting() -> None:
    s = scheduler(DGX1)
    assert s.never_fits(job("ok", 8)) is None
    assert s.never_fits(job("wide", 9)) == "rejected: a worker needs 9 GPUs; the largest node has 8"
    assert s.books.jobs == {}


@pytest.mark.parametrize(
    ("kind", "then"),
    [
        pytest.param(StopKind.CANCEL, "cancelled", id="cancel"),
        pytest.param(StopKind.FAILURE, "failed", id="failure"),
        pytest.param(StopKind.PREEMPT, "pending", id="preempt"),
        pytest.param(StopKind.MIGRATE, "pending", id="migrate"),
        pytest.param(StopKind.RESIZE, "pending", id="resize"),
    ],
)
def test_a_stop_under_way_is_carried_on(kind: StopKind, then: str) -> None:
    s = scheduler(DGX1)
    spec = job("mid", 4, checkpoint=Checkpoint("SIGUSR1", 5))
    assert s.handle(JobRestored(9, spec, 1, placed("n0", (0, 1, 2, 3)), stopping=kind)) == []
    assert s.job("mid").state is JobState.STOPPING
    assert s.books.owner[(0, 0)] == "mid"  # its GPUs stay held until its workers are gone
    got = project(s.handle(JobStopped(10, "mid")))
    if then == "pending":
        # Requeued (a move's new GPUs died with the old driver); the node is free, so it
        # starts again at once.
        assert got == [moved("mid", "stopping", "pending"), *started("mid", {"n0": (0, 1, 2, 3)})]
        assert s.job("mid").restarts == 0
    else:
        assert got == [moved("mid", "stopping", then)]
        assert (0, 0) not in s.books.owner


def test_a_stopping_job_needs_its_placement() -> None:
    s = scheduler(DGX1)
    with pytest.raises(SchedulingError, match="needs its placement"):
        s.handle(JobRestored(1, job("x"), 0, None, stopping=StopKind.CANCEL))
    assert s.books.jobs == {}


@pytest.mark.parametrize(
    ("served", "order"),
    [((0.0, 0.0), ["first", "second"]), ((3600.0, 100.0), ["second", "first"])],
)
def test_restored_service_orders_waiting_jobs_by_least_attained_service(
    served: tuple[float, float], order: list[str]
) -> None:
    """Issue 16: the service a waiting job had comes back with it. `first` had the demotion
    threshold of service before the restart: it waits behind `second`, which had less, as it
    did before (with no service handed back, submission order decides)."""
    s = scheduler(DGX1, **LAS)
    s.handle(
        JobRestored(100, job("run", 8), 5, placed("n0", tuple(range(8)))),
        JobRestored(100, job("first", 8), 10, service_gpu_s=served[0]),
        JobRestored(100, job("second", 8), 20, service_gpu_s=served[1]),
    )
    assert [r.name for r in s.pending()] == order
    assert s.view.attained_service("first") == served[0]
    assert ("demoted" in s.explain("first")) is (served[0] >= 3600)
    got = project(s.handle(JobFinished(200, "run", True)))
    assert got == [
        moved("run", "running", "succeeded"),
        *started(order[0], {"n0": tuple(range(8))}),
    ]


def test_a_restored_running_job_counts_its_service_on_from_what_it_had() -> None:
    """`long` had 3,520 GPU-seconds when the driver restarted: on 8 GPUs it reaches the
    3,600 threshold 10 s later, and then the waiting `new` preempts it (it can checkpoint)."""
    s = scheduler(DGX1, **LAS)
    long = job("long", 8, checkpoint=Checkpoint("SIGUSR1", 5.0))
    s.handle(JobRestored(100, long, 1, placed("n0", tuple(range(8))), service_gpu_s=3520.0))
    assert s.view.attained_service("long") == 3520.0
    assert [a for a in s.handle(*submit(job("new", 8), t=105)) if a.job == "long"] == []
    assert s.view.attained_service("long") == 3560.0
    assert project(s.handle(Tick(109))) == []
    assert ("stop", "long", "preempt") in project(s.handle(Tick(110)))


def test_service_handed_back_must_be_a_finite_number() -> None:
    s = scheduler(DGX1)
    with pytest.raises(SchedulingError, match="service must be a finite number"):
        s.handle(JobRestored(5, job("w", 4), 1, service_gpu_s=-1.0))
    assert not s.view.knows("w")
