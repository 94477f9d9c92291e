"""One placement registry for `toposched place` and the scheduler, policy combinations refused
with their reason, one job order for the lists and the ranks, and the driver kit's contract."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import DGX1, job, submit, uniform
from toposched.common.driver import Driver, DriverError
from toposched.core import (
    Checkpoint,
    JobFinished,
    JobSpec,
    Placement,
    PolicyError,
    Scheduler,
    SchedulerPolicy,
    StartJob,
    StopJob,
    StopKind,
    Transition,
    WorkerSlot,
    make_scheduler_policy,
)
from toposched.core.ordering import FairOrder, FifoOrder, JobOrder
from toposched.core.records import JobRecord, QueueRecord
from toposched.placement import policies
from toposched.placement.policies import PlacementPolicy, make_policy
from toposched.placement.request import NodePlacement, NodeRequest
from toposched.placement.ring import placed
from toposched.topology import preset
from toposched.topology.cluster import Tier


@pytest.mark.parametrize("name", sorted(policies.POLICIES))
def test_every_registered_policy_places_in_a_node(name: str) -> None:
    found = make_policy(name).place(NodeRequest(preset(DGX1), 2, frozenset({0})))
    assert len(found.gpus) == 2 and 0 not in found.gpus


def test_the_scheduler_places_with_the_registry_policy_it_names() -> None:
    """On an empty DGX-1, 3 GPUs: index order takes 0,1,2 (GPUs 1 and 2 share no NVLink), the
    topology policy a set whose ring is all NVLink; the scheduler's choice is the registry's."""
    chosen = {}
    for placement in ("index-order", "topology"):
        s = Scheduler(uniform(DGX1, 1), SchedulerPolicy(placement=placement), validate=True)
        s.handle(*submit(job("a", 3)))
        view = s.job("a").placement
        assert view is not None
        chosen[placement] = view.workers[0].gpus
        assert chosen[placement] == make_policy(placement).place(NodeRequest(preset(DGX1), 3)).gpus
    assert chosen["index-order"] == (0, 1, 2) != chosen["topology"]


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"placement": "pair-score"}, "cannot place a whole gang on a cluster"),
        ({"placement": "random"}, "cannot place a whole gang on a cluster"),
        ({"placement": "first-fit"}, "unknown policy 'first-fit'; known policies: topology"),
        ({"gang": False}, "binds one worker at a time, which placement 'topology' cannot do"),
        (
            {"gang": False, "placement": "random"},
            r"so reservation, preemption, elastic, migration \(which act on whole gangs\)",
        ),
    ],
)
def test_policies_that_cannot_work_are_refused_with_the_reason(
    fields: dict[str, object], words: str
) -> None:
    with pytest.raises(PolicyError, match=words):
        SchedulerPolicy(**fields)  # type: ignore[arg-type]


def test_a_new_placement_policy_is_one_module_and_one_registry_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The example of docs/architecture.md: `place` takes it at once; the scheduler refuses it
    until it can place a whole gang."""

    @dataclass(frozen=True)
    class HighestFirst:
        def place(self, request: NodeRequest) -> NodePlacement:
            return placed(request.topology, request.free[-request.gpus :])

    entry = PlacementPolicy("highest-first", "highest free GPU indices", HighestFirst)
    monkeypatch.setitem(policies.POLICIES, entry.name, entry)
    assert make_policy("highest-first").place(NodeRequest(preset(DGX1), 2)).gpus == (6, 7)
    with pytest.raises(PolicyError, match="'highest-first' cannot place a whole gang"):
        make_scheduler_policy("toposched", {"placement": "highest-first"})


RECORDS = st.builds(
    lambda priority, seq, level: (JobRecord(job(f"j{seq}", priority=priority), seq, 0.0), level),
    st.integers(-3, 3),
    st.integers(1, 10_000),
    st.integers(0, 1),
)


@settings(max_examples=200, deadline=None)
@given(
    order=st.sampled_from([FairOrder(), FifoOrder()]),
    entries=st.lists(RECORDS, min_size=2, max_size=12, unique_by=lambda e: e[0].seq),
    guaranteed=st.integers(0, 16),
    used=st.integers(0, 32),
)
def test_a_list_kept_in_job_key_order_is_in_rank_order(
    order: JobOrder,
    entries: list[tuple[JobRecord, int]],
    guaranteed: int,
    used: int,
) -> None:
    """Jobs of one (queue, shape) share the queue's terms, so ordering a list by the job's own
    terms orders it by the whole rank, whatever the queue's usage: one definition."""
    queue = QueueRecord("default", guaranteed, used)
    by_key = sorted(entries, key=lambda e: order.job_key(*e))
    by_rank = sorted(entries, key=lambda e: order.rank(e[0], e[1], queue, used))
    assert [e[0].seq for e in by_key] == [e[0].seq for e in by_rank]


class Recorder(Driver):
    def __init__(self, scheduler: Scheduler) -> None:
        super().__init__(scheduler)
        self.seen: list[tuple[str, str, str | None]] = []

    def on_transition(
        self, t: Transition, start: StartJob | None, stop: StopJob | None, now: float
    ) -> None:
        kind = "start" if start else "stop" if stop else None
        self.seen.append((t.job, t.new.value, kind))
        if t.job == "a" and start is not None:
            self.post(JobFinished(now + 1, "a", True))  # what carrying out may produce


def test_the_driver_kit_pairs_each_start_and_stop_with_its_transition() -> None:
    d = Recorder(Scheduler(uniform(DGX1, 1), validate=True))
    d.feed(*submit(job("a", 8), job("b", 8)))
    assert d.seen == [
        ("a", "pending", None),
        ("a", "running", "start"),
        ("b", "pending", None),
        ("a", "succeeded", None),  # posted while a start was carried out, fed after it
        ("b", "running", "start"),
    ]


def test_the_driver_kit_refuses_a_start_without_its_transition() -> None:
    d = Recorder(Scheduler(uniform(DGX1, 1)))
    start = StartJob("x", "why", Placement((WorkerSlot("n0", (0,)),), None, Tier.NODE))
    with pytest.raises(DriverError, match="without its transition: x"):
        d.carry_out([start], 0.0)


def test_a_stop_carried_on_after_a_restart_gets_the_cores_signal() -> None:
    """The server once worked out its own signal and grace for a stop it carried on, leaving
    out the policy's least grace for a cancel."""
    d = Recorder(Scheduler(uniform(DGX1, 1), SchedulerPolicy(stop_grace_s=30.0)))
    spec = JobSpec("c", checkpoint=Checkpoint("SIGUSR1", 5.0))
    assert d.stop_signal(spec, StopKind.PREEMPT) == ("SIGUSR1", 5.0)
    assert d.stop_signal(spec, StopKind.CANCEL) == ("SIGUSR1", 30.0)
    assert d.stop_signal(JobSpec("p"), StopKind.CANCEL) == ("SIGTERM", 30.0)
