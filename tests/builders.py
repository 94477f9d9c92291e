"""Small builders shared by the scheduler tests: clusters of presets, job shortcuts, and a
projection of actions onto plain tuples that a table can spell out."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from toposched.core import (
    Action,
    Event,
    JobSpec,
    JobSubmitted,
    Scheduler,
    StartJob,
    StopJob,
    Transition,
    make_scheduler_policy,
)
from toposched.topology import preset
from toposched.topology.cluster import Cluster, Node

DGX1 = "dgx1-v100"
# Least attained service alone, demoted after 3,600 GPU-seconds: without the stop rule
# (core/stoprule.py), which tests/unit/test_stoprule.py takes on.
LAS = {
    "demote_after_gpu_h": 1.0,
    "pay_margin": None,
    "max_stops": None,
    "stop_protect_s": 0.0,
    "preempt_patience_s": 0.0,
}
PCIE8 = "pcie-8gpu-2socket"
PCIE4 = "pcie-4gpu-2socket"
HGX = "hgx-h100"
DGX2 = "dgx2-v100"


def node(
    name: str,
    kind: str = DGX1,
    *,
    rack: str = "rack-0",
    pod: str = "pod-0",
    labels: Mapping[str, str] | None = None,
) -> Node:
    """One node of preset `kind`."""
    return Node(name, preset(kind), rack=rack, pod=pod, labels=dict(labels or {}))


def cluster(*nodes: Node) -> Cluster:
    return Cluster(tuple(nodes))


def nodes(kind: str, count: int, *, prefix: str = "n", rack: str = "rack-0") -> list[Node]:
    """`count` nodes of one preset, named n0, n1, ... in one rack."""
    return [node(f"{prefix}{i}", kind, rack=rack) for i in range(count)]


def racks(kind: str, layout: Mapping[str, int]) -> Cluster:
    """Nodes per rack, e.g. {"ra": 2, "rb": 1}: named ra0, ra1, rb0 (rack name + index)."""
    out: list[Node] = []
    for rack, count in layout.items():
        out.extend(node(f"{rack}{i}", kind, rack=rack) for i in range(count))
    return cluster(*out)


def uniform(kind: str, count: int) -> Cluster:
    return cluster(*nodes(kind, count))


def scheduler(
    where: Cluster | str,
    count: int = 1,
    *,
    queues: dict[str, int] | None = None,
    **policy: Any,
) -> Scheduler:
    """A validating scheduler on a cluster (or on `count` nodes of preset `where`); `policy`
    holds parameters of the `toposched` policy, checked and coerced as the CLI would."""
    built = uniform(where, count) if isinstance(where, str) else where
    return Scheduler(built, make_scheduler_policy("toposched", policy), queues, validate=True)


def job(name: str, gpus: int = 1, workers: int = 1, **fields: Any) -> JobSpec:
    """`workers` x `gpus` GPUs (gpus is per worker)."""
    return JobSpec(name, workers=workers, gpus_per_worker=gpus, **fields)


def submit(*specs: JobSpec, t: float = 0.0) -> list[Event]:
    return [JobSubmitted(t, spec) for spec in specs]


Step = tuple[Any, ...]


def project(actions: Iterable[Action]) -> list[Step]:
    """("start", job, {node: gpus}), ("stop", job, kind), ("transition", job, old, new)."""
    out: list[Step] = []
    for action in actions:
        match action:
            case StartJob(job=name, placement=placement):
                out.append(("start", name, placement.gpus_by_node()))
            case StopJob(job=name, kind=kind):
                out.append(("stop", name, kind.value))
            case Transition(job=name, old=old, new=new):
                out.append(("transition", name, old.value if old else None, new.value))
            case _:
                raise AssertionError(f"unexpected action {action!r}")
    return out


def started(name: str, where: Mapping[str, Sequence[int]]) -> list[Step]:
    """The two steps of a start: StartJob, then pending -> running."""
    placed = {n: tuple(g) for n, g in where.items()}
    return [("start", name, placed), ("transition", name, "pending", "running")]


def queued(name: str) -> Step:
    return ("transition", name, None, "pending")


def stopping(name: str, kind: str) -> list[Step]:
    return [("stop", name, kind), ("transition", name, "running", "stopping")]


def moved(name: str, old: str | None, new: str) -> Step:
    return ("transition", name, old, new)


def snapshot(s: Scheduler) -> tuple[Any, ...]:
    """Everything observable about a scheduler, to show that a bad event changed nothing."""
    return (
        {n: (r.state, r.placement, r.restarts, tuple(r.log)) for n, r in s.books.jobs.items()},
        dict(s.books.owner),
        list(s.books.capacity.free),
        s.books.capacity.total_free,
        dict(s.books.unhealthy),
        {q: (r.guaranteed, r.used) for q, r in s.books.queues.items()},
        dict(s.waiting.lists.filed),
        {k: dict(v) for k, v in s.books.labels.items()},
        s.books.reservation,
        s.mode,
    )
