"""Give a share of a trace's untyped jobs one GPU type each, as typed jobs of real clusters."""

from __future__ import annotations

import random
from dataclasses import replace

from toposched.sim.traces.job import TYPED_AT_RANDOM, Trace
from toposched.topology.cluster import Cluster, ClusterError
from toposched.topology.resources import type_key


def cluster_types(cluster: Cluster) -> dict[str, int]:
    """GPUs per GPU type of the cluster's nodes (by `hardware.gpu_type`, in node order);
    nodes of unknown type are left out."""
    gpus: dict[str, int] = {}
    names: dict[str, str] = {}
    for node in cluster.nodes:
        kind = node.hardware.gpu_type
        if kind:
            name = names.setdefault(type_key(kind), kind)
            gpus[name] = gpus.get(name, 0) + node.size
    return gpus


def type_share(trace: Trace, cluster: Cluster, share: float, seed: int = 0) -> Trace:
    """`trace` with about `share` of its untyped jobs accepting one GPU type only.

    Each untyped job, in submit order, is chosen with probability `share`; a chosen job gets
    one of the cluster's types drawn in proportion to their GPUs, among the types with at
    least as many GPUs as it asks for (so that it can run at all). The draws use
    `random.Random(seed)` and do not depend on later jobs, so a prefix of a trace (`--limit`)
    types its jobs as the whole trace does. Jobs the trace already types keep their types.
    """
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"the typed share must be between 0 and 1, got {share}")
    if share == 0.0:
        return trace
    gpus = cluster_types(cluster)
    if not gpus:
        raise ClusterError(
            "no node has a GPU type, so no job can be given one; give nodes a gpu_type "
            "(presets such as dgx1-v100 have one; cluster files take gpu_type)"
        )
    rng = random.Random(seed)
    jobs = list(trace.jobs)
    typed = 0
    for i, job in enumerate(jobs):
        if job.gpu_types:
            continue
        chosen = rng.random() < share
        pick = rng.random()  # drawn for every job, so that one choice does not shift the next
        fitting = [(name, size) for name, size in gpus.items() if size >= job.gpus]
        if not chosen or not fitting:
            continue
        jobs[i] = replace(job, gpu_types=(_draw(fitting, pick),))
        typed += 1
    notes = dict(trace.notes)
    if typed:
        notes[TYPED_AT_RANDOM] = typed
    return replace(trace, jobs=tuple(jobs), notes=notes)


def _draw(weights: list[tuple[str, int]], pick: float) -> str:
    """The type at `pick` (in [0, 1)) of the types laid end to end by weight."""
    total = sum(size for _, size in weights)
    point = pick * total
    for name, size in weights:
        point -= size
        if point < 0:
            return name
    return weights[-1][0]
