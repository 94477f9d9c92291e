"""Reclaim's shortcuts agree with its general search, on random cluster states: one GPU without
walking victim sets, and the demoted jobs `Demotions` keeps as the victims `victims_for` finds."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.core import Checkpoint, GpuHealth, JobSpec, JobSubmitted, Scheduler, SchedulerPolicy
from toposched.core.reclaim import (
    Plan,
    plan_on_nodes,
    plan_one_gpu,
    victim_cost,
    victim_costs,
    victims_for,
)
from toposched.placement.gang import GangRequest
from toposched.placement.request import Mode
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


def names(plan: Plan | None) -> tuple[list[str], dict[int, int]] | None:
    return None if plan is None else ([v.name for v in plan[0]], plan[1])


@settings(max_examples=150, deadline=None)
@given(busy_schedulers(), st.sampled_from(list(Mode)), st.data())
def test_one_gpu_shortcut_matches_the_general_search(
    s: Scheduler, mode: Mode, data: st.DataObject
) -> None:
    running = sorted(s.holders)
    chosen = data.draw(st.lists(st.sampled_from(running), unique=True) if running else st.just([]))
    costs = {name: victim_cost(s.jobs[name]) for name in chosen}
    general = plan_on_nodes(s, costs, GangRequest(1, 1, Tier.NODE, mode))
    shortcut = plan_one_gpu(s, costs, mode)
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
    assert s.demotes_alone()
    for rec in s.pending():
        general = {v.name: victim_cost(v) for v in victims_for(s, rec)}
        assert victim_costs(s, rec) == general
