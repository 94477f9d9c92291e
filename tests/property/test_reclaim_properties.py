"""Reclaim's shortcuts agree with its general search, on random cluster states: one GPU without
walking victim sets, the demoted jobs `Demotions` keeps as the victims `victims_for` finds, and
the pruned, remembered search per node against brute force."""

from __future__ import annotations

from itertools import combinations

from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.core import (
    Checkpoint,
    GpuHealth,
    JobFinished,
    JobSpec,
    JobSubmitted,
    Scheduler,
    SchedulerPolicy,
)
from toposched.core.reclaim import (
    Cost,
    Plan,
    victim_cost,
)
from toposched.placement.gang import GangRequest, node_gpus, ring_gbps
from toposched.placement.request import Mode
from toposched.placement.tables import to_mask
from toposched.topology import preset
from toposched.topology.cluster import Cluster, Node, Tier

PRESETS = ("pcie-4gpu-2socket", "pcie-8gpu-2socket", "dgx1-v100")


@st.composite
def busy_schedulers(draw: st.DrawFn) -> Scheduler:
    kinds = draw(st.lists(st.sampled_from(PRESETS), min_size=1, max_size=3))
    cluster = Cluster(tuple(Node(f"n{i}", preset(k)) for i, k in enumerate(kinds)))
    s = Scheduler(cluster, SchedulerPolicy(reservation=False), validate=True)
    for i in range(draw(st.integers(1, 14))):
        gpus = draw(st.sampled_from([1, 1, 2, 4]))
        checkpoint = draw(st.sampled_from([None, Checkpoint("SIGUSR1", 5.0)]))
        priority = draw(st.integers(0, 2))
        spec = JobSpec(
            f"j{i}", workers=1, gpus_per_worker=gpus, priority=priority, checkpoint=checkpoint
        )
        s.handle(JobSubmitted(float(i), spec))
    for node in draw(st.lists(st.integers(0, len(kinds) - 1), max_size=3)):
        size = cluster.nodes[node].size
        s.handle(GpuHealth(20.0, f"n{node}", draw(st.integers(0, size - 1)), False))
    return s


@st.composite
def full_schedulers(draw: st.DrawFn) -> Scheduler:
    """One or two nodes filled with small jobs: many victims to choose among on each. A node
    may opt out of topology-aware placement (it takes the lowest free GPUs)."""
    kinds = draw(st.lists(st.sampled_from(PRESETS), min_size=1, max_size=2))
    labels = [draw(st.sampled_from([{}, {"toposched.io/gpu-schedule": "default"}])) for _ in kinds]
    cluster = Cluster(
        tuple(Node(f"n{i}", preset(k), labels=labels[i]) for i, k in enumerate(kinds))
    )
    s = Scheduler(cluster, SchedulerPolicy(reservation=False, preemption=False), validate=True)
    gpus = sum(node.size for node in cluster.nodes)
    for i in range(gpus):
        spec = JobSpec(f"j{i}", workers=1, gpus_per_worker=draw(st.sampled_from([1, 1, 1, 2])))
        s.handle(JobSubmitted(float(i), spec))
    free = [draw(st.booleans()) for _ in s.books.holders]
    for t, name in enumerate(
        [n for n, gone in zip(sorted(s.books.holders), free, strict=True) if gone][:3]
    ):
        s.handle(JobFinished(100.0 + t, name, True))
    return s


def names(plan: Plan | None) -> tuple[list[str], dict[int, int]] | None:
    return None if plan is None else ([v.name for v in plan[0]], plan[1])


