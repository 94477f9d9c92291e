"""Alibaba PAI 2023 ("openb") pod lists: `name,...,num_gpu,gpu_milli,...,creation_time,...`."""

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


def parse(row: Sequence[str], columns: Mapping[str, int], line: int) -> RawJob | Drop:
    """One pod: submitted at `creation_time`, ran from `scheduled_time` to `deletion_time`.

    A fractional GPU (`gpu_milli` < 1000) takes a whole GPU: a gang scheduler does not
    share GPUs. A pod never scheduled (`scheduled_time` empty) never ran and is dropped.
    """
    name = text(row, columns, "name")
    gpus = count(row, columns, "num_gpu")
    milli = count(row, columns, "gpu_milli")
    if milli > 1000:
        raise RowError(BAD_VALUE, f"{milli} is over 1000 (one whole GPU)", "gpu_milli")
    created = count(row, columns, "creation_time")
    deleted = count(row, columns, "deletion_time")
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
    return RawJob(name, float(created), gpus, float(deleted - start), DEFAULT_QUEUE)


FORMAT = TraceFormat(
    name="openb",
    description="Alibaba PAI 2023 openb pod list: name,num_gpu,gpu_milli,creation_time,..",
    signature=frozenset({"name", "num_gpu", "gpu_milli"}),
    required=("name", "num_gpu", "gpu_milli", "creation_time", "deletion_time"),
    optional=("scheduled_time",),
    parse=parse,
    name_column="name",
    missing_hint=(
        "the resampled openb pod lists (e.g. openb_pod_list_multigpu50.csv) have no times, "
        "so they cannot be replayed; use openb_pod_list_default.csv"
    ),
)
