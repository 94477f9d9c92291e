"""The core and MIG: jobs that ask a profile get instances carved from GPUs in MIG mode, which
are never given whole nor shared by fraction; what the cluster cannot offer is refused."""

from __future__ import annotations

import pytest

from tests.builders import DGX1, HGX, job, submit
from toposched.core import JobSpec, Scheduler, make_scheduler_policy
from toposched.core.actions import StartJob
from toposched.core.errors import SchedulingError
from toposched.core.events import (
    GpuHealth,
    JobFinished,
    JobRestored,
    NodeAdded,
    NodeCordoned,
    NodeRemoved,
)
from toposched.core.job import JobError, JobState
from toposched.placement.gang import Placement, WorkerSlot
from toposched.placement.mig import MigGpu, starts
from toposched.topology.cluster import Cluster, Node, Tier
from toposched.topology.mig import mig_table
from toposched.topology.presets import preset
from toposched.topology.resources import Hardware

GIB = 2**30
H100_80 = mig_table("H100", 80 * GIB)


def h100(name: str = "h", mig: tuple[int, ...] = (0, 1)) -> Node:
    return Node(name, preset(HGX), hardware=Hardware("H100", 80 * GIB, 192_000, mig=mig))


def core(*nodes: Node) -> Scheduler:
    return Scheduler(Cluster(nodes), make_scheduler_policy("toposched", {}), validate=True)


def mig(name: str, profile: str, **fields: object) -> JobSpec:
    return JobSpec(name, mig=profile, **fields)  # type: ignore[arg-type]


def starts_of(actions: list) -> dict[str, WorkerSlot]:  # type: ignore[type-arg]
    return {a.job: a.placement.workers[0] for a in actions if isinstance(a, StartJob)}


def test_mig_jobs_land_on_valid_instances_of_gpus_in_mig_mode() -> None:
    s = core(h100())
    asks = ["3g.40gb", "3g.40gb", "1g.10gb", "2g.20gb", "4g.40gb"]
    started = starts_of(s.handle(*submit(*(mig(f"m{k}", p) for k, p in enumerate(asks)))))
    assert set(started) == {f"m{k}" for k in range(len(asks))}
    # Two 3g on GPU 0 (6 of its 7 compute slices, all its memory), the rest on GPU 1 (all 7
    # compute slices): no 1g is left anywhere.
    s.handle(*submit(mig("late", "1g.10gb")))
    assert s.job("late").state is JobState.PENDING
    on_gpu: dict[int, tuple[tuple[str, int], ...]] = {0: (), 1: ()}
    for name, slot in started.items():
        (gpu,) = slot.gpus
        assert gpu in (0, 1) and slot.instance is not None
        profile = asks[int(name[1:])]
        # Each instance, added in turn, is where the table lets it start beside the others.
        assert H100_80 is not None
        assert slot.instance in starts(MigGpu(0, gpu, H100_80, on_gpu[gpu]), profile)
        on_gpu[gpu] += ((profile, slot.instance),)
    assert s.books.mig[(0, 0)] and s.books.mig[(0, 1)]
    # 3/7 of a GPU each for the 3g instances: what the queue counts in thousandths.
    assert s.books.queues["default"].used_milli == sum(
        H100_80.profile(p).compute * 1000 // 7  # type: ignore[union-attr]
        for p in asks
    )


def test_a_whole_gpu_job_never_gets_a_gpu_in_mig_mode() -> None:
    s = core(h100())
    started = starts_of(s.handle(*submit(*(job(f"w{k}") for k in range(7)))))
    assert sorted(slot.gpus[0] for slot in started.values()) == [2, 3, 4, 5, 6, 7]
    assert s.job("w6").state is JobState.PENDING
    whole = s.handle(*submit(job("eight", 8)))
    assert s.job("eight").state is JobState.REJECTED
    assert not starts_of(whole)
    assert "the largest node has 6" in s.job("eight").reason


def test_a_share_of_a_gpu_never_lands_on_a_gpu_in_mig_mode() -> None:
    s = core(h100(mig=tuple(range(7))))
    s.handle(*submit(job("whole"), job("half", gpu_milli=500)))
    assert s.job("whole").placement.workers[0].gpus == (7,)  # type: ignore[union-attr]
    assert s.job("half").state is JobState.PENDING
    assert "no GPU has 0.5 of a GPU left" in s.job("half").reason
    every = core(h100(mig=tuple(range(8))))
    every.handle(*submit(job("half", gpu_milli=500)))
    assert every.job("half").state is JobState.REJECTED


def test_a_profile_the_cluster_lacks_is_refused_naming_mig_and_the_profiles() -> None:
    s = core(h100())
    s.handle(*submit(mig("a100s", "3g.20gb")))
    rec = s.job("a100s")
    assert rec.state is JobState.REJECTED
    assert "mig 3g.20gb" in rec.reason
    assert "mig may be 7g.80gb, 4g.40gb, 3g.40gb, 2g.20gb, 1g.20gb, 1g.10gb" in rec.reason
    plain = core(Node("v", preset(DGX1)))
    plain.handle(*submit(mig("nowhere", "1g.10gb")))
    assert "mig 1g.10gb: no GPU it may use is in MIG mode" in plain.job("nowhere").reason


