"""The core's books under MIG: instances, whole-GPU jobs and shares come and go on nodes with
GPUs in MIG mode, GPUs fail and heal, nodes are cordoned; validate mode checks the books after
every event, and the actions are checked against brute force's rules."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.brute import brute_mig_fits
from toposched.core import JobFinished, JobSpec, JobSubmitted, Scheduler, SchedulerPolicy
from toposched.core.actions import Action, StartJob, StopJob
from toposched.core.events import Event, GpuHealth, JobStopped, NodeCordoned
from toposched.topology.cluster import Cluster, Node
from toposched.topology.mig import mig_table
from toposched.topology.presets import preset
from toposched.topology.resources import Hardware

GIB = 2**30
TABLE = mig_table("H100", 80 * GIB)
assert TABLE is not None
PROFILES = TABLE.names

ASKS = st.one_of(
    st.sampled_from(PROFILES),  # a MIG instance
    st.sampled_from((1, 2)),  # whole GPUs
    st.just(0.5),  # a share
)
EVENTS = st.tuples(
    ASKS,
    st.sampled_from(("none", "finish", "fail", "heal", "cordon", "uncordon")),
    st.integers(0, 1 << 8),
)


@settings(max_examples=150, deadline=None)
@given(
    st.tuples(st.sets(st.integers(0, 7), max_size=8), st.sets(st.integers(0, 7), max_size=8)),
    st.lists(EVENTS, min_size=1, max_size=25),
)
def test_instances_whole_gpus_and_shares_stay_apart_under_every_event(
    mig: tuple[set[int], set[int]], events: list[tuple[object, str, int]]
) -> None:
    nodes = tuple(
        Node(f"n{k}", preset("hgx-h100"), hardware=Hardware("H100", 80 * GIB, mig=tuple(sorted(m))))
        for k, m in enumerate(mig)
    )
    in_mig = {(node.name, g) for node in nodes for g in node.hardware.mig}
    sched = Scheduler(Cluster(nodes), SchedulerPolicy(), validate=True)
    instances: dict[tuple[str, int], dict[str, tuple[str, int]]] = {}
    held: dict[str, list[tuple[str, int]]] = {}
    now = 0.0

    def send(event: Event) -> None:
        pending: list[Action] = list(sched.handle(event))
        while pending:
            action = pending.pop(0)
            if isinstance(action, StopJob):
                for pair in held.pop(action.job, []):
                    instances.get(pair, {}).pop(action.job, None)
                pending += sched.handle(JobStopped(now, action.job))
            elif isinstance(action, StartJob):
                spec = sched.books.jobs[action.job].spec
                (slot,) = action.placement.workers if spec.mig else (None,)
                pairs = list(action.placement.pairs())
                if spec.mig:
                    assert slot is not None and slot.instance is not None
                    (pair,) = pairs
                    assert pair in in_mig
                    used = tuple(instances.get(pair, {}).values())
                    assert brute_mig_fits(TABLE, used, spec.mig, slot.instance)
                    instances.setdefault(pair, {})[action.job] = (spec.mig, slot.instance)
                else:
                    assert not set(pairs) & in_mig, f"{action.job} got a GPU in MIG mode"
                held[action.job] = pairs

    for k, (ask, what, pick) in enumerate(events):
        now += 1.0
        if isinstance(ask, str):
            spec = JobSpec(f"j{k}", mig=ask)
        elif ask == 0.5:
            spec = JobSpec(f"j{k}", gpu_milli=500)
        else:
            spec = JobSpec(f"j{k}", gpus_per_worker=int(ask))  # type: ignore[call-overload]
        send(JobSubmitted(now, spec))
        node = nodes[pick % 2].name
        now += 1.0
        if what == "finish" and held:
            done = sorted(held)[pick % len(held)]
            for pair in held.pop(done):
                instances.get(pair, {}).pop(done, None)
            send(JobFinished(now, done, True))
        elif what in ("fail", "heal"):
            send(GpuHealth(now, node, pick % 8, what == "heal"))
        elif what in ("cordon", "uncordon"):
            send(NodeCordoned(now, node, what == "cordon"))
