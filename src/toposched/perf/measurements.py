"""Measured step times per placement, read from CSV text; every bad row is named."""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass

from toposched.perf.errors import PerfError

POLLUX_COLUMNS = ("placement", "local_bsz", "step_time")
SIMPLE_COLUMNS = ("model", "gpu_type", "placement", "batch", "step_time")


class MeasurementError(PerfError):
    """A measurement file that cannot be used: names the file, the row and the column."""

    def __init__(self, message: str, *, source: str, line: int | None = None, column: str = ""):
        self.source = source
        self.line = line
        where = source if line is None else f"{source}:{line}"
        text = f"{column}: {message}" if column else message
        super().__init__(f"{where}: {text}")
        self.reason = message
        self.field = column or None


@dataclass(frozen=True, slots=True)
class Measurement:
    """One measured step: a job, on GPUs of one type, `counts[i]` GPUs on node i, `batch`
    samples per GPU, `step_s` seconds per iteration. `gpu_type` None: the topology's own."""

    job: str
    gpu_type: str | None
    counts: tuple[int, ...]
    batch: int
    step_s: float
    source: str
    line: int

    @property
    def gpus(self) -> int:
        return sum(self.counts)

    @property
    def shape(self) -> tuple[int, ...]:
        """The placement up to the order of its nodes, which the model does not see."""
        return tuple(sorted(self.counts, reverse=True))


def parse_placement(text: str) -> tuple[int, ...]:
    """GPUs per node: `22` (one digit per node, Pollux's spelling), `2,2`/`2+2` (counts), or
    GPU indices as on the command line, `0,1;0,1` (any `;` makes it indices)."""
    text = text.strip()
    if ";" in text:
        nodes = [part for part in text.split(";")]
        counts = [len([g for g in part.split(",") if g.strip()]) for part in nodes]
        for part in nodes:
            if not all(g.strip().isdigit() for g in part.split(",") if g.strip()):
                raise ValueError(f"GPU indices are whole numbers, got {part!r}")
    elif "," in text or "+" in text:
        items = text.replace("+", ",").split(",")
        if not all(item.strip().isdigit() for item in items):
            raise ValueError(f"GPU counts are whole numbers, got {text!r}")
        counts = [int(item) for item in items]
    elif text.isdigit():
        counts = [int(digit) for digit in text]
    else:
        raise ValueError(f'expected "22", "2,2" or "0,1;0,1", got {text!r}')
    if not counts or any(c < 1 for c in counts):
        raise ValueError(f"every node needs at least one GPU, got {text!r}")
    return tuple(counts)


def parse_measurements(text: str, *, source: str, job: str | None = None) -> list[Measurement]:
    """Rows of one CSV file: Pollux's `placement,local_bsz,step_time[,sync_time]` for the job
    `job` (a directory names it), or `model,gpu_type,placement,batch,step_time`."""
    reader = csv.DictReader(io.StringIO(text))
    header = [name.strip() for name in reader.fieldnames or []]
    columns: tuple[str, ...]
    if job is not None and all(c in header for c in POLLUX_COLUMNS):
        batch_column, columns = "local_bsz", POLLUX_COLUMNS
    elif all(c in header for c in SIMPLE_COLUMNS):
        batch_column, columns = "batch", SIMPLE_COLUMNS
    else:
        wanted = ", ".join(SIMPLE_COLUMNS)
        if job is not None:
            wanted = f"{', '.join(POLLUX_COLUMNS)} (or {wanted})"
        raise MeasurementError(
            f"the header must name the columns {wanted}; got {', '.join(header) or 'none'}",
            source=source,
            line=1,
        )
    rows: list[Measurement] = []
    for number, raw in enumerate(reader, start=2):
        row = {(k or "").strip(): (v or "").strip() for k, v in raw.items() if k is not None}
        missing = [c for c in columns if not row.get(c)]
        if missing:
            raise MeasurementError("empty", source=source, line=number, column=missing[0])
        rows.append(_row(row, number, source, job, batch_column))
    if not rows:
        raise MeasurementError("no measurements in the file", source=source)
    return rows


def _row(
    row: dict[str, str], number: int, source: str, job: str | None, batch_column: str
) -> Measurement:
    def fail(column: str, message: str) -> MeasurementError:
        return MeasurementError(message, source=source, line=number, column=column)

    try:
        counts = parse_placement(row["placement"])
    except ValueError as err:
        raise fail("placement", str(err)) from None
    batch_text = row[batch_column]
    if not batch_text.isdigit() or int(batch_text) < 1:
        raise fail(
            batch_column, f"must be a whole number of samples per GPU >= 1, got {batch_text!r}"
        )
    try:
        step = float(row["step_time"])
    except ValueError:
        step = math.nan
    if not (math.isfinite(step) and step > 0):
        raise fail("step_time", f"must be seconds > 0, got {row['step_time']!r}")
    name = job if job is not None and "model" not in row else row["model"]
    gpu = row.get("gpu_type") or None
    return Measurement(
        job=name,
        gpu_type=gpu,
        counts=counts,
        batch=int(batch_text),
        step_s=step,
        source=source,
        line=number,
    )
