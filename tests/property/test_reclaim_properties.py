"""Reclaim's shortcut for one GPU agrees with its general search, on random cluster states."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.core import Checkpoint, GpuHealth, JobSpec, JobSubmitted, Scheduler, SchedulerPolicy
from toposched.core.reclaim import Plan, plan_on_nodes, plan_one_gpu, victim_cost
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
    general = plan_on_nodes(s, costs, GangRequest(1, 1, Tier.NODE, mode), {})
    shortcut = plan_one_gpu(s, costs, mode)
    assert names(shortcut) == names(general)
