"""What a trace reader returns: jobs, the trace, and the error that names file, line and column."""

from __future__ import annotations

from dataclasses import dataclass, field

# Queue of every job of a trace that has no team / virtual-cluster column.
DEFAULT_QUEUE = "default"


class TraceError(ValueError):
    """A trace (file, option or row) that cannot be read as written.

    The message reads `path:line: what is wrong (column X)`; `path`, `line` and `column`
    are kept as attributes (None where they do not apply) so callers can point at the spot.
    """

    def __init__(
        self,
        message: str,
        *,
        path: str | None = None,
        line: int | None = None,
        column: str | None = None,
    ) -> None:
        self.reason = message
        self.path = path
        self.line = line
        self.column = column
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        elif line is not None:
            where = f"line {line}: "
        what = f"{message} (column {column})" if column is not None else message
        super().__init__(where + what)


# A job that asked for part of a GPU: no GPU sharing yet, so it holds a whole one.
# An untyped job given one GPU type at random (`toposched sim --typed-share`).
TYPED_AT_RANDOM = "typed-at-random"
NOTES = {
    TYPED_AT_RANDOM: "were given one GPU type at random (--typed-share)",
}


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job to replay.

    `submit_s` counts from the trace's first submission (the first job is at 0); `duration_s`
    is the job's run time at an ideal placement; `source_line` is the 1-based line of the row
    in the file (for synthetic traces, the job's ordinal). Per GPU (one worker each): `cpus`
    millicores and `memory` bytes it needs of its node, and the GPU types it accepts
    (`gpu_types`; empty: any), for traces that say. `after`: the jobs it runs after (`NAME`,
    `NAME:ok` or `NAME:any`, as `JobSpec.after`), each submitted before it (no trace format
    has such a column yet: a pipeline is replayed from jobs made in code).
    """

    name: str
    submit_s: float
    gpus: int
    duration_s: float
    queue: str
    model: str
    source_line: int
    cpus: int = 0
    memory: int = 0
    gpu_types: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    gpu_milli: int = 0  # a share of one GPU in thousandths (1-999, `gpus` 1); 0: whole GPUs


@dataclass(frozen=True, slots=True)
class Trace:
    """The jobs of a trace in submit order (ties in file order), and what was left out.

    `skipped` counts every row that did not become a job, and `skip_reasons` counts them by
    kind: rows a format always drops (`no-gpu`, `never-started`) and, with `skip_bad=True`,
    bad rows (`missing-value`, `bad-value`, `field-count`, `duplicate-name`, `unknown-model`).
    `notes` counts kept jobs the reader had to change, by kind (`NOTES` says what each means).
    """

    jobs: tuple[TraceJob, ...]
    format: str
    path: str
    # A dict cannot be hashed; leaving it out of the hash keeps Trace hashable by its jobs.
    skip_reasons: dict[str, int] = field(default_factory=dict, hash=False)
    notes: dict[str, int] = field(default_factory=dict, hash=False)

    @property
    def skipped(self) -> int:
        return sum(self.skip_reasons.values())
