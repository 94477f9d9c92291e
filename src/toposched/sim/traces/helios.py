"""Job logs in the Helios (SC'21) and Acme (NSDI'24) schema: one reader for both clusters' CSVs."""

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
    instant,
    present,
    seconds,
    text,
)


def parse(row: Sequence[str], columns: Mapping[str, int], line: int) -> RawJob | Drop:
    """One job; its queue is its virtual cluster `vc` (Helios), else the default queue (Acme).

    The run time is `end_time - start_time`, as both READMEs define `duration`, whenever the
    row has both times: the Kalos README's own example rows carry `duration = end - submit`
    (queueing included), so the times are the safer source. Otherwise it is `duration`.
    The schema's `queue` column is the time the job queued, not a team, so it is unused.
    """
    name = text(row, columns, "job_id")
    gpus = count(row, columns, "gpu_num")
    submit = instant(row, columns, "submit_time")
    queue = text(row, columns, "vc") if "vc" in columns else DEFAULT_QUEUE
    if gpus == 0:
        return NO_GPU
    if "start_time" in columns and not present(row, columns, "start_time"):
        # Cancelled while queued: it never held a GPU, so there is no run time to replay.
        return NEVER_STARTED
    if present(row, columns, "start_time") and present(row, columns, "end_time"):
        start = instant(row, columns, "start_time")
        end = instant(row, columns, "end_time")
        if end < start:
            shown = row[columns["start_time"]].strip()
            raise RowError(BAD_VALUE, f"end is before start_time {shown}", "end_time")
        duration = end - start
    else:
        duration = seconds(row, columns, "duration")
    return RawJob(name, submit, gpus, duration, queue)


FORMAT = TraceFormat(
    name="helios",
    description="Helios / Acme job log: job_id,gpu_num,submit_time,duration[,vc,start_time,..]",
    signature=frozenset({"job_id", "gpu_num"}),
    required=("job_id", "gpu_num", "submit_time", "duration"),
    optional=("vc", "start_time", "end_time"),
    parse=parse,
    name_column="job_id",
)
