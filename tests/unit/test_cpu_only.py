"""Jobs without GPUs (`gpus_per_worker=0`): placed by CPUs and memory alone, in the same
queues as the jobs with GPUs, holding the CPUs and memory those count."""

from __future__ import annotations

import pytest

from tests.builders import DGX1, cluster, job, project, queued, scheduler, started, submit
from toposched.core import (
    Elastic,
    JobError,
    JobFinished,
    JobState,
    LocalityRule,
    NodeCordoned,
    NodeRemoved,
    Scheduler,
    make_scheduler_policy,
)
from toposched.topology import preset
from toposched.topology.cluster import Node
from toposched.topology.resources import Hardware

GIB = 1 << 30


def sized(name: str, cpus: int = 8000, memory: int = 32 * GIB, rack: str = "r0") -> Node:
    """A DGX-1 whose workers may use `cpus` millicores and `memory` bytes."""
    return Node(name, preset(DGX1), rack=rack, hardware=Hardware("V100", 0, cpus, memory))


def cpu_job(name: str, cpus: int = 2000, workers: int = 1, **fields: object) -> object:
    return job(name, gpus=0, workers=workers, cpus=cpus, **fields)


def test_what_a_job_without_gpus_may_ask() -> None:
    with pytest.raises(JobError, match="must ask for CPUs"):
        job("x", gpus=0)
    with pytest.raises(JobError, match="elastic is for jobs with GPUs"):
        job("x", gpus=0, cpus=1000, elastic=Elastic(1, 2))
    with pytest.raises(JobError, match="gpu_types is for jobs with GPUs"):
        job("x", gpus=0, cpus=1000, gpu_types=("V100",))
    with pytest.raises(JobError, match="gpus_per_worker must be a positive integer"):
        job("x", gpus=-1)
    assert cpu_job("ok").cpu_only


def test_it_starts_though_no_gpu_is_free() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("all", 8), job("blocked", 8)))
    assert s.job("blocked").state is JobState.PENDING
    assert project(s.handle(*submit(cpu_job("prep"), t=1.0))) == [
        queued("prep"),
        ("start", "prep", {"n0": ()}),
        ("transition", "prep", "pending", "running"),
    ]
    assert s.job("prep").placement is not None
    assert s.job("prep").placement.describe() == "n0 (1 worker(s), no GPU)"
    assert s.view.held("n0") == (2000, 0)


def test_a_full_cycle_with_no_gpu_free_still_reaches_it() -> None:
    s = scheduler(cluster(sized("n0", cpus=4000)))
    s.handle(*submit(job("all", 8), job("blocked", 8), cpu_job("a", 3000)))
    s.handle(*submit(cpu_job("b", 3000)))  # no room: 1 CPU is left
    assert (
        s.job("b").reason == "needs 1 worker(s) with 3 CPUs each on one node; there is room for 0"
    )
    # `a` ends: the cycle after it passes the GPU jobs (no GPU is free) and starts `b`.
    assert project(s.handle(JobFinished(1.0, "a", True))) == [
        ("transition", "a", "running", "succeeded"),
        ("start", "b", {"n0": ()}),
        ("transition", "b", "pending", "running"),
    ]
    assert s.job("blocked").reason.startswith("needs 8 GPUs")


def test_gpu_jobs_and_cpu_jobs_share_the_nodes_cpus() -> None:
    s = scheduler(cluster(sized("n0", cpus=8000)))
    s.handle(*submit(cpu_job("prep", 6000)))
    assert project(s.handle(*submit(job("train", 1, cpus=4000)))) == [queued("train")]
    assert "CPUs" in s.job("train").reason
    assert project(s.handle(JobFinished(1.0, "prep", True))) == [
        ("transition", "prep", "running", "succeeded"),
        *started("train", {"n0": (0,)}),
    ]


def test_workers_spread_over_nodes_within_their_locality() -> None:
    s = scheduler(cluster(sized("a0", cpus=4000), sized("a1", cpus=4000)))
    wide = LocalityRule.parse("rack")
    s.handle(*submit(cpu_job("one", 3000)))  # on a0: 1 CPU left there
    s.handle(*submit(cpu_job("two", 1500, workers=2, locality=wide)))
    assert nodes_of(s, "two") == ["a1", "a1"]  # the first node with room for both
    one_node = LocalityRule.parse("node")
    s.handle(*submit(cpu_job("three", 1000, workers=2, locality=one_node)))
    assert s.job("three").reason == (
        "needs 2 worker(s) with 1 CPUs each on one node; there is room for 1"
    )
    s.handle(*submit(cpu_job("four", 1000, workers=2, locality=wide)))
    assert nodes_of(s, "four") == ["a0", "a1"]  # the rack has room for both, a node each
    placement = s.job("four").placement
    assert placement is not None and placement.tier.name == "RACK"


def nodes_of(s: Scheduler, name: str) -> list[str]:
    placement = s.job(name).placement
    assert placement is not None, s.job(name).reason
    return [w.node for w in placement.workers]


def test_a_lost_node_stops_it_and_a_cordoned_one_takes_none() -> None:
    s = scheduler(cluster(sized("n0"), sized("n1")))
    s.handle(*submit(cpu_job("a")))
    assert project(s.handle(NodeRemoved(1.0, "n0"))) == [
        ("stop", "a", "failure"),
        ("transition", "a", "running", "stopping"),
    ]
    s.handle(NodeCordoned(2.0, "n1"))
    s.handle(*submit(cpu_job("b"), t=3.0))
    assert s.job("b").reason.startswith("no node it may use")
    assert project(s.handle(NodeCordoned(4.0, "n1", cordoned=False))) == [
        ("start", "b", {"n1": ()}),
        ("transition", "b", "pending", "running"),
    ]


def test_a_policy_that_binds_gpus_one_at_a_time_rejects_it() -> None:
    policy = make_scheduler_policy("k8s-default", {})
    s = Scheduler(cluster(sized("n0")), policy, validate=True)
    actions = s.handle(*submit(cpu_job("prep")))
    assert project(actions) == [("transition", "prep", None, "rejected")]
    assert "needs gang admission" in actions[0].reason