def test_a_mig_job_is_one_worker_and_nothing_else() -> None:
    with pytest.raises(JobError, match=r"mig 1g\.10gb is one MIG instance.*2 workers"):
        JobSpec("two", workers=2, mig="1g.10gb")
    with pytest.raises(JobError, match="a share of a GPU"):
        JobSpec("both", mig="1g.10gb", gpu_milli=500)
    with pytest.raises(JobError, match="must name a MIG profile"):
        JobSpec("blank", mig=" ")


def test_an_instance_given_back_is_carved_again() -> None:
    s = core(h100())
    s.handle(*submit(mig("a", "7g.80gb"), mig("b", "7g.80gb"), mig("c", "7g.80gb")))
    assert s.job("c").state is JobState.PENDING
    assert "no GPU in MIG mode has room for a 7g.80gb" in s.job("c").reason
    slot = starts_of(s.handle(JobFinished(1.0, "a", True)))["c"]
    assert slot.gpus == s.job("c").placement.workers[0].gpus  # type: ignore[union-attr]
    assert (slot.gpus, slot.instance) == ((0,), 0)


def test_a_failed_gpu_in_mig_mode_stops_its_instances_and_is_never_freed() -> None:
    s = core(h100(mig=(0,)))
    s.handle(*submit(mig("a", "3g.40gb"), mig("b", "3g.40gb")))
    stops = s.handle(GpuHealth(1.0, "h", 0, False))
    assert {a.job for a in stops if not isinstance(a, StartJob)} >= {"a", "b"}
    s.handle(GpuHealth(2.0, "h", 0, True))
    assert not s.books.capacity.free[0] & 1
    s.handle(NodeCordoned(3.0, "h"), NodeCordoned(4.0, "h", False))
    assert not s.books.capacity.free[0] & 1


def test_a_restored_instance_keeps_its_start_and_bad_ones_are_refused() -> None:
    s = core(h100())
    at = Placement((WorkerSlot("h", (1,), 4),), None, Tier.NODE)
    s.handle(JobRestored(0.0, mig("kept", "3g.40gb"), 0.0, at))
    assert s.books.mig[(0, 1)] == {"kept": ("3g.40gb", 4)}
    for spec, slot, why in (
        (mig("over", "2g.20gb"), WorkerSlot("h", (1,), 4), "no room for its instance"),
        (mig("odd", "3g.40gb"), WorkerSlot("h", (0,), 2), "no room for its instance"),
        (mig("nostart", "1g.10gb"), WorkerSlot("h", (0,)), "no room for its instance"),
        (mig("plain", "1g.10gb"), WorkerSlot("h", (5,), 0), "is not in MIG mode"),
        (job("whole"), WorkerSlot("h", (0,)), "GPU 0 of 'h' is in MIG mode"),
    ):
        with pytest.raises(SchedulingError, match=why):
            s.handle(JobRestored(0.0, spec, 0.0, Placement((slot,), None, Tier.NODE)))
    assert s.books.mig == {(0, 1): {"kept": ("3g.40gb", 4)}}


def test_a_profile_that_does_not_fit_keeps_no_smaller_one_waiting() -> None:
    s = core(h100(mig=(0,)))
    started = starts_of(
        s.handle(*submit(mig("a", "3g.40gb"), mig("big", "7g.80gb"), mig("small", "1g.10gb")))
    )
    assert set(started) == {"a", "small"}
    assert s.job("big").state is JobState.PENDING


def test_an_instance_is_restored_on_a_cordoned_node() -> None:
    s = core(h100())
    s.handle(NodeCordoned(0.0, "h"))
    at = Placement((WorkerSlot("h", (0,), 0),), None, Tier.NODE)
    s.handle(JobRestored(1.0, mig("kept", "4g.40gb"), 0.0, at))
    assert s.job("kept").state is JobState.RUNNING


def test_a_node_cannot_come_back_changed_under_its_instances() -> None:
    s = core(h100())
    s.handle(*submit(mig("a", "7g.80gb"), job("w")))
    ((gpu,),) = [slot.gpus for slot in s.job("a").placement.workers]  # type: ignore[union-attr]
    s.handle(NodeRemoved(1.0, "h"))
    # Both still hold what they had there: the instance, and GPU 2 held whole.
    assert s.job("a").state is s.job("w").state is JobState.STOPPING
    with pytest.raises(SchedulingError, match=f"GPU {gpu} comes back not in MIG mode as it was"):
        s.handle(NodeAdded(2.0, h100(mig=(1 - gpu,))))
    with pytest.raises(SchedulingError, match="MIG mode that jobs still hold whole or share"):
        s.handle(NodeAdded(2.0, h100(mig=tuple(range(8)))))
    s.handle(NodeAdded(3.0, h100()))
    assert s.books.mig[(0, gpu)] == {"a": ("7g.80gb", 0)}
