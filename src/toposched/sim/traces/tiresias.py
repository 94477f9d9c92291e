"""The Tiresias simulator CSV: `job_id,num_gpu,submit_time,iterations,model_name,duration,..`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from toposched.sim.traces.job import DEFAULT_QUEUE
from toposched.sim.traces.rows import (
    NO_GPU,
    Drop,
    RawJob,
    TraceFormat,
    count,
    number,
    seconds,
    text,
)


def parse(row: Sequence[str], columns: Mapping[str, int], line: int) -> RawJob | Drop:
    """One row; `iterations` and `interval` (the gap to the next submission) are not needed."""
    name = text(row, columns, "job_id")
    gpus = count(row, columns, "num_gpu")
    submit = number(row, columns, "submit_time")
    model = text(row, columns, "model_name")
    duration = seconds(row, columns, "duration")
    if gpus == 0:
        return NO_GPU
    return RawJob(name, submit, gpus, duration, DEFAULT_QUEUE, model)


FORMAT = TraceFormat(
    name="tiresias",
    description="Tiresias simulator: job_id,num_gpu,submit_time,iterations,model_name,duration,..",
    signature=frozenset({"job_id", "num_gpu"}),
    required=("job_id", "num_gpu", "submit_time", "model_name", "duration"),
    optional=(),
    parse=parse,
    name_column="job_id",
    model_column="model_name",
)