@settings(max_examples=150, deadline=None)
@given(busy_schedulers(), st.sampled_from(list(Mode)), st.data())
def test_one_gpu_shortcut_matches_the_general_search(
    s: Scheduler, mode: Mode, data: st.DataObject
) -> None:
    running = sorted(s.books.holders)
    chosen = data.draw(st.lists(st.sampled_from(running), unique=True) if running else st.just([]))
    costs = {name: victim_cost(s.books.jobs[name]) for name in chosen}
    general = s.reclaim.plan_on_nodes(costs, GangRequest(1, 1, Tier.NODE, mode))
    shortcut = s.reclaim.plan_one_gpu(costs, GangRequest(1, 1, Tier.NODE, mode))
    assert names(shortcut) == names(general)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_kept_demoted_jobs_are_the_victims_when_demotion_alone_preempts(
    data: st.DataObject,
) -> None:
    kinds = data.draw(st.lists(st.sampled_from(PRESETS), min_size=1, max_size=3))
    cluster = Cluster(tuple(Node(f"n{i}", preset(k)) for i, k in enumerate(kinds)))
    queues = data.draw(st.sampled_from([None, {"a": 0, "b": 0}]))
    s = Scheduler(cluster, SchedulerPolicy(demote_after_gpu_h=0.01), queues, validate=True)
    t = 0.0
    for i in range(data.draw(st.integers(2, 16))):
        t += data.draw(st.sampled_from([0.0, 5.0, 20.0]))
        spec = JobSpec(
            f"j{i}",
            workers=data.draw(st.integers(1, 2)),
            gpus_per_worker=data.draw(st.sampled_from([1, 2, 4])),
            queue=data.draw(st.sampled_from(["a", "b"])),
            checkpoint=data.draw(st.sampled_from([None, Checkpoint("SIGUSR1", 5.0)])),
        )
        s.handle(JobSubmitted(t, spec))
    assert s.waiting.demotes_alone()
    for rec in s.pending():
        general = {v.name: victim_cost(v) for v in s.reclaim.victims_for(rec)}
        assert s.reclaim.victim_costs(rec) == general


def brute_plan(s: Scheduler, costs: dict[str, Cost], request: GangRequest) -> Plan | None:
    """Every set of victims on every node, nothing pruned or remembered: the cheapest by
    (non-checkpointable victims, ring, highest priority, victims, GPUs, node), the first met
    among equals (smaller sets first, each in the cheapest-first order of the node's jobs)."""
    cap = s.books.capacity
    best = None
    for i, on_node in sorted(s.books.node_jobs.items()):
        if not cap.present[i]:
            continue
        topology, bad = cap.nodes[i].topology, s.books.unhealthy.get(i, 0)
        jobs = sorted((j for j in on_node if j in costs), key=lambda j: (costs[j], j))
        for size in range(1, len(jobs) + 1):
            for subset in combinations(jobs, size):
                avail = cap.free[i]
                for j in subset:
                    avail |= on_node[j]
                avail &= ~bad
                if avail.bit_count() < request.gpus:
                    continue
                gpus = node_gpus(topology, avail, request.gpus, cap.aware[i], request.mode)
                chosen = [costs[j] for j in subset]
                key = (
                    sum(c[0] for c in chosen),
                    -(ring_gbps(topology, gpus) or 0.0),
                    max(c[1] for c in chosen),
                    size,
                    sum(c[2] for c in chosen),
                    i,
                )
                if best is None or key < best[0]:
                    best = (key, subset, {i: to_mask(gpus)})
    return None if best is None else ([s.books.jobs[j] for j in best[1]], best[2])


@settings(max_examples=300, deadline=None)
@given(full_schedulers(), st.sampled_from([2, 3, 4, 8]), st.sampled_from(list(Mode)), st.data())
def test_victim_search_matches_brute_force(
    s: Scheduler, k: int, mode: Mode, data: st.DataObject
) -> None:
    """The search per node stops early once no larger set can be cheaper, and remembers its
    answers per node shape (asked twice here, so the second answer comes from the memo).
    Costs are drawn, not the jobs' own, so that cheap victims hide behind dear ones."""
    running = sorted(s.books.holders)
    chosen = data.draw(st.lists(st.sampled_from(running), unique=True) if running else st.just([]))
    costs = {
        name: (
            data.draw(st.integers(0, 1)),
            data.draw(st.integers(0, 2)),
            s.books.jobs[name].gpus_held(),
        )
        for name in chosen
    }
    request = GangRequest(1, k, Tier.NODE, mode)
    expected = names(brute_plan(s, costs, request))
    assert names(s.reclaim.plan_on_nodes(costs, request)) == expected
    assert names(s.reclaim.plan_on_nodes(costs, request)) == expected
