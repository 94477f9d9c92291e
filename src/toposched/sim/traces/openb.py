"""Alibaba PAI 2023 ("openb") pod lists: `name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,
...,creation_time,...`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from toposched.sim.traces.job import DEFAULT_QUEUE
from toposched.sim.traces.rows import (
    BAD_VALUE,
    NEVER_STARTED,
    NO_GPU,
    Drop,
    RawJob,
    RowError,
    TraceFormat,
    count,
    present,
    text,
)

MIB = 2**20


def parse(row: Sequence[str], columns: Mapping[str, int], line: int) -> RawJob | Drop:
    """One pod: submitted at `creation_time`, ran from `scheduled_time` to `deletion_time`.

    A pod of `num_gpu` GPUs is that many one-GPU workers, each needing its share of the pod's
    `cpu_milli` and `memory_mib` (rounded up) and one of the GPU types in `gpu_spec` (types
    separated by `|`; empty: any). A pod of one GPU with `gpu_milli` < 1000 asks that share of
    one GPU (TraceJob.gpu_milli), as it did in the trace; `gpu_milli` is read only for
    one-GPU pods (the trace's multi-GPU pods all say 1000). A pod without GPUs (`num_gpu` 0)
    has nothing for a GPU scheduler to place and is dropped (`no-gpu`), as is a pod never
    scheduled (`scheduled_time` empty, `never-started`).
    """
    name = text(row, columns, "name")
    gpus = count(row, columns, "num_gpu")
    milli = count(row, columns, "gpu_milli")
    if milli > 1000:
        raise RowError(BAD_VALUE, f"{milli} is over 1000 (one whole GPU)", "gpu_milli")
    created = count(row, columns, "creation_time")
    deleted = count(row, columns, "deletion_time")
    cpus = _per_gpu(row, columns, "cpu_milli", gpus, 1)
    memory = _per_gpu(row, columns, "memory_mib", gpus, MIB)
    types = gpu_spec(row[columns["gpu_spec"]]) if "gpu_spec" in columns else ()
    if gpus == 0:
        return NO_GPU
    if "scheduled_time" not in columns:
        start, start_column = created, "creation_time"
    elif present(row, columns, "scheduled_time"):
        start, start_column = count(row, columns, "scheduled_time"), "scheduled_time"
    else:
        return NEVER_STARTED
    if deleted < start:
        raise RowError(BAD_VALUE, f"{deleted} is before {start_column} {start}", "deletion_time")
    share = milli if gpus == 1 and milli < 1000 else 0
    duration = float(deleted - start)
    return RawJob(
        name, float(created), gpus, duration, DEFAULT_QUEUE, None, cpus, memory, types, (), share
    )


def _per_gpu(
    row: Sequence[str], columns: Mapping[str, int], name: str, gpus: int, unit: int
) -> int:
    """Optional column `name` (a whole number of `unit`s for the pod), split over its GPUs."""
    if name not in columns:
        return 0
    total = count(row, columns, name) * unit
    return -(-total // gpus) if gpus else total


def gpu_spec(value: str) -> tuple[str, ...]:
    """`V100M16|V100M32` -> ("V100M16", "V100M32"); empty: any type. A repeated type counts
    once; an empty name between bars is a bad row."""
    value = value.strip()
    if not value:
        return ()
    names = [part.strip() for part in value.split("|")]
    if not all(names):
        raise RowError(
            BAD_VALUE, f"{value!r} has an empty GPU type; expected types joined by |", "gpu_spec"
        )
    return tuple(dict.fromkeys(names))


FORMAT = TraceFormat(
    name="openb",
    description="Alibaba PAI 2023 openb pod list: name,num_gpu,gpu_milli,creation_time,..",
    signature=frozenset({"name", "num_gpu", "gpu_milli"}),
    required=("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time"),
    optional=("scheduled_time", "cpu_milli", "memory_mib", "gpu_spec"),
    parse=parse,
    name_column="name",
    missing_hint=(
        "the resampled openb pod lists (e.g. openb_pod_list_multigpu50.csv) have no times, "
        "so they cannot be replayed; use openb_pod_list_default.csv"
    ),
)
