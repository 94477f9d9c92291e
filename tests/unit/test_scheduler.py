"""The scheduler core, table-driven: events in, the exact actions out.

In the style of dask's worker-state-machine tests: each case is a list of steps, each step a batch
of events and the actions it must produce, projected onto plain tuples by `tests.builders.project`:
("start", job, {node: gpus}), ("stop", job, kind), ("transition", job, old, new). Every scheduler
here validates its books after each event (`validate=True`).

Expected GPU sets were worked out by hand from the preset link matrices
(toposched/topology/presets.py); the reasoning is in the comments.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.builders import (
    DGX1,
    LAS,
    PCIE4,
    PCIE8,
    Step,
    cluster,
    job,
    moved,
    node,
    nodes,
    project,
    queued,
    racks,
    scheduler,
    snapshot,
    started,
    stopping,
    submit,
    uniform,
)
from toposched.core import (
    Checkpoint,
    Elastic,
    Event,
    GpuHealth,
    JobCancelled,
    JobFinished,
    JobState,
    JobStopped,
    JobSubmitted,
    Locality,
    LocalityRule,
    NodeAdded,
    NodeCordoned,
    NodeLabelled,
    NodeRemoved,
    QueueConfigured,
    RestartPolicy,
    Scheduler,
    SchedulingError,
    StopJob,
    StopKind,
    Tick,
    WorkerFailed,
)
from toposched.core.policy import make_scheduler_policy
from toposched.placement.request import Mode
from toposched.topology import preset
from toposched.topology.cluster import SCHEDULE_LABEL, Cluster, Node
from toposched.topology.resources import Hardware

ALL8 = tuple(range(8))
LOW = (0, 1, 2, 3)
HIGH = (4, 5, 6, 7)


@dataclass(frozen=True)
class Case:
    """A cluster, a policy, and steps: (events, the actions they must produce)."""

    id: str
    cluster: Cluster
    steps: Sequence[tuple[Sequence[Event], Sequence[Step]]]
    policy: dict[str, Any] = field(default_factory=dict)
    queues: dict[str, int] | None = None


def play(case: Case) -> Scheduler:
    s = scheduler(case.cluster, queues=case.queues, **case.policy)
    for i, (events, expected) in enumerate(case.steps):
        got = project(s.handle(*events))
        assert got == list(expected), f"step {i}: {events}"
    return s


def cases(*all_cases: Case) -> Callable[[Callable[[Case], None]], Callable[[Case], None]]:
    mark: Callable[[Callable[[Case], None]], Callable[[Case], None]] = pytest.mark.parametrize(
        "case", all_cases, ids=[c.id for c in all_cases]
    )
    return mark


def half_busy(s: Scheduler, *names: str, t: float = 0.0) -> None:
    """Leave GPUs 0-3 of each named node busy with a long job `hold-<node>`, 4-7 free.

    Best fit fills the fuller node first and the lowest index among equals, so pairs of 4-GPU
    jobs submitted in turn fill the nodes in order (0-3, then 4-7); then the second ones end.
    """
    for name in names:
        s.handle(*submit(job(f"hold-{name}", 4), job(f"tmp-{name}", 4), t=t))
    for name in names:
        s.handle(JobFinished(t, f"tmp-{name}", True))
    for name in names:
        placement = s.job(f"hold-{name}").placement
        assert placement is not None and placement.gpus_by_node() == {name: LOW}


def two_steps(name: str, where: dict[str, tuple[int, ...]]) -> list[Step]:
    """Submitted and started at once."""
    return [queued(name), *started(name, where)]


# ---------------------------------------------------------------- gang admission


@cases(
    Case(
        "2x8 on two empty dgx1 nodes",
        cluster(*nodes(DGX1, 2)),
        [(submit(job("g", 8, workers=2)), two_steps("g", {"n0": ALL8, "n1": ALL8}))],
    ),
    Case(
        # 3 workers x 4 GPUs: one whole node (two workers) and half of the other.
        "3x4 on two empty dgx1 nodes",
        cluster(*nodes(DGX1, 2)),
        [(submit(job("g", 4, workers=3)), two_steps("g", {"n0": ALL8, "n1": LOW}))],
    ),
    Case(
        # 12 GPUs are free in all, the gang needs 16: it waits whole, holding nothing, and
        # starts at once when the 4-GPU job ends.
        "a gang that does not fit only becomes pending",
        cluster(*nodes(DGX1, 2)),
        [
            (submit(job("a", 4)), two_steps("a", {"n0": LOW})),
            (submit(job("g", 8, workers=2), t=1), [queued("g")]),
            (
                [JobFinished(2, "a", True)],
                [moved("a", "running", "succeeded"), *started("g", {"n0": ALL8, "n1": ALL8})],
            ),
        ],
    ),
)
def test_gang_admission(case: Case) -> None:
    play(case)


def test_a_waiting_gang_holds_nothing() -> None:
    s = scheduler(DGX1, 2)
    s.handle(*submit(job("a", 4)))
    assert project(s.handle(*submit(job("g", 8, workers=2), t=1))) == [queued("g")]
    view = s.job("g")
    assert (view.state, view.placement) == (JobState.PENDING, None)
    assert set(s.books.owner.values()) == {"a"}
    assert s.books.capacity.free == [0b11110000, 0b11111111]
    assert s.books.queues["default"].used == 4


# ---------------------------------------------------------------- topology-aware choice


@cases(
    Case(
        # DGX-1 hybrid cube mesh: GPUs 0-3 are joined by NVLinks all round (0-1 NV1, 1-2 NV2,
        # 2-3 NV2, 3-0 NV2): a ring of 25 GB/s, the best any four GPUs give.
        "4 GPUs on dgx1: an NVLink quad",
        cluster(node("n0", DGX1)),
        [(submit(job("q", 4)), two_steps("q", {"n0": LOW}))],
    ),
    Case(
        # 0-3 is a bonded pair (NV2, 50 GB/s); it leaves 1-2, 4-7 and 5-6 as NV2 pairs too.
        "2 GPUs on dgx1: a bonded NVLink pair",
        cluster(node("n0", DGX1)),
        [(submit(job("p", 2)), two_steps("p", {"n0": (0, 3)}))],
    ),
    Case(
        # Two GPUs under one PCIe switch (PIX, 16 GB/s) rather than across switches or sockets.
        "2 GPUs on pcie8: a PIX pair",
        cluster(node("n0", PCIE8)),
        [(submit(job("p", 2)), two_steps("p", {"n0": (0, 1)}))],
    ),
    Case(
        # Both quads ring at 25 GB/s on either node: best fit takes the fuller node.
        "rings tie: the fuller node",
        cluster(*nodes(DGX1, 2)),
        [
            (submit(job("a", 4)), two_steps("a", {"n0": LOW})),
            (submit(job("b", 4)), two_steps("b", {"n0": HIGH})),
        ],
    ),
    Case(
        # The ring counts before fit: the 4-GPU PCIe node would be the tighter fit, but its
        # four GPUs ring at 6 GB/s (across sockets, SYS); the DGX-1 gives an NVLink quad.
        "ring before fit",
        cluster(node("n0", PCIE4), node("n1", DGX1)),
        [(submit(job("q", 4)), two_steps("q", {"n1": LOW}))],
    ),
)
def test_topology_choice(case: Case) -> None:
    play(case)


@pytest.mark.parametrize(
    ("kind", "gpus", "ring"),
    [(DGX1, 4, 25.0), (DGX1, 2, 50.0), (PCIE8, 2, 16.0), (PCIE8, 4, 12.0), (PCIE4, 2, 10.0)],
)
def test_ring_of_the_chosen_gpus(kind: str, gpus: int, ring: float) -> None:
    s = scheduler(kind)
    s.handle(*submit(job("j", gpus)))
    placement = s.job("j").placement
    assert placement is not None
    assert placement.bandwidth_gbps == ring


def test_multi_node_fewest_nodes() -> None:
    # n0 and n1 have 4 GPUs free each, n2 all 8: 3x4 fits on two nodes (n2 and one half-free
    # node) rather than on three; of the two half-free nodes, the lower index.
    s = scheduler(cluster(*nodes(DGX1, 3)))
    half_busy(s, "n0", "n1")
    got = project(s.handle(*submit(job("m", 4, workers=3), t=1)))
    assert got == two_steps("m", {"n0": HIGH, "n2": ALL8})


@cases(
    Case(
        # Two nodes either way; a0 plus c0 would be the better fit (a0 is half busy), but it
        # crosses racks: c0 and c1 share one.
        "same rack over cross-rack",
        cluster(node("a0", rack="ra"), node("c0", rack="rc"), node("c1", rack="rc")),
        [
            (submit(job("x", 4)), two_steps("x", {"a0": LOW})),
            (submit(job("m", 4, workers=3)), two_steps("m", {"c0": ALL8, "c1": LOW})),
        ],
    ),
    Case(
        "cross-rack when no rack can",
        racks(DGX1, {"ra": 1, "rb": 1}),
        [(submit(job("m", 8, workers=2)), two_steps("m", {"ra0": ALL8, "rb0": ALL8}))],
    ),
)
def test_multi_node_network_tier(case: Case) -> None:
    play(case)


@pytest.mark.parametrize(
    ("label", "gpus"),
    [(None, (0, 3)), ("topology", (0, 3)), ("default", (0, 1))],
)
def test_schedule_label(label: str | None, gpus: tuple[int, ...]) -> None:
    # On a `default` node GPUs are taken in index order, ignoring the NVLink matrix.
    s = scheduler(DGX1)
    assert s.handle(NodeLabelled(0, "n0", SCHEDULE_LABEL, "default")) == []
    assert s.handle(NodeLabelled(0, "n0", SCHEDULE_LABEL, label)) == []
    assert project(s.handle(*submit(job("p", 2)))) == two_steps("p", {"n0": gpus})


# ---------------------------------------------------------------- locality


def test_node_locality_never_splits() -> None:
    s = scheduler(DGX1, 2)
    half_busy(s, "n0", "n1")
    # 8 GPUs are free, 4 on each node: a `node` gang waits ...
    pinned = job("pinned", 4, workers=2, locality=LocalityRule(Locality.NODE))
    assert project(s.handle(*submit(pinned, t=1))) == [queued("pinned")]
    assert "needs 8 GPUs on one node; the best node has 4 free" in s.explain("pinned")
    # ... however long it waits ...
    assert s.handle(Tick(10_000)) == []
    # ... until one node has room for the whole gang.
    got = project(s.handle(JobFinished(10_001, "hold-n1", True)))
    assert got == [moved("hold-n1", "running", "succeeded"), *started("pinned", {"n1": ALL8})]


def test_any_locality_splits_at_once_where_the_policy_lets_gangs_split() -> None:
    # extra_nodes=None: any split its locality accepts.
    s = scheduler(DGX1, 2, extra_nodes=None)
    half_busy(s, "n0", "n1")
    got = project(s.handle(*submit(job("loose", 4, workers=2), t=1)))
    assert got == two_steps("loose", {"n0": HIGH, "n1": HIGH})


def test_a_gang_that_fits_on_one_node_waits_for_one_by_default() -> None:
    # extra_nodes=0: the free halves of two nodes would split it, so it waits for a whole node.
    s = scheduler(DGX1, 2)
    half_busy(s, "n0", "n1")
    assert project(s.handle(*submit(job("loose", 4, workers=2), t=1))) == [queued("loose")]
    reason = s.job("loose").reason
    assert reason == (
        "needs 8 GPUs on one node (the fewest that hold it, plus 0); the best node has 4 free; "
        "reserved n0 GPUs 0,1,2,3,4,5,6,7, held by hold-n0; start time unknown: hold-n0 has no "
        "time limit"
    ), reason
    # Its own reservation does not keep it off another node that frees up first.
    got = project(s.handle(JobFinished(5, "hold-n1", True)))
    assert got == [moved("hold-n1", "running", "succeeded"), *started("loose", {"n1": ALL8})]


def test_a_gang_spans_the_fewest_nodes_that_could_hold_it_plus_extra_nodes() -> None:
    # 16 GPUs in 4-GPU workers fit on 2 DGX-1s: with every node half busy they would take 4.
    # extra_nodes=1 allows 3, so it waits; extra_nodes=2 allows 4, so it starts.
    for extra, starts in ((1, False), (2, True)):
        s = scheduler(DGX1, 4, extra_nodes=extra)
        half_busy(s, "n0", "n1", "n2", "n3")
        got = project(s.handle(*submit(job("wide", 4, workers=4), t=1)))
        if starts:
            where = {"n0": HIGH, "n1": HIGH, "n2": HIGH, "n3": HIGH}
            assert got == two_steps("wide", where)
        else:
            assert got == [queued("wide")]
            assert (
                "on at most 3 node(s) (the fewest that hold it, 2, plus 1)" in s.job("wide").reason
            )


def test_a_gang_waiting_for_the_fewest_nodes_starts_once_gpu_failures_make_them_more() -> None:
    # Submitted while one DGX-1 could hold it, the gang waits for a whole node; once a GPU has
    # failed on each node, two nodes are the fewest that could, and it starts on their free
    # GPUs (the limit is worked out again when what a node can give changes).
    s = scheduler(DGX1, 2)
    for name in ("n0", "n1"):  # GPUs 0-1 of each node busy
        s.handle(*submit(job(f"hold-{name}", 2), job(f"tmp-{name}", 6)))
    for name in ("n0", "n1"):
        s.handle(JobFinished(0, f"tmp-{name}", True))
    got = project(s.handle(*submit(job("eight", 1, workers=8), t=1)))
    assert got == [queued("eight")]
    assert project(s.handle(GpuHealth(2, "n0", 7, False))) == []
    s.handle(GpuHealth(3, "n1", 7, False))
    eight = s.job("eight")
    assert eight.state is JobState.RUNNING and eight.placement is not None
    assert sorted(eight.placement.gpus_by_node()) == ["n0", "n1"]


def test_a_reservation_takes_no_more_nodes_than_the_split_limit() -> None:
    # A failed GPU on n0 and n1: 16 GPUs fit on two nodes only as n2 and n3. The first nodes
    # to free up are n0, n1 and n2 (22 GPUs on three nodes, more than the limit of two), so the
    # gang reserves n2 and n3, which it can start on, and starts there when they free up.
    s = scheduler(DGX1, 4)
    for name in ("n0", "n1"):
        s.handle(GpuHealth(0, name, 7, False))
    for name, gpus, limit in (("h0", 7, 100), ("h1", 7, 200), ("h2", 8, 300), ("h3", 8, 400)):
        s.handle(*submit(job(name, gpus, limit_s=limit)))
    where = {}
    for i in range(4):
        placement = s.job(f"h{i}").placement
        assert placement is not None
        where[f"h{i}"] = list(placement.gpus_by_node())
    assert where == {"h0": ["n0"], "h1": ["n1"], "h2": ["n2"], "h3": ["n3"]}
    assert project(s.handle(*submit(job("big", 1, workers=16), t=1))) == [queued("big")]
    reservation = s.books.reservation
    assert reservation is not None and reservation.job == "big"
    assert sorted(s.books.capacity.nodes[i].name for i in reservation.gpus) == ["n2", "n3"]
    for name, t in (("h0", 100), ("h1", 200), ("h2", 300)):
        s.handle(JobFinished(t, name, True))
    assert s.job("big").state is JobState.PENDING
    got = project(s.handle(JobFinished(400, "h3", True)))
    assert got == [moved("h3", "running", "succeeded"), *started("big", {"n2": ALL8, "n3": ALL8})]


def test_a_wider_locality_never_tightens_the_split_limit() -> None:
    # Rack a: a DGX-1 and two 4-GPU nodes; rack b: a DGX-1, busy. Within rack a, 16 GPUs need
    # three nodes at fewest; across racks two DGX-1 would do. A gang that may go anywhere is
    # held to each tier's own limit: three nodes of one rack are allowed, as they were for a
    # gang held to a rack.
    s = scheduler(
        cluster(
            node("b0", DGX1, rack="b"),
            node("a0", DGX1, rack="a"),
            node("a1", PCIE4, rack="a"),
            node("a2", PCIE4, rack="a"),
        )
    )
    s.handle(*submit(job("busy", 8)))
    busy = s.job("busy").placement
    assert busy is not None and list(busy.gpus_by_node()) == ["b0"]
    got = project(s.handle(*submit(job("wide", 1, workers=16), t=1)))
    assert got == two_steps("wide", {"a0": ALL8, "a1": (0, 1, 2, 3), "a2": (0, 1, 2, 3)})


def test_a_split_is_judged_in_its_own_domain_not_by_the_roomiest_nodes_anywhere() -> None:
    # A gang of 12 held to one rack: rack b's DGX-1s are half busy, a0 (rack a) is free but
    # alone in its rack. The two roomiest nodes (a0 and a half of rack b) would hold it, but
    # in no one rack: rack b needs three nodes, one more than the fewest (two) that could hold
    # it there, so it waits.
    s = scheduler(
        cluster(
            node("b0", DGX1, rack="b"),
            node("b1", DGX1, rack="b"),
            node("b2", DGX1, rack="b"),
            node("a0", DGX1, rack="a"),
        )
    )
    half_busy(s, "b0", "b1", "b2")
    gang = job("g", 1, workers=12, locality=LocalityRule(Locality.RACK))
    assert project(s.handle(*submit(gang, t=1))) == [queued("g")]
    assert s.job("g").reason.startswith(
        "needs 12 workers x 1 GPUs on at most 2 node(s) (the fewest that hold it, 2, plus 0); "
        "the fewest with room now are 3"
    ), s.job("g").reason


def test_cpus_count_in_the_fewest_nodes() -> None:
    # Each node's 8 cores hold four workers of 2 cores: 8 workers need two nodes even empty,
    # so the gang starts split over both on an idle cluster.
    machine = Hardware("V100", 32 * 2**30, 8000, None)
    s = scheduler(cluster(*(Node(f"n{i}", preset(DGX1), hardware=machine) for i in range(2))))
    s.handle(*submit(job("eight", 1, workers=8, cpus=2000)))
    eight = s.job("eight")
    assert eight.state is JobState.RUNNING and eight.placement is not None
    assert {n: len(g) for n, g in eight.placement.gpus_by_node().items()} == {"n0": 4, "n1": 4}


def test_failed_gpus_and_cordons_count_in_the_fewest_nodes() -> None:
    # A failed GPU on each of three nodes: 8 GPUs now need two of them, so the fewest is 2 and
    # the gang starts split (not held to one node it can never have). A node cordoned with all
    # its GPUs free is no more room: it does not make the fewest 1 again.
    s = scheduler(DGX1, 4)
    for name in ("n0", "n1", "n2"):
        s.handle(GpuHealth(0, name, 7, False))
    s.handle(NodeCordoned(0, "n3", True))
    got = project(s.handle(*submit(job("eight", 1, workers=8), t=1)))
    assert got == two_steps("eight", {"n0": (0, 1, 2, 3, 4, 5, 6), "n1": (0,)})


NODE_THEN_RACK = LocalityRule(Locality.NODE, Locality.RACK, 600)


def test_locality_relaxes_after_waiting() -> None:
    s = scheduler(racks(DGX1, {"ra": 2, "rb": 1}), extra_nodes=None)
    half_busy(s, "ra0", "ra1", "rb0")
    patient = job("patient", 4, workers=2, locality=NODE_THEN_RACK)
    assert project(s.handle(*submit(patient))) == [queued("patient")]
    assert s.next_due() == 600  # a driver without a clock of its own ticks then
    assert s.handle(Tick(599)) == []
    # After 600 s it takes the free halves of two nodes of one rack (rb0 has no rack-mate).
    got = project(s.handle(Tick(600)))
    assert got == started("patient", {"ra0": HIGH, "ra1": HIGH})
    assert s.next_due() is None


def test_relaxed_locality_still_bounds_the_tier() -> None:
    # Each rack has one half-free node: relaxing to `rack` does not allow two racks.
    s = scheduler(racks(DGX1, {"ra": 1, "rb": 1}))
    half_busy(s, "ra0", "rb0")
    patient = job("patient", 4, workers=2, locality=NODE_THEN_RACK)
    assert project(s.handle(*submit(patient))) == [queued("patient")]
    assert s.handle(Tick(5_000)) == []
    assert s.job("patient").state is JobState.PENDING


# ---------------------------------------------------------------- rejection


@pytest.mark.parametrize(
    ("where", "spec", "reason"),
    [
        pytest.param(
            cluster(*nodes(DGX1, 4)),
            job("fat", 16),
            "a worker needs 16 GPUs; the largest node has 8",
            id="worker larger than any node",
        ),
        pytest.param(
            cluster(*nodes(DGX1, 2)),
            job("wide", 8, workers=2, locality=LocalityRule(Locality.NODE)),
            "needs 2 workers x 8 GPUs within one node; at most 1 fit",
            id="node locality, two nodes' worth",
        ),
        pytest.param(
            racks(DGX1, {"ra": 1, "rb": 1}),
            job("wide", 8, workers=2, locality=LocalityRule(Locality.RACK)),
            "needs 2 workers x 8 GPUs within one rack; at most 1 fit",
            id="rack locality, racks of one node",
        ),
        pytest.param(
            racks(DGX1, {"ra": 1, "rb": 1}),
            job("wide", 8, workers=2, locality=NODE_THEN_RACK),
            "within one rack",
            id="even the relaxed locality cannot",
        ),
        pytest.param(
            cluster(*nodes(DGX1, 2)),
            job("huge", 8, workers=3),
            "needs 3 workers x 8 GPUs within the cluster; at most 2 fit",
            id="more than the cluster",
        ),
        pytest.param(
            # 3 GPUs per worker: a PCIe node of 4 holds one worker, not two.
            cluster(*nodes(PCIE4, 1)),
            job("odd", 3, workers=2),
            "at most 1 fit",
            id="workers do not pack into a node",
        ),
    ],
)
def test_rejected_at_submission(where: Cluster, spec: Any, reason: str) -> None:
    s = scheduler(where)
    assert project(s.handle(*submit(spec))) == [moved(spec.name, None, "rejected")]
    view = s.job(spec.name)
    assert view.state is JobState.REJECTED
    assert reason in view.reason
    assert view.reason.startswith("rejected: ")
    assert list(s.pending()) == []
    assert s.books.capacity.total_free == where.gpus


# ---------------------------------------------------------------- reservation and backfill


def reservation_case(short_limit: float) -> Case:
    """n0 is a DGX-1, n1 a 4-GPU PCIe node where `big` (8 GPUs) can never run."""
    return Case(
        f"backfill limit {short_limit:g}",
        cluster(node("n0", DGX1), node("n1", PCIE4)),
        [
            # The quad ring (25 GB/s) beats anything on the PCIe node.
            (submit(job("a", 4, limit_s=100)), two_steps("a", {"n0": LOW})),
            # big reserves n0, free by t=100 when a's limit runs out.
            (submit(job("big", 8), t=1), [queued("big")]),
            # Off the reservation: s1 would rather have n0's quad, but takes the PCIe node.
            (submit(job("s1", 4), t=2), two_steps("s1", {"n1": LOW})),
            # No limit, and only the reserved GPUs are left: it waits.
            (submit(job("s2", 4), t=3), [queued("s2")]),
            # Ends by t=10+90=100, when the reservation falls due: it may backfill (and 91 not).
            (
                submit(job("s3", 4, limit_s=short_limit), t=10),
                two_steps("s3", {"n0": HIGH}) if short_limit <= 90 else [queued("s3")],
            ),
        ],
    )


@pytest.mark.parametrize("short_limit", [50, 90, 91])
def test_reservation_and_backfill(short_limit: float) -> None:
    s = play(reservation_case(short_limit))
    assert "reserved n0 GPUs 0,1,2,3,4,5,6,7, held by a; expected to start by t=100" in s.explain(
        "big"
    )
    assert "outside the GPUs reserved for big; waiting behind it" in s.explain("s2")
    backfilled = short_limit <= 90
    # Started at 10, s3 has run past a limit of 50 by 95: the limit is enforced then.
    overran = backfilled and 10 + short_limit <= 95
    # a ends: its GPUs stay kept for big, although s2 could use them.
    assert project(s.handle(JobFinished(95, "a", True))) == (
        [moved("a", "running", "succeeded")] + (stopping("s3", "time-limit") if overran else [])
        if backfilled
        # Without the backfilled job, n0 is whole again: big starts.
        else [moved("a", "running", "succeeded"), *started("big", {"n0": ALL8})]
    )
    if overran:
        got = project(s.handle(JobStopped(100, "s3")))
        assert got == [moved("s3", "stopping", "timed-out"), *started("big", {"n0": ALL8})]
    elif backfilled:
        got = project(s.handle(JobFinished(100, "s3", True)))
        assert got == [moved("s3", "running", "succeeded"), *started("big", {"n0": ALL8})]
    # The waiting jobs get their turn after big, in submission order.
    got = project(s.handle(JobFinished(200, "big", True)))
    expected = [moved("big", "running", "succeeded"), *started("s2", {"n0": LOW})]
    if not backfilled:
        expected += started("s3", {"n0": HIGH})
    assert got == expected


def test_no_starvation_with_declared_limits() -> None:
    # A stream of small jobs that would end after the reservation never takes big's GPUs.
    s = scheduler(DGX1)
    s.handle(*submit(job("a", 4, limit_s=50)))
    assert project(s.handle(*submit(job("big", 8), t=1))) == [queued("big")]
    for i in range(4):
        spec = job(f"small{i}", 1, limit_s=100)
        assert project(s.handle(*submit(spec, t=2 + i))) == [queued(spec.name)]
    got = project(s.handle(JobFinished(20, "a", True)))
    assert got == [moved("a", "running", "succeeded"), *started("big", {"n0": ALL8})]


def test_no_starvation_without_limits() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("a", 4)))
    assert project(s.handle(*submit(job("big", 8), t=1))) == [queued("big")]
    # Reality: small starts on GPU 4 ("best placement now"), inside big's reservation.
    assert project(s.handle(*submit(job("small", 1), t=2))) == [queued("small")]


# ---------------------------------------------------------------- queues, reclaim, priorities

B_JOBS = [job(name, 2, queue="B") for name in ("b1", "b3", "b2", "b4")]
# On pcie8 these take, in turn, the PIX pairs (0,1), (2,3), (4,5), (6,7) (rule 2 keeps the
# other socket whole for a 4-GPU job, so the second pair is (2,3)).
B_PLACED = [
    *two_steps("b1", {"n0": (0, 1)}),
    *two_steps("b3", {"n0": (2, 3)}),
    *two_steps("b2", {"n0": (4, 5)}),
    *two_steps("b4", {"n0": (6, 7)}),
]
CKPT = Checkpoint("SIGUSR1", 5.0)


@cases(
    Case(
        # Queue B borrows the whole node. A is within its guarantee, so it reclaims: any two of
        # B's jobs give it 4 GPUs, but only a pair on one socket rings at 12 GB/s (PHB) rather
        # than 6 (SYS). The first pair in name order, b1+b2, crosses sockets: b1+b3 does not.
        "reclaim: the victims that give the best ring",
        cluster(node("n0", PCIE8)),
        [
            (submit(*B_JOBS), B_PLACED),
            (
                submit(job("a", 4, queue="A"), t=1),
                [queued("a"), *stopping("b1", "preempt"), *stopping("b3", "preempt")],
            ),
            ([JobStopped(2, "b1")], [moved("b1", "stopping", "pending")]),
            (
                [JobStopped(3, "b3")],
                [moved("b3", "stopping", "pending"), *started("a", {"n0": LOW})],
            ),
            # The victims wait; nothing frees GPUs for them.
            ([Tick(4)], []),
        ],
        queues={"A": 4},
    ),
    Case(
        # Same ring either way (b2+b4 share socket 1): the checkpointable pair goes.
        "reclaim: checkpointable victims first",
        cluster(node("n0", PCIE8)),
        [
            (
                submit(
                    job("b1", 2, queue="B"),
                    job("b3", 2, queue="B"),
                    job("b2", 2, queue="B", checkpoint=CKPT),
                    job("b4", 2, queue="B", checkpoint=CKPT),
                ),
                B_PLACED,
            ),
            (
                submit(job("a", 4, queue="A"), t=1),
                [queued("a"), *stopping("b2", "preempt"), *stopping("b4", "preempt")],
            ),
            ([JobStopped(2, "b4")], [moved("b4", "stopping", "pending")]),
            (
                [JobStopped(3, "b2")],
                [moved("b2", "stopping", "pending"), *started("a", {"n0": HIGH})],
            ),
        ],
        queues={"A": 4},
    ),
    Case(
        "no reclaim beyond the guarantee",
        cluster(node("n0", PCIE8)),
        [(submit(*B_JOBS), B_PLACED), (submit(job("a", 4, queue="A"), t=1), [queued("a")])],
        queues={"A": 0},
    ),
    Case(
        "no reclaim from a queue within its own guarantee",
        cluster(node("n0", PCIE8)),
        [(submit(*B_JOBS), B_PLACED), (submit(job("a", 4, queue="A"), t=1), [queued("a")])],
        queues={"A": 4, "B": 8},
    ),
    Case(
        "no reclaim with preemption off",
        cluster(node("n0", PCIE8)),
        [(submit(*B_JOBS), B_PLACED), (submit(job("a", 4, queue="A"), t=1), [queued("a")])],
        queues={"A": 4},
        policy={"preemption": False},
    ),
    Case(
        # A guarantee configured by event works as one given at construction.
        "QueueConfigured before the job",
        cluster(node("n0", PCIE8)),
        [
            ([QueueConfigured(0, "A", 4)], []),
            (submit(*B_JOBS), B_PLACED),
            (
                submit(job("a", 4, queue="A"), t=1),
                [queued("a"), *stopping("b1", "preempt"), *stopping("b3", "preempt")],
            ),
        ],
    ),
)
def test_reclaim(case: Case) -> None:
    s = play(case)
    for name in ("b1", "b2", "b3", "b4"):
        assert s.job(name).state in (JobState.RUNNING, JobState.STOPPING, JobState.PENDING)


def test_preempt_signal_follows_the_checkpoint_contract() -> None:
    s = scheduler(PCIE8, queues={"A": 4})
    s.handle(*submit(job("b1", 4, queue="B", checkpoint=CKPT), job("b2", 4, queue="B")))
    stops = [a for a in s.handle(*submit(job("a", 4, queue="A"), t=1)) if isinstance(a, StopJob)]
    assert [(a.job, a.kind, a.signal, a.grace_s) for a in stops] == [
        ("b1", StopKind.PREEMPT, "SIGUSR1", 5.0)
    ]
    assert "preempted for a" in stops[0].reason
    assert "preempting b1 for it" in s.explain("a")


def test_work_that_cannot_checkpoint_is_preempted_only_to_give_back_borrowed_gpus() -> None:
    """Issue 16: `lo` (queue A, no checkpoint) would lose its work if stopped. A job of higher
    priority in A does not preempt it; queue B, within its guarantee, takes back the GPUs A
    borrowed beyond its own (none)."""
    s = scheduler(DGX1, queues={"A": 0, "B": 8})
    s.handle(*submit(job("lo", 8, queue="A")))
    assert s.job("lo").state is JobState.RUNNING
    actions = s.handle(*submit(job("hi", 4, queue="A", priority=5), t=1))
    assert not [a for a in actions if isinstance(a, StopJob)]
    assert s.job("lo").state is JobState.RUNNING and s.job("hi").state is JobState.PENDING
    stops = [a for a in s.handle(*submit(job("b", 4, queue="B"), t=2)) if isinstance(a, StopJob)]
    assert [(a.job, a.kind, a.signal) for a in stops] == [("lo", StopKind.PREEMPT, "SIGTERM")]
    assert "preempted for b" in stops[0].reason


def test_preempted_victims_are_pending_again() -> None:
    s = scheduler(PCIE8, queues={"A": 4})
    s.handle(*submit(*B_JOBS))
    s.handle(*submit(job("a", 4, queue="A"), t=1))
    s.handle(JobStopped(2, "b1"), JobStopped(2, "b3"))
    assert [s.job(n).state for n in ("a", "b1", "b2", "b3", "b4")] == [
        JobState.RUNNING,
        JobState.PENDING,
        JobState.RUNNING,
        JobState.PENDING,
        JobState.RUNNING,
    ]
    assert s.job("b1").placement is None
    assert "requeued after preempt" in s.explain("b1")
    assert s.books.queues["A"].used == 4 and s.books.queues["B"].used == 4


@cases(
    Case(
        # Both lower-priority quads give a 25 GB/s ring; the lowest priority goes.
        "higher priority preempts the lowest priority",
        cluster(node("n0", DGX1)),
        [
            (
                submit(
                    job("lo0", 4, priority=0, checkpoint=CKPT),
                    job("lo1", 4, priority=1, checkpoint=CKPT),
                ),
                [*two_steps("lo0", {"n0": LOW}), *two_steps("lo1", {"n0": HIGH})],
            ),
            (
                submit(job("hi", 4, priority=5), t=1),
                [queued("hi"), *stopping("lo0", "preempt")],
            ),
            (
                [JobStopped(2, "lo0")],
                [moved("lo0", "stopping", "pending"), *started("hi", {"n0": LOW})],
            ),
        ],
    ),
    Case(
        # lo0 would lose its work: it goes only to give back GPUs its queue borrowed.
        "higher priority does not preempt work that cannot checkpoint",
        cluster(node("n0", DGX1)),
        [
            (submit(job("lo0", 8, priority=0)), two_steps("lo0", {"n0": ALL8})),
            (submit(job("hi", 4, priority=5), t=1), [queued("hi")]),
        ],
    ),
    Case(
        "equal priority does not preempt",
        cluster(node("n0", DGX1)),
        [
            (submit(job("lo0", 8, priority=3)), two_steps("lo0", {"n0": ALL8})),
            (submit(job("hi", 4, priority=3), t=1), [queued("hi")]),
        ],
    ),
    Case(
        "preempt_lower_priority off",
        cluster(node("n0", DGX1)),
        [
            (submit(job("lo0", 8, priority=0)), two_steps("lo0", {"n0": ALL8})),
            (submit(job("hi", 4, priority=5), t=1), [queued("hi")]),
        ],
        policy={"preempt_lower_priority": False},
    ),
)
def test_priority_preemption(case: Case) -> None:
    play(case)


@pytest.mark.parametrize(("guarantee", "order"), [(8, ["a", "b"]), (0, ["b", "a"])])
def test_within_guarantee_goes_before_priority(guarantee: int, order: list[str]) -> None:
    # x (queue C) holds the node. b (queue B, priority 5) and then a (queue A, priority 0)
    # wait; when x ends, a goes first if A's guarantee covers it, else b by priority.
    s = scheduler(DGX1, queues={"A": 0, "B": 0}, preemption=False)
    assert s.handle(QueueConfigured(0, "A", guarantee)) == []
    s.handle(*submit(job("x", 8, queue="C")))
    s.handle(*submit(job("b", 8, queue="B", priority=5), t=1))
    s.handle(*submit(job("a", 8, queue="A"), t=2))
    assert [r.name for r in s.pending()] == order
    got = project(s.handle(JobFinished(3, "x", True)))
    assert got == [moved("x", "running", "succeeded"), *started(order[0], {"n0": ALL8})]
    assert s.job(order[1]).state is JobState.PENDING


# ---------------------------------------------------------------- spread / pack


@pytest.mark.parametrize(
    ("busy", "single_gpu", "where"),
    [
        # n0 has 0-2 busy (switches 0 and 1, socket 0). Spread: socket 1 of n0 has no busy
        # neighbour, so the empty n1 is kept whole for a gang. Pack: next to the busy ones.
        (3, "spread", {"n0": (4,)}),
        (3, "pack", {"n0": (3,)}),
        (3, "adaptive", {"n0": (4,)}),
        # n0 has 0-5 busy: its free GPUs share socket 1 with busy ones, so spread opens n1.
        (6, "spread", {"n1": (0,)}),
        (6, "pack", {"n0": (6,)}),
        (6, "adaptive", {"n1": (0,)}),
    ],
)
def test_one_gpu_mode(busy: int, single_gpu: str, where: dict[str, tuple[int, ...]]) -> None:
    s = scheduler(PCIE8, 2, single_gpu=single_gpu)
    s.handle(*submit(job("w", busy)))
    assert project(s.handle(*submit(job("one", 1), t=1))) == two_steps("one", where)


@pytest.mark.parametrize(
    ("single_gpu", "order"),
    [
        # Spread: a new PCIe switch each time, alternating sockets.
        ("spread", [0, 4, 2, 6, 1, 5, 3, 7]),
        # Pack: beside the busy GPUs, one socket first.
        ("pack", [0, 1, 2, 3, 4, 5, 6, 7]),
    ],
)
def test_one_gpu_sequence_on_pcie8(single_gpu: str, order: list[int]) -> None:
    s = scheduler(PCIE8, single_gpu=single_gpu)
    got = project(s.handle(*submit(*[job(f"j{i}") for i in range(8)])))
    expected: list[Step] = []
    for i, gpu in enumerate(order):
        expected += two_steps(f"j{i}", {"n0": (gpu,)})
    assert got == expected


def test_adaptive_spread_pack_with_hysteresis() -> None:
    # Two pcie8 nodes, 16 GPUs; pack at >= 70% allocated, spread again at <= 50%.
    # The mode is chosen at the start of each cycle, from the load before it.
    steps: list[tuple[list[Event], list[Step], Mode]] = [
        # w0 fills n0; w1 takes a 3-GPU ring (12 GB/s) on socket 0 of n1. 11/16 allocated.
        (
            [*submit(job("w0", 8), job("w1", 3))],
            [*two_steps("w0", {"n0": ALL8}), *two_steps("w1", {"n1": (0, 1, 2)})],
            Mode.SPREAD,
        ),
        # 69% < 70%: spread, to socket 1, away from busy GPUs. 12/16.
        (submit(job("s1", 1), t=1), two_steps("s1", {"n1": (4,)}), Mode.SPREAD),
        # 75%: pack. GPUs 3 and 5 both leave a PIX pair free; 3 sits beside w1 (its switch-mate
        # 2 and three busy GPUs in its socket). 13/16.
        (submit(job("s2", 1), t=2), two_steps("s2", {"n1": (3,)}), Mode.PACK),
        # w1 ends: 10/16 = 62.5% is below 70% but above 50%: still packing.
        ([JobFinished(3, "w1", True)], [moved("w1", "running", "succeeded")], Mode.PACK),
        # Pack: GPU 2 (switch-mate 3 busy) rather than 0, 1, 6, 7 that spreading would take.
        (submit(job("s3", 1), t=4), two_steps("s3", {"n1": (2,)}), Mode.PACK),
        # w0 ends: 3/16: spread again, onto the empty node.
        ([JobFinished(5, "w0", True)], [moved("w0", "running", "succeeded")], Mode.SPREAD),
        (submit(job("s4", 1), t=6), two_steps("s4", {"n0": (0,)}), Mode.SPREAD),
    ]
    s = scheduler(PCIE8, 2)
    for i, (events, expected, mode) in enumerate(steps):
        assert project(s.handle(*events)) == expected, f"step {i}"
        assert s.mode is mode, f"step {i}"


# ---------------------------------------------------------------- failures


@cases(
    Case(
        "a worker dies: the gang stops and fails; the waiting job starts",
        cluster(*nodes(DGX1, 2)),
        [
            (submit(job("f", 8, workers=2)), two_steps("f", {"n0": ALL8, "n1": ALL8})),
            (submit(job("w", 4), t=1), [queued("w")]),
            ([WorkerFailed(2, "f", 1, "oom")], stopping("f", "failure")),
            # Its other workers die too: nothing more to do.
            ([WorkerFailed(2, "f", 0, "killed")], []),
            ([JobStopped(3, "f")], [moved("f", "stopping", "failed"), *started("w", {"n0": LOW})]),
        ],
    ),
    Case(
        "restart on failure, up to max_restarts",
        cluster(node("n0", DGX1)),
        [
            (
                submit(job("r", 4, restart=RestartPolicy.ON_FAILURE, max_restarts=1)),
                two_steps("r", {"n0": LOW}),
            ),
            ([WorkerFailed(1, "r", 0)], stopping("r", "failure")),
            (
                [JobStopped(2, "r")],
                [moved("r", "stopping", "pending"), *started("r", {"n0": LOW})],
            ),
            ([WorkerFailed(3, "r", 0)], stopping("r", "failure")),
            ([JobStopped(4, "r")], [moved("r", "stopping", "failed")]),
        ],
    ),
    Case(
        "a failed exit counts as a failure too",
        cluster(node("n0", DGX1)),
        [
            (
                submit(job("r", 4, restart=RestartPolicy.ON_FAILURE, max_restarts=1)),
                two_steps("r", {"n0": LOW}),
            ),
            (
                [JobFinished(1, "r", False, "exit 1")],
                [moved("r", "running", "pending"), *started("r", {"n0": LOW})],
            ),
            ([JobFinished(2, "r", False, "exit 1")], [moved("r", "running", "failed")]),
        ],
    ),
    Case(
        "a lost node stops its jobs; they fail or requeue; it comes back",
        cluster(*nodes(DGX1, 2)),
        [
            (
                submit(
                    job("a", 4),
                    job("b", 8),
                    job("c", 4, restart=RestartPolicy.ON_FAILURE),
                ),
                [
                    *two_steps("a", {"n0": LOW}),
                    *two_steps("b", {"n1": ALL8}),
                    *two_steps("c", {"n0": HIGH}),
                ],
            ),
            ([NodeRemoved(1, "n0")], [*stopping("a", "failure"), *stopping("c", "failure")]),
            ([JobStopped(2, "a")], [moved("a", "stopping", "failed")]),
            # Requeued, but no node has room.
            ([JobStopped(2, "c")], [moved("c", "stopping", "pending")]),
            ([NodeAdded(3, node("n0"))], started("c", {"n0": LOW})),
        ],
    ),
    Case(
        "a lost node stops a gang that spans it; the other node's GPUs free on JobStopped",
        cluster(*nodes(DGX1, 2)),
        [
            (submit(job("g", 4, workers=4)), two_steps("g", {"n0": ALL8, "n1": ALL8})),
            (submit(job("w", 8), t=1), [queued("w")]),
            ([NodeRemoved(2, "n0")], stopping("g", "failure")),
            ([JobStopped(3, "g")], [moved("g", "stopping", "failed"), *started("w", {"n1": ALL8})]),
        ],
    ),
    Case(
        "an unhealthy GPU stops its job and is not reused until healthy",
        cluster(node("n0", DGX1)),
        [
            (
                submit(job("a", 4), job("b", 4)),
                [*two_steps("a", {"n0": LOW}), *two_steps("b", {"n0": HIGH})],
            ),
            ([GpuHealth(1, "n0", 5, False)], stopping("b", "failure")),
            ([JobStopped(2, "b")], [moved("b", "stopping", "failed")]),
            # 4, 6 and 7 are free, 5 is not.
            (submit(job("c", 4), t=3), [queued("c")]),
            ([GpuHealth(4, "n0", 5, True)], started("c", {"n0": HIGH})),
        ],
    ),
    Case(
        # The free GPU 0 goes bad: an 8-GPU job waits (nothing can be reserved for it), and a
        # pair takes the NV2 pair 1-2 instead of 0-3. Healthy again, GPU 0 serves the 8-GPU job.
        "an unhealthy free GPU is left out",
        cluster(node("n0", DGX1)),
        [
            ([GpuHealth(0, "n0", 0, False)], []),
            ([GpuHealth(0, "n0", 0, False)], []),
            (submit(job("big", 8)), [queued("big")]),
            (submit(job("pair", 2), t=1), two_steps("pair", {"n0": (1, 2)})),
            ([GpuHealth(2, "n0", 0, True)], []),
            (
                [JobFinished(3, "pair", True)],
                [moved("pair", "running", "succeeded"), *started("big", {"n0": ALL8})],
            ),
        ],
    ),
    Case(
        # A node the cluster never had (another preset, another rack) takes the waiting job.
        "a new node takes a waiting job",
        cluster(node("n0", DGX1)),
        [
            (submit(job("a", 8), job("w", 8)), [*two_steps("a", {"n0": ALL8}), queued("w")]),
            ([NodeAdded(1, node("n5", PCIE8, rack="r9"))], started("w", {"n5": ALL8})),
        ],
    ),
)
def test_failures(case: Case) -> None:
    play(case)


def test_failure_reason_and_restart_count() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("r", 4, restart=RestartPolicy.ON_FAILURE, max_restarts=2)))
    s.handle(WorkerFailed(1, "r", 3, "NCCL timeout"), JobStopped(2, "r"))
    view = s.job("r")
    assert (view.state, view.restarts) == (JobState.RUNNING, 1)
    assert "restart 1 of 2" in s.explain("r")
    assert "worker 3 failed: NCCL timeout" in s.explain("r")


# ---------------------------------------------------------------- cancel and finish


@cases(
    Case(
        "cancel pending and running jobs; freed GPUs go at once",
        cluster(node("n0", DGX1)),
        [
            (
                submit(job("a", 8), job("b", 8), job("c", 2)),
                [*two_steps("a", {"n0": ALL8}), queued("b"), queued("c")],
            ),
            ([JobCancelled(1, "b")], [moved("b", "pending", "cancelled")]),
            ([JobCancelled(1, "a")], stopping("a", "cancel")),
            (
                [JobStopped(2, "a")],
                [moved("a", "stopping", "cancelled"), *started("c", {"n0": (0, 3)})],
            ),
        ],
    ),
    Case(
        "a job that finishes frees its GPUs for the waiting job in the same step",
        cluster(node("n0", DGX1)),
        [
            (submit(job("a", 8), job("w", 8)), [*two_steps("a", {"n0": ALL8}), queued("w")]),
            (
                [JobFinished(5, "a", True)],
                [moved("a", "running", "succeeded"), *started("w", {"n0": ALL8})],
            ),
        ],
    ),
    Case(
        "cancel while stopping for a failure: cancelled, not restarted",
        cluster(node("n0", DGX1)),
        [
            (submit(job("r", 8, restart=RestartPolicy.ON_FAILURE)), two_steps("r", {"n0": ALL8})),
            ([WorkerFailed(1, "r", 0)], stopping("r", "failure")),
            ([JobCancelled(2, "r")], []),
            ([JobStopped(3, "r")], [moved("r", "stopping", "cancelled")]),
        ],
    ),
    Case(
        "cancel a victim while it is being preempted: cancelled, not requeued",
        cluster(node("n0", DGX1)),
        [
            (submit(job("lo", 8, checkpoint=CKPT)), two_steps("lo", {"n0": ALL8})),
            (submit(job("hi", 8, priority=1), t=1), [queued("hi"), *stopping("lo", "preempt")]),
            ([JobCancelled(2, "lo")], []),
            (
                [JobStopped(3, "lo")],
                [moved("lo", "stopping", "cancelled"), *started("hi", {"n0": ALL8})],
            ),
        ],
    ),
    Case(
        # s ends after big's reservation falls due (t=100), so it waits; once big is cancelled
        # nothing is reserved and s starts in the same step.
        "cancel the job holding the reservation",
        cluster(node("n0", DGX1)),
        [
            (submit(job("a", 4, limit_s=100)), two_steps("a", {"n0": LOW})),
            (submit(job("big", 8), t=1), [queued("big")]),
            (submit(job("s", 4, limit_s=200), t=2), [queued("s")]),
            (
                [JobCancelled(3, "big")],
                [moved("big", "pending", "cancelled"), *started("s", {"n0": HIGH})],
            ),
        ],
    ),
    Case(
        # The victims are already stopping; with nobody to take their GPUs they start again.
        "cancel the job that preempted others",
        cluster(node("n0", PCIE8)),
        [
            (submit(*B_JOBS), B_PLACED),
            (
                submit(job("a", 4, queue="A"), t=1),
                [queued("a"), *stopping("b1", "preempt"), *stopping("b3", "preempt")],
            ),
            ([JobCancelled(2, "a")], [moved("a", "pending", "cancelled")]),
            (
                [JobStopped(3, "b1")],
                [moved("b1", "stopping", "pending"), *started("b1", {"n0": (0, 1)})],
            ),
            (
                [JobStopped(3, "b3")],
                [moved("b3", "stopping", "pending"), *started("b3", {"n0": (2, 3)})],
            ),
        ],
        queues={"A": 4},
    ),
)
def test_cancel_and_finish(case: Case) -> None:
    play(case)


def test_cancel_uses_grace_period() -> None:
    s = scheduler(DGX1, stop_grace_s=20.0)
    s.handle(*submit(job("a", 8), job("k", 8, checkpoint=Checkpoint("SIGUSR1", 45.0))))
    s.handle(JobFinished(1, "a", True))
    stops = [a for a in s.handle(JobCancelled(2, "k")) if isinstance(a, StopJob)]
    assert [(a.kind, a.signal, a.grace_s) for a in stops] == [(StopKind.CANCEL, "SIGUSR1", 45.0)]


# ---------------------------------------------------------------- bad events


def busy_scheduler() -> Scheduler:
    """One DGX-1: `run` running (GPUs 0-3), `done` succeeded, `wait` (8 GPUs) pending."""
    s = scheduler(DGX1)
    s.handle(*submit(job("run", 4), job("done", 2), job("wait", 8)))
    s.handle(JobFinished(0, "done", True))
    assert [s.job(n).state for n in ("run", "done", "wait")] == [
        JobState.RUNNING,
        JobState.SUCCEEDED,
        JobState.PENDING,
    ]
    return s


@pytest.mark.parametrize(
    ("event", "message"),
    [
        pytest.param(JobSubmitted(0, job("run", 1)), "a job named 'run' already exists", id="dup"),
        pytest.param(JobSubmitted(0, job("done", 1)), "'done' already exists", id="dup-ended"),
        pytest.param(JobSubmitted(0, job("wait", 1)), "'wait' already exists", id="dup-pending"),
        pytest.param(JobCancelled(0, "ghost"), "no job named 'ghost'", id="cancel-unknown"),
        pytest.param(JobFinished(0, "ghost", True), "no job named 'ghost'", id="finish-unknown"),
        pytest.param(WorkerFailed(0, "ghost", 0), "no job named 'ghost'", id="fail-unknown"),
        pytest.param(JobStopped(0, "ghost"), "no job named 'ghost'", id="stopped-unknown"),
        pytest.param(JobCancelled(0, "done"), "already ended (succeeded)", id="cancel-ended"),
        pytest.param(JobFinished(0, "done", True), "is succeeded", id="finish-ended"),
        pytest.param(JobFinished(0, "wait", True), "is pending, so it cannot finish", id="finish"),
        pytest.param(JobStopped(0, "run"), "is running, not stopping", id="stopped-running"),
        pytest.param(NodeRemoved(0, "n9"), "no node named 'n9'", id="remove-unknown"),
        pytest.param(NodeLabelled(0, "n9", "zone", "a"), "no node named 'n9'", id="label-unknown"),
        pytest.param(
            NodeLabelled(0, "n0", SCHEDULE_LABEL, "fastest"),
            "must be one of topology, default, got 'fastest'",
            id="label-value",
        ),
        pytest.param(GpuHealth(0, "n9", 0, False), "no node named 'n9'", id="gpu-unknown-node"),
        pytest.param(GpuHealth(0, "n0", 8, False), "GPUs 0..7, not 8", id="gpu-index"),
        pytest.param(NodeAdded(0, node("n0")), "'n0' is already in the cluster", id="node-dup"),
        pytest.param(QueueConfigured(0, "default", -1), "must be >= 0", id="queue-negative"),
        pytest.param(QueueConfigured(0, "", 4), "needs a name", id="queue-unnamed"),
        pytest.param(Event(0), "unknown event", id="unknown-event"),
    ],
)
def test_bad_event_raises_and_changes_nothing(event: Event, message: str) -> None:
    s = busy_scheduler()
    before = snapshot(s)
    views = {n: s.job(n) for n in ("run", "done", "wait")}
    explained = s.explain("wait")
    with pytest.raises(SchedulingError, match=message.replace("(", r"\(").replace(")", r"\)")):
        s.handle(event)
    s.check()
    assert snapshot(s) == before
    assert {n: s.job(n) for n in ("run", "done", "wait")} == views
    assert s.explain("wait") == explained
    assert s.now == 0
    # And the scheduler still works.
    got = project(s.handle(JobFinished(1, "run", True)))
    assert got == [moved("run", "running", "succeeded"), *started("wait", {"n0": ALL8})]


def test_bad_event_does_not_move_the_clock() -> None:
    s = scheduler(DGX1, 2)
    half_busy(s, "n0", "n1")
    s.handle(*submit(job("patient", 4, workers=2, locality=NODE_THEN_RACK)))
    with pytest.raises(SchedulingError):
        s.handle(JobCancelled(1_000, "ghost"))
    assert s.now == 0
    # The job has waited 10 s, not 600: it must not relax yet (reality: it starts split).
    assert s.handle(Tick(10)) == []


def test_bad_event_in_a_batch_keeps_the_events_before_it() -> None:
    s = scheduler(DGX1)
    with pytest.raises(SchedulingError):
        s.handle(*submit(job("a", 4)), JobCancelled(0, "ghost"))
    assert s.job("a").state is JobState.RUNNING
    s.check()


# ---------------------------------------------------------------- explain


def test_explain_says_why_a_job_waits() -> None:
    s = scheduler(DGX1, 2)
    s.handle(*submit(job("a", 4)))
    s.handle(*submit(job("g", 8, workers=2), t=1))
    text = s.explain("g")
    assert text.startswith("job g: pending; queue default, priority 0, 2 worker(s) x 8 GPU(s)")
    assert "needs 16 GPUs; 12 are free" in text
    assert "reserved n0 GPUs 0,1,2,3,4,5,6,7; n1 GPUs 0,1,2,3,4,5,6,7" in text
    assert s.job("g").reason.startswith("needs 16 GPUs")


def test_explain_says_where_a_job_runs() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("a", 4, locality=NODE_THEN_RACK)))
    text = s.explain("a")
    assert "locality node (then rack after 600 s)" in text
    assert "placement: n0 GPUs 0,1,2,3 (ring 25 GB/s)" in text


# ---------------------------------------------------------------- suspected core bugs


def test_higher_ranked_job_is_not_kept_off_a_lower_ranked_reservation() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("run", 4, limit_s=100)))
    assert project(s.handle(*submit(job("x", 8), t=1))) == [queued("x")]  # reserves n0
    # y outranks x and 4-7 are free: it should start there, not preempt `run`
    # (reality: [queued y, stop run (preempt), run -> stopping]; y waits for run to stop).
    got = project(s.handle(*submit(job("y", 4, priority=5), t=2)))
    assert got == two_steps("y", {"n0": HIGH})


def test_reservation_moves_off_an_unhealthy_gpu() -> None:
    s = scheduler(DGX1, 2)
    s.handle(*submit(job("a", 8, limit_s=100), job("b", 8, limit_s=1_000)))
    s.handle(*submit(job("big", 8), t=1))  # reserves n0 (free by t=100)
    s.handle(GpuHealth(2, "n0", 3, False), JobStopped(3, "a"))
    # n0 has 7 healthy GPUs now: big can only ever run on n1. n0's free GPUs should not stay
    # reserved for it (reality: small waits "behind big" with 7 GPUs idle).
    got = project(s.handle(*submit(job("small", 4), t=4)))
    assert [step[:2] for step in got] == [
        ("transition", "small"),
        ("start", "small"),
        ("transition", "small"),
    ]
    placed = got[1][2]
    assert list(placed) == ["n0"] and 3 not in placed["n0"]


def test_raised_guarantee_lets_a_reserved_job_reclaim() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("b1", 4, queue="B"), job("b2", 4, queue="B")))
    assert project(s.handle(*submit(job("a", 4, queue="A"), t=1))) == [queued("a")]
    got = project(s.handle(QueueConfigured(2, "A", 4)))
    assert len(got) == 2 and got[0][0] == "stop" and got[0][2] == "preempt"
    assert got[0][1] in ("b1", "b2")


def test_multi_node_job_within_guarantee_reclaims() -> None:
    s = scheduler(DGX1, 2, queues={"A": 16})
    s.handle(*submit(job("b1", 8, queue="B"), job("b2", 8, queue="B")))
    got = project(s.handle(*submit(job("a", 8, workers=2, queue="A"), t=1)))
    assert {step[1] for step in got if step[0] == "stop"} == {"b1", "b2"}
    assert all(step[2] == "preempt" for step in got if step[0] == "stop")


def test_reclaim_from_many_small_jobs() -> None:
    s = scheduler(DGX1, queues={"A": 8})
    s.handle(*submit(*[job(f"b{i}", 1, queue="B") for i in range(8)]))
    got = project(s.handle(*submit(job("a", 8, queue="A"), t=1)))
    assert {step[1] for step in got if step[0] == "stop"} == {f"b{i}" for i in range(8)}


def test_gpus_reserved_by_a_reclaim_stay_free_while_its_victims_stop() -> None:
    # a holds 0-2; b (4 GPUs) waits and c (1 GPU) waits behind b's reservation of 0-3.
    # o is within its queue's guarantee: it preempts a and reserves 0-3 in the same cycle.
    # c ranks behind o, so it must not take GPU 3 while a stops (found by hypothesis:
    # it did, and o then waited on a reservation that could never be met).
    s = scheduler(PCIE4, 1, queues={"own": 4, "lender": 0})
    s.handle(*submit(job("a", 3, queue="lender"), job("b", 4, queue="lender")))
    s.handle(*submit(job("c", 1, queue="lender")))
    got = project(s.handle(*submit(job("o", 4, queue="own"), t=1)))
    assert got == [queued("o"), *stopping("a", "preempt")]
    got = project(s.handle(JobStopped(2, "a")))
    assert got == [moved("a", "stopping", "pending"), *started("o", {"n0": (0, 1, 2, 3)})]


def test_victim_that_finishes_is_no_longer_awaited() -> None:
    s = scheduler(PCIE8, queues={"A": 4})
    s.handle(*submit(*B_JOBS))
    s.handle(*submit(job("a", 4, queue="A"), t=1))  # preempts b1 and b3
    s.handle(JobFinished(2, "b1", True))
    assert s.job("b1").state is JobState.SUCCEEDED
    assert "b1" not in s.job("a").reason


# ---------------------------------------------------------------- elastic jobs and migration


def elastic(name: str, lo: int, hi: int, **fields: Any) -> Any:
    return job(name, 1, workers=lo, elastic=Elastic(lo, hi), **fields)


def test_next_due_says_when_an_elastic_job_may_grow() -> None:
    """A driver without a clock of its own learns when an elastic job may grow (it started at
    0; grow_after_s is 60 s), and that nothing is due once it has grown to its maximum."""
    s = scheduler(cluster(node("n0", DGX1)), grow_after_s=60.0)
    s.handle(*submit(elastic("e", 1, 4)))
    assert s.next_due() == 60
    assert project(s.handle(Tick(60))) == stopping("e", "resize")
    s.handle(JobStopped(61, "e"))
    assert s.job("e").placement is not None and s.job("e").placement.gpus == 4
    assert s.next_due() is None  # at its maximum: a grow would find nothing to take


@cases(
    Case(
        # Starts at its minimum; after grow_after_s (60 s) it restarts on the best 4-set.
        "an elastic job grows into idle GPUs once it has run a while",
        cluster(node("n0", DGX1)),
        [
            (submit(elastic("e", 1, 4)), two_steps("e", {"n0": (0,)})),
            ([Tick(30)], []),
            ([Tick(60)], stopping("e", "resize")),
            (
                [JobStopped(61, "e")],
                [("start", "e", {"n0": LOW}), moved("e", "stopping", "running")],
            ),
        ],
    ),
    Case(
        # 4 GPUs are free, the gang needs 6: e gives back its last two workers (not all
        # three it could), and the gang gets what they free plus the idle half.
        "an elastic job shrinks only as far as a waiting gang needs",
        cluster(node("n0", DGX1)),
        [
            (submit(elastic("e", 1, 4)), two_steps("e", {"n0": (0,)})),
            ([Tick(60)], stopping("e", "resize")),
            (
                [JobStopped(61, "e")],
                [("start", "e", {"n0": LOW}), moved("e", "stopping", "running")],
            ),
            (submit(job("g", 2, workers=3), t=70), [queued("g"), *stopping("e", "resize")]),
            (
                [JobStopped(71, "e")],
                [
                    ("start", "e", {"n0": (0, 1)}),
                    moved("e", "stopping", "running"),
                    *started("g", {"n0": (2, 3, 4, 5, 6, 7)}),
                ],
            ),
        ],
    ),
    Case(
        # 8 GPUs are free, 4 on each node; the 8-GPU job needs one whole node. `a` can be
        # checkpointed, so it moves to n1's free half and g gets all of n0.
        "a checkpointable job migrates to open a node",
        cluster(*nodes(DGX1, 2)),
        [
            (
                submit(job("a", 4, checkpoint=Checkpoint()), job("x", 4), job("b", 4)),
                [
                    *two_steps("a", {"n0": LOW}),
                    *two_steps("x", {"n0": HIGH}),
                    *two_steps("b", {"n1": LOW}),
                ],
            ),
            ([JobFinished(1, "x", True)], [moved("x", "running", "succeeded")]),
            (submit(job("g", 8), t=2), [queued("g"), *stopping("a", "migrate")]),
            (
                [JobStopped(3, "a")],
                [
                    ("start", "a", {"n1": HIGH}),
                    moved("a", "stopping", "running"),
                    *started("g", {"n0": ALL8}),
                ],
            ),
        ],
    ),
    Case(
        "without a checkpoint nothing migrates: the 8-GPU job waits",
        cluster(*nodes(DGX1, 2)),
        [
            (
                submit(job("a", 4), job("x", 4), job("b", 4)),
                [
                    *two_steps("a", {"n0": LOW}),
                    *two_steps("x", {"n0": HIGH}),
                    *two_steps("b", {"n1": LOW}),
                ],
            ),
            ([JobFinished(1, "x", True)], [moved("x", "running", "succeeded")]),
            (submit(job("g", 8), t=2), [queued("g")]),
        ],
    ),
    Case(
        "migration off for the policy: the 8-GPU job waits",
        cluster(*nodes(DGX1, 2)),
        [
            (
                submit(job("a", 4, checkpoint=Checkpoint()), job("x", 4), job("b", 4)),
                [
                    *two_steps("a", {"n0": LOW}),
                    *two_steps("x", {"n0": HIGH}),
                    *two_steps("b", {"n1": LOW}),
                ],
            ),
            ([JobFinished(1, "x", True)], [moved("x", "running", "succeeded")]),
            (submit(job("g", 8), t=2), [queued("g")]),
        ],
        policy={"migration": False},
    ),
    Case(
        # e is stopping to grow onto GPUs of n0 when n0 is lost: the move is abandoned and
        # once stopped e waits in the queue (n1 is full); it restarts at its minimum size.
        "a node lost under a job that is moving onto it",
        cluster(*nodes(PCIE4, 2)),
        [
            (
                submit(elastic("e", 1, 2), job("o", 1, workers=4)),
                [*two_steps("e", {"n0": (0,)}), *two_steps("o", {"n1": (0, 1, 2, 3)})],
            ),
            ([Tick(60)], stopping("e", "resize")),
            ([NodeRemoved(61, "n0")], []),
            ([JobStopped(62, "e")], [moved("e", "stopping", "pending")]),
            (
                [JobFinished(63, "o", True)],
                [moved("o", "running", "succeeded"), *started("e", {"n1": (0,)})],
            ),
        ],
    ),
)
def test_elastic_and_migration(case: Case) -> None:
    play(case)


def test_failed_exit_while_stopping_counts_as_the_stop() -> None:
    """Workers killed by a cancel's SIGTERM exit non-zero: the job ends cancelled, and one
    preempted that way waits again without using up a restart."""
    s = scheduler(DGX1)
    s.handle(*submit(job("c", 4, restart=RestartPolicy.ON_FAILURE, max_restarts=1)))
    assert project(s.handle(JobCancelled(1, "c"))) == stopping("c", "cancel")
    assert project(s.handle(JobFinished(2, "c", False))) == [moved("c", "stopping", "cancelled")]


def test_a_job_behind_a_hopeless_shape_still_says_why() -> None:
    """The cycle stops once no waiting shape can start; jobs it did not reach still explain
    themselves with what their shape was told."""
    s = scheduler(DGX1)
    s.handle(*submit(job("a", 4), job("b", 2)))
    s.handle(*submit(job("big1", 8), job("big2", 8), job("big3", 8), t=1))
    s.handle(JobFinished(2, "b", True))  # a full cycle: big1 heads, big2 and big3 share a shape
    for name in ("big2", "big3"):
        assert "waiting behind big1" in s.job(name).reason, s.job(name).reason


def deadlock_scenario(policy: str) -> Scheduler:
    """One 4-GPU node; x runs on all of it; a (2 x 2 GPUs) waits, then b (2 x 2, higher
    priority) arrives; x ends. A policy that binds workers one at a time, the waiting jobs'
    workers in turn, gives a and b one worker each. (x once took 2 GPUs, and a bound a worker
    on arrival: b then got the other only because FIFO lists ranked it first by priority.)"""
    s = Scheduler(uniform(PCIE4, 1), make_scheduler_policy(policy), validate=True)
    s.handle(*submit(job("x", 4)))
    s.handle(*submit(job("a", 2, workers=2), t=1))
    s.handle(*submit(job("b", 2, workers=2, priority=1), t=2))
    s.handle(JobFinished(3, "x", True))
    return s


def test_k8s_default_deadlocks_on_partial_gangs() -> None:
    s = deadlock_scenario("k8s-default")
    for name in ("a", "b"):
        assert s.job(name).reason == "holding 1 of 2 workers; the rest wait"
    assert s.books.capacity.total_free == 0
    assert s.handle(Tick(10_000)) == []  # nothing will ever change on its own
    assert {s.job(n).state for n in "ab"} == {JobState.PENDING}


@pytest.mark.parametrize(
    "policy", ["toposched", "fifo-gang-firstfit", "hived-like", "gandiva-like"]
)
def test_gang_policies_do_not_deadlock(policy: str) -> None:
    s = deadlock_scenario(policy)
    for t in range(4, 8):
        running = [n for n in "ab" if s.job(n).state is JobState.RUNNING]
        if not running:
            break
        s.handle(JobFinished(t, running[0], True))
    assert {s.job(n).state for n in "ab"} == {JobState.SUCCEEDED}


# ---------------------------------------------------------------- least attained service


def not_preempted(what: str, long: Any, policy: dict[str, Any]) -> Case:
    """`long` holds the node far past the demotion threshold while `new` waits: no stop."""
    return Case(
        f"{what} is not preempted",
        cluster(node("n0", DGX1)),
        [
            (submit(long), two_steps("long", {"n0": ALL8})),
            (submit(job("new", 4, checkpoint=CKPT), t=100), [queued("new")]),
            ([Tick(5000)], []),
        ],
        policy=policy,
    )


@cases(
    Case(
        # `long` has had 800 GPU-s when `new` arrives: not demoted, so `new` only reserves.
        # At t=450 it has had 3,600 and is demoted: the waiting `new` preempts it.
        "a demoted job is preempted for one that has had less service",
        cluster(node("n0", DGX1)),
        [
            (submit(job("long", 8, checkpoint=CKPT)), two_steps("long", {"n0": ALL8})),
            (submit(job("new", 4, checkpoint=CKPT), t=100), [queued("new")]),
            ([Tick(449)], []),
            ([Tick(450)], stopping("long", "preempt")),
            (
                [JobStopped(460, "long")],
                [moved("long", "stopping", "pending"), *started("new", {"n0": LOW})],
            ),
        ],
        policy=LAS,
    ),
    not_preempted("a demoted job that cannot checkpoint", job("long", 8), LAS),
    not_preempted(
        "a demoted job of higher priority", job("long", 8, priority=1, checkpoint=CKPT), LAS
    ),
    not_preempted(
        "a job, without demotion,", job("long", 8, checkpoint=CKPT), {"demote_after_gpu_h": None}
    ),
)
def test_least_attained_service(case: Case) -> None:
    play(case)


def test_a_demoted_job_waits_behind_fresh_ones_until_promoted() -> None:
    s = scheduler(DGX1, **LAS, promote_after_s=300.0)
    s.handle(*submit(job("a", 8, checkpoint=CKPT)))
    # `a` has had 4,000 GPU-s when `b` comes: preempted for it, then waits demoted.
    assert project(s.handle(*submit(job("b", 8, checkpoint=CKPT), t=500))) == [
        queued("b"),
        *stopping("a", "preempt"),
    ]
    s.handle(JobStopped(510, "a"))
    assert s.job("b").state is JobState.RUNNING
    s.handle(*submit(job("c", 8, checkpoint=CKPT), t=520))
    assert [r.name for r in s.pending()] == ["c", "a"]
    assert "(demoted, level 1 of 4: ranks after jobs at lower levels)" in s.explain("a")
    # Promoted at t=810 (300 s of waiting), `a` ranks by submission again; `b` is not demoted
    # yet (2,400 GPU-s), so `a` waits for it, and preempts it once it is (t=960).
    assert project(s.handle(Tick(809))) == []
    assert project(s.handle(Tick(810))) == []
    assert [r.name for r in s.pending()] == ["a", "c"]
    assert "service: 1.13 GPU-hours\n" in s.explain("a")  # 8 GPUs x 510 s
    assert project(s.handle(Tick(959))) == []
    assert project(s.handle(Tick(960))) == stopping("b", "preempt")
    assert project(s.handle(JobStopped(965, "b"))) == [
        moved("b", "stopping", "pending"),
        *started("a", {"n0": ALL8}),
    ]
    # Its old service forgiven, `a` runs 3,600 GPU-s before `c` may preempt it in turn.
    assert project(s.handle(Tick(1414))) == []
    assert project(s.handle(Tick(1415))) == stopping("a", "preempt")


@pytest.mark.parametrize(("levels", "first"), [(2, "young"), (1, "old")])
def test_demoted_jobs_wait_in_levels_of_service(levels: int, first: str) -> None:
    # Demoted at 1 GPU-hour, level 2 from 4: `old` waits with 16,080 GPU-s (level 2), `young`
    # with 8,000 (level 1). With levels `young` goes first though submitted later; with one
    # level, submission order alone.
    s = scheduler(DGX1, **LAS, promote_after_s=None, demoted_levels=levels, level_ratio=4.0)
    s.handle(*submit(job("old", 8, checkpoint=CKPT)))
    assert project(s.handle(*submit(job("young", 8, checkpoint=CKPT), t=2000))) == [
        queued("young"),
        *stopping("old", "preempt"),
    ]
    s.handle(JobStopped(2010, "old"))
    assert project(s.handle(*submit(job("fresh", 8, checkpoint=CKPT), t=3000))) == [
        queued("fresh"),
        *stopping("young", "preempt"),
    ]
    s.handle(JobStopped(3010, "young"))
    assert s.job("fresh").state is JobState.RUNNING
    assert [r.name for r in s.pending()] == [first, ({"old", "young"} - {first}).pop()]
    got = project(s.handle(JobFinished(4000, "fresh", True)))
    assert got == [moved("fresh", "running", "succeeded"), *started(first, {"n0": ALL8})]


def test_victims_are_judged_at_the_level_they_will_wait_at() -> None:
    # Levels from 1, 4 and 16 GPU-hours. `rec` (queue A) is preempted for `fresh` and waits at
    # level 2 (16,080 GPU-s); `v1` and `v2` (queue B, within its guarantee once both stop)
    # have had 74,000 GPU-s each by t=20,000, so once stopped they would wait at level 3,
    # behind `rec`.
    s = scheduler(DGX1, 2, queues={"A": 16, "B": 8}, **LAS, demoted_levels=3, promote_after_s=None)
    s.handle(*submit(job("rec", 8, queue="A", checkpoint=CKPT)))
    v1, v2 = (job(name, 4, queue="B", checkpoint=CKPT) for name in ("v1", "v2"))
    s.handle(*submit(v1, v2, t=1500))
    assert project(s.handle(*submit(job("fresh", 8, queue="A", checkpoint=CKPT), t=2000))) == [
        queued("fresh"),
        *stopping("rec", "preempt"),
    ]
    s.handle(JobStopped(2010, "rec"))
    s.handle(Tick(20_000))
    waiting = s.waiting
    rec, victims = s.books.jobs["rec"], [s.books.jobs["v1"], s.books.jobs["v2"]]
    assert rec.state is JobState.PENDING and waiting.waiting_level(rec) == 2
    assert [waiting.demoted_level(v) for v in victims] == [3, 3]
    assert s.reclaim.all_behind(rec, victims)


def test_service_counts_every_run_on_the_gpus_held() -> None:
    s = scheduler(DGX1, **LAS)
    s.handle(*submit(job("a", 4, checkpoint=CKPT)))
    s.handle(Tick(100))
    assert "service: 0.11 GPU-hours" in s.explain("a")  # 4 GPUs x 100 s
    s.handle(*submit(job("b", 8, checkpoint=CKPT), t=1000))  # a: 4,000 GPU-s, demoted
    s.handle(JobStopped(1010, "a"))  # stopping counts: 4,040 GPU-s
    s.handle(JobFinished(2000, "b", True))  # a restarts
    s.handle(Tick(2100))
    assert "service: 1.23 GPU-hours (demoted" in s.explain("a")  # 4,440 GPU-s


def test_victims_that_together_bring_their_queue_back_within_its_guarantee_are_spared() -> None:
    # A (guarantee 8) holds 12 GPUs: r3 (no checkpoint) on n0, r1 and r2 (demoted) on n1. Each
    # alone could go for h; both stopped would leave A at 4, so r1 would rank before h again
    # (within the guarantee) and take its GPUs back at once. So neither is preempted.
    s = scheduler(DGX1, 2, queues={"A": 8, "B": 8}, **LAS)
    s.handle(*submit(job("x", 4, queue="B")))
    s.handle(*submit(job("r3", 4, queue="A"), t=1))
    s.handle(*submit(job("r1", 4, queue="A", checkpoint=CKPT), t=2))
    s.handle(*submit(job("r2", 4, queue="A", checkpoint=CKPT), t=3))
    assert project(s.handle(*submit(job("h", 8, queue="A", checkpoint=CKPT), t=1000))) == [
        queued("h")
    ]
    assert project(s.handle(Tick(5000))) == []
    assert s.job("r1").state is s.job("r2").state is JobState.RUNNING


def test_a_job_being_stopped_does_not_count_as_borrowed() -> None:
    # B (guarantee 8) holds 16 GPUs, but b1 is being cancelled: once it is gone B is within its
    # guarantee, so b2 is not preempted for A's job; it waits for b1's GPUs instead.
    s = scheduler(DGX1, 2, queues={"A": 16, "B": 8})
    s.handle(*submit(job("b1", 8, queue="B"), job("b2", 8, queue="B", checkpoint=CKPT)))
    s.handle(JobCancelled(5, "b1"))
    assert project(s.handle(*submit(job("h", 8, queue="A"), t=6))) == [queued("h")]
    got = project(s.handle(JobStopped(7, "b1")))
    assert got == [moved("b1", "stopping", "cancelled"), *started("h", {"n0": ALL8})]


def test_a_job_preempted_at_its_demotion_time_comes_back_demoted() -> None:
    # 4 GPUs from t=714.129 reach 3,600 GPU-s at t=1614.129, where the sum of the service
    # rounds to 3,599.9999999999995: it must still count as demoted, or `r` would rank before
    # `h` once requeued, start again on h's GPUs, and be preempted again, for ever.
    s = scheduler(PCIE4, **LAS)
    s.handle(*submit(job("r", 4, checkpoint=Checkpoint("SIGUSR1", 0.0)), t=714.129))
    s.handle(*submit(job("h", 4, checkpoint=CKPT), t=800))
    at = 714.129 + 3600 / 4
    assert project(s.handle(Tick(at))) == stopping("r", "preempt")
    assert project(s.handle(JobStopped(at, "r"))) == [
        moved("r", "stopping", "pending"),
        *started("h", {"n0": (0, 1, 2, 3)}),
    ]
    assert "(demoted" in s.explain("r")


def test_a_promotion_due_at_a_rounded_time_is_not_lost() -> None:
    # waiting_since + 86,400 and now - waiting_since >= 86,400 disagree by one rounding step
    # at this time: the promotion must happen when the due entry fires.
    since = 495435.087091941
    s = scheduler(DGX1, **LAS, promote_after_s=86_400.0)
    s.handle(*submit(job("a", 8, checkpoint=CKPT)))
    s.handle(*submit(job("b", 8, checkpoint=CKPT), t=495000))  # a is demoted: preempted
    s.handle(JobStopped(since, "a"))
    s.handle(*submit(job("c", 8, checkpoint=CKPT), t=since + 10))
    assert [r.name for r in s.pending()] == ["c", "a"]
    s.handle(Tick(since + 86400.0))
    assert [r.name for r in s.pending()] == ["a", "c"]


def test_cancelling_a_partly_bound_job_frees_its_workers() -> None:
    s = Scheduler(
        uniform(DGX1, 2), make_scheduler_policy("k8s-default"), validate=True, rng=random.Random(1)
    )
    s.handle(*submit(job("a", 4, 3), job("b", 4, 3)))
    assert s.partial_holds() == {"b": 4}
    free = s.books.capacity.total_free
    assert project(s.handle(JobCancelled(1, "b"))) == [moved("b", "pending", "cancelled")]
    assert s.partial_holds() == {} and s.books.capacity.total_free == free + 4
