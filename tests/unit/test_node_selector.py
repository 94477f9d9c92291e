"""Node selectors: a job runs only on nodes whose labels match, and says so while it waits."""

from __future__ import annotations

import random

import pytest

from tests.builders import DGX1, PCIE4, cluster, job, node, scheduler
from toposched.core import (
    Action,
    JobFinished,
    JobSubmitted,
    NodeAdded,
    NodeLabelled,
    NodeSelector,
    Scheduler,
    StartJob,
    StopJob,
    make_scheduler_policy,
)
from toposched.placement.capacity import Capacity
from toposched.placement.random_pick import Room, random_worker
from toposched.topology.cluster import ClusterError, Eligibility
from toposched.topology.resources import ANY_FIT

A = NodeSelector.of({"pool": "a"})
B = NodeSelector.of({"pool": "b"})


def nodes_of(actions: list[Action], name: str) -> set[str]:
    """The nodes a StartJob among `actions` gives job `name`."""
    (start,) = [a for a in actions if isinstance(a, StartJob) and a.job == name]
    return {n for n, _ in start.placement.pairs()}


def pools() -> Scheduler:
    """n0 in pool a, n1 in pool b: two 8-GPU DGX-1 nodes."""
    return scheduler(
        cluster(node("n0", labels={"pool": "a"}), node("n1", labels={"pool": "b"})),
    )


def test_selector_takes_every_label_it_names() -> None:
    both = NodeSelector.of({"pool": "a", "gpu": "v100"})
    assert both.matches({"pool": "a", "gpu": "v100", "rack": "r1"})
    assert not both.matches({"pool": "a"})
    assert not both.matches({"pool": "b", "gpu": "v100"})
    assert NodeSelector().matches({}) and not NodeSelector()
    assert both.describe() == "gpu=v100,pool=a"


def test_a_selector_label_must_be_a_string() -> None:
    with pytest.raises(ClusterError, match="selector: labels map names to strings"):
        NodeSelector.of({"pool": 3})  # type: ignore[dict-item]


def test_a_job_goes_only_to_matching_nodes() -> None:
    s = pools()
    # n0 (pool a) is the fuller node after the first job: best fit alone would pick it.
    s.handle(JobSubmitted(0, job("fill", gpus=2, selector=A)))
    actions = s.handle(JobSubmitted(0, job("b-only", gpus=4, selector=B)))
    assert nodes_of(actions, "b-only") == {"n1"}


def test_a_job_waits_while_its_nodes_are_full_and_says_which_nodes() -> None:
    s = pools()
    s.handle(JobSubmitted(0, job("big", gpus=8, selector=A)))
    s.handle(JobSubmitted(0, job("next", gpus=2, selector=A)))
    assert s.job("next").state.value == "pending"
    assert "(on the 1 node(s) labelled pool=a)" in s.job("next").reason
    assert "on nodes labelled pool=a" in s.explain("next")
    # The other pool has room, and is not used.
    assert s.books.capacity.free[1].bit_count() == 8
    actions = s.handle(JobFinished(1, "big", True))
    assert nodes_of(actions, "next") == {"n0"}


def test_no_matching_node_waits_until_one_is_labelled_or_added() -> None:
    s = pools()
    gpu = NodeSelector.of({"gpu": "a100"})
    s.handle(JobSubmitted(0, job("a100", gpus=2, selector=gpu)))
    assert s.job("a100").reason == "no node has the labels gpu=a100 (the job's selector)"
    s.handle(NodeAdded(1, node("n2", PCIE4, labels={"gpu": "t4"})))
    assert s.job("a100").state.value == "pending"
    actions = s.handle(NodeLabelled(2, "n1", "gpu", "a100"))
    assert nodes_of(actions, "a100") == {"n1"}


def test_a_reservation_holds_only_nodes_the_job_may_use() -> None:
    s = pools()
    s.handle(JobSubmitted(0, job("a1", gpus=6, selector=A)))
    s.handle(JobSubmitted(0, job("b1", gpus=4, selector=B)))
    s.handle(JobSubmitted(0, job("head", gpus=8, selector=A)))
    res = s.books.reservation
    assert res is not None and res.job == "head"
    assert set(res.gpus) == {0}  # n0, though n1 has fewer GPUs to wait for


def test_preemption_takes_victims_only_where_the_job_may_run() -> None:
    # Pool b on the lower-numbered node, that wins ties among equal victims.
    s = scheduler(
        cluster(node("n0", labels={"pool": "b"}), node("n1", labels={"pool": "a"})),
        queues={"own": 8, "other": 0},
    )
    s.handle(JobSubmitted(0, job("lend-a", gpus=8, queue="other", selector=A)))
    s.handle(JobSubmitted(1, job("lend-b", gpus=8, queue="other", selector=B)))
    actions = s.handle(JobSubmitted(2, job("mine", gpus=4, queue="own", selector=A)))
    # lend-b started last (the cheaper victim, less work lost) but runs where mine may not.
    assert [a.job for a in actions if isinstance(a, StopJob)] == ["lend-a"]


def test_random_worker_picks_only_matching_nodes() -> None:
    cap = Capacity([node("n0", labels={"pool": "a"}), node("n1", DGX1, labels={"pool": "b"})])
    rng = random.Random(7)
    room: Room = {}
    where = Eligibility(A)
    seen = {random_worker(cap, 1, where, ANY_FIT, rng, room).node for _ in range(30)}  # type: ignore[union-attr]
    assert seen == {"n0"}


def test_k8s_default_binds_workers_only_on_matching_nodes() -> None:
    s = Scheduler(
        cluster(node("n0", labels={"pool": "a"}), node("n1", labels={"pool": "b"})),
        make_scheduler_policy("k8s-default"),
        validate=True,
    )
    actions = s.handle(JobSubmitted(0, job("w", gpus=2, workers=4, selector=A)))
    assert nodes_of(actions, "w") == {"n0"}
