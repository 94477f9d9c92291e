"""The contract between a format and the reader: row parsers, parsed rows, and field checks."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import NamedTuple

# Bad-row kinds, as counted in Trace.skip_reasons when the user asks to skip bad rows.
MISSING_VALUE = "missing-value"
BAD_VALUE = "bad-value"
FIELD_COUNT = "field-count"
DUPLICATE_NAME = "duplicate-name"
UNKNOWN_MODEL = "unknown-model"


_NAIVE_EPOCH = datetime(1970, 1, 1)


class RowError(Exception):
    """A bad row: `kind` is how it is counted when skipped, `column` where the fault is."""

    def __init__(self, kind: str, message: str, column: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.column = column


@dataclass(frozen=True, slots=True)
class Drop:
    """A well-formed row that is not a job to replay (always dropped, counted by `kind`)."""

    kind: str


# A GPU scheduler has nothing to place for a CPU-only job.
NO_GPU = Drop("no-gpu")
# A job cancelled before it ever ran has no run time to replay.
NEVER_STARTED = Drop("never-started")


class RawJob(NamedTuple):
    """A parsed row before the reader orders the trace and assigns models.

    `submit` is in seconds on the trace's own clock (any origin); `model` is the name as
    written in the trace, or None when the format has no model column. `cpus` (millicores),
    `memory` (bytes) and `gpu_types` are per GPU, as TraceJob's; `notes` names what the
    parser changed (a key of job.NOTES), counted in Trace.notes.
    """

    name: str
    submit: float
    gpus: int
    duration: float
    queue: str
    model: str | None = None
    cpus: int = 0
    memory: int = 0
    gpu_types: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    gpu_milli: int = 0  # part of one GPU, in thousandths (1-999); 0: whole GPUs


# `columns` maps each column the format uses (required, and optional ones the header has)
# to its index in the row; `line` is the row's 1-based line, for formats that name jobs by it.
RowParser = Callable[[Sequence[str], Mapping[str, int], int], RawJob | Drop]


@dataclass(frozen=True)
class TraceFormat:
    """A trace format: how to recognise its header and how to turn a row into a job."""

    name: str
    description: str
    signature: frozenset[str]
    required: tuple[str, ...]
    optional: tuple[str, ...]
    parse: RowParser
    name_column: str | None = None
    model_column: str | None = None
    missing_hint: str = ""


def text(row: Sequence[str], columns: Mapping[str, int], name: str) -> str:
    """The stripped value of column `name`; an empty value is a bad row."""
    value = row[columns[name]].strip()
    if not value:
        raise RowError(MISSING_VALUE, "empty value", name)
    return value


def count(row: Sequence[str], columns: Mapping[str, int], name: str) -> int:
    """A whole number >= 0; `4.0` is accepted because spreadsheet exports write counts so."""
    value = text(row, columns, name)
    try:
        number = int(value)
    except ValueError:
        try:
            real = float(value)
        except ValueError:
            raise RowError(BAD_VALUE, f"{value!r} is not a whole number", name) from None
        if not real.is_integer():
            raise RowError(BAD_VALUE, f"{value!r} is not a whole number", name) from None
        number = int(real)
    if number < 0:
        raise RowError(BAD_VALUE, f"{value!r} is negative", name)
    return number


def number(row: Sequence[str], columns: Mapping[str, int], name: str) -> float:
    """A finite number of seconds, of any sign (a time on the trace's own clock)."""
    value = text(row, columns, name)
    try:
        real = float(value)
    except ValueError:
        raise RowError(BAD_VALUE, f"{value!r} is not a number", name) from None
    if not math.isfinite(real):
        raise RowError(BAD_VALUE, f"{value!r} is not a finite number", name)
    return real


def seconds(row: Sequence[str], columns: Mapping[str, int], name: str) -> float:
    """A finite number of seconds >= 0 (a duration)."""
    real = number(row, columns, name)
    if real < 0:
        raise RowError(BAD_VALUE, f"{row[columns[name]].strip()!r} is negative", name)
    return real


def timestamp(row: Sequence[str], columns: Mapping[str, int], name: str) -> float:
    """An ISO date-time as seconds since the epoch; one without a UTC offset is read as UTC.

    Reading naive times as UTC keeps differences exact (no daylight-saving jumps), and only
    differences matter to a replay.
    """
    value = text(row, columns, name)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise RowError(
            BAD_VALUE, f"{value!r} is not a date-time like 2017-10-09 07:01:55", name
        ) from None
    if moment.tzinfo is None:
        # Subtracting a naive epoch is the fast way to read a naive time as UTC.
        return (moment - _NAIVE_EPOCH).total_seconds()
    return moment.timestamp()


def instant(row: Sequence[str], columns: Mapping[str, int], name: str) -> float:
    """A time written either as a number of seconds or as an ISO date-time."""
    value = text(row, columns, name)
    try:
        real = float(value)
    except ValueError:
        try:
            return timestamp(row, columns, name)
        except RowError:
            raise RowError(
                BAD_VALUE,
                f"{value!r} is neither seconds nor a date-time like 2020-06-09 18:41:01",
                name,
            ) from None
    if not math.isfinite(real):
        raise RowError(BAD_VALUE, f"{value!r} is not a finite number", name)
    return real


def present(row: Sequence[str], columns: Mapping[str, int], name: str) -> bool:
    """Whether optional column `name` is in the header and has a value in this row."""
    index = columns.get(name)
    return index is not None and bool(row[index].strip())
