"""The Philly trace as the Pollux simulator ships it: a CSV of submit time, run time, GPUs, team."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from toposched.sim.traces.rows import (
    NO_GPU,
    Drop,
    RawJob,
    TraceFormat,
    count,
    seconds,
    text,
    timestamp,
)


def parse(row: Sequence[str], columns: Mapping[str, int], line: int) -> RawJob | Drop:
    """One row: submitted at `timestamp`, ran `duration` seconds on `num_gpus`, team `cluster`."""
    gpus = count(row, columns, "num_gpus")
    duration = seconds(row, columns, "duration")
    submit = timestamp(row, columns, "timestamp")
    queue = text(row, columns, "cluster")
    if gpus == 0:
        return NO_GPU
    # The file has no job ids, so a job is named by its line: unique, and stable under
    # `limit` and skipping.
    return RawJob(f"philly-{line}", submit, gpus, duration, queue)


FORMAT = TraceFormat(
    name="philly",
    description="Microsoft Philly (Pollux CSV): timestamp,duration,num_gpus,gpu_time,cluster",
    signature=frozenset({"timestamp", "num_gpus"}),
    required=("timestamp", "duration", "num_gpus", "cluster"),
    optional=(),
    parse=parse,
)
