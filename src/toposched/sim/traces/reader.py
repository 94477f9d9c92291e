"""`read_trace`: one CSV trace file in, an ordered, checked Trace out (the only I/O here)."""

from __future__ import annotations

import csv
import random
from collections import Counter
from collections.abc import Iterator, Mapping
from os import PathLike
from typing import TextIO

from toposched.sim.traces.catalog import ModelMix, ModelNames
from toposched.sim.traces.job import Trace, TraceError, TraceJob
from toposched.sim.traces.registry import FORMATS, detect_format, known_formats
from toposched.sim.traces.rows import (
    DUPLICATE_NAME,
    FIELD_COUNT,
    Drop,
    RawJob,
    RowError,
    TraceFormat,
)


def read_trace(
    path: str | PathLike[str],
    format: str | None = None,
    *,
    skip_bad: bool = False,
    limit: int | None = None,
    seed: int = 0,
    model_mix: Mapping[str, float] | None = None,
    model_aliases: Mapping[str, str] | None = None,
) -> Trace:
    """Read the trace at `path`.

    `format` is one of FORMATS, or None to tell it from the header. A bad row raises
    TraceError (`path:line: what (column X)`), or with `skip_bad` is skipped and counted.
    `limit` keeps the first N jobs in submit order (the whole file is still read and checked).
    Jobs of a trace without model names get models drawn from `model_mix` (default
    DEFAULT_MODEL_MIX) with `random.Random(seed)`, in submit order; model names in a trace
    must be catalog names or keys of `model_aliases`.
    """
    shown = str(path)
    if limit is not None and limit < 0:
        raise TraceError(f"limit must be >= 0, got {limit}")
    if format is not None and format not in FORMATS:
        raise TraceError(f"unknown trace format {format!r}; known formats: {known_formats()}")
    # Options are checked before the file is opened, so a bad option reads nothing.
    mix = ModelMix(model_mix)
    names = ModelNames(model_aliases)
    try:
        with open(path, encoding="utf-8-sig", newline="") as handle:
            return _read(handle, shown, format, skip_bad, limit, seed, mix, names)
    except OSError as exc:
        raise TraceError(f"cannot read the file: {exc.strerror or exc}", path=shown) from None


class _Lines:
    """csv rows with the 1-based line each starts on; csv and decoding errors name the line."""

    def __init__(self, handle: TextIO, path: str) -> None:
        self._reader = csv.reader(handle)
        self._path = path

    def __iter__(self) -> Iterator[tuple[int, list[str]]]:
        reader = self._reader
        before = 0
        try:
            for row in reader:
                line, before = before + 1, reader.line_num
                # Blank lines (a trailing newline, spacing) carry no job.
                if row and (len(row) > 1 or row[0].strip()):
                    yield line, row
        except csv.Error as exc:
            raise TraceError(f"not valid CSV: {exc}", path=self._path, line=before + 1) from None
        except UnicodeDecodeError:
            raise TraceError(
                "not UTF-8 text (is this a compressed or binary file?)",
                path=self._path,
                line=before + 1,
            ) from None


def _header(lines: Iterator[tuple[int, list[str]]], path: str) -> tuple[int, list[str]]:
    first = next(lines, None)
    if first is None:
        raise TraceError("empty file: expected a CSV header line", path=path)
    line, row = first
    return line, [cell.strip().lower() for cell in row]


def _check_names(header: list[str], path: str, line: int) -> None:
    seen: set[str] = set()
    for position, name in enumerate(header, start=1):
        if not name:
            raise TraceError(f"header field {position} is empty", path=path, line=line)
        if name in seen:
            raise TraceError(f"header names column {name!r} twice", path=path, line=line)
        seen.add(name)


def _choose(header: list[str], format: str | None, path: str, line: int) -> TraceFormat:
    if format is not None:
        return FORMATS[format]
    found = detect_format(header)
    if len(found) == 1:
        return found[0]
    shown = ",".join(header)
    if len(shown) > 120:
        shown = shown[:117] + "..."
    if not found:
        raise TraceError(
            f"cannot tell the trace format from the header {shown!r}; pass format=, "
            f"known formats: {known_formats()}",
            path=path,
            line=line,
        )
    both = ", ".join(fmt.name for fmt in found)
    raise TraceError(
        f"the header {shown!r} fits several formats ({both}); pass format=", path=path, line=line
    )


def _columns(header: list[str], fmt: TraceFormat, path: str, line: int) -> dict[str, int]:
    missing = [name for name in fmt.required if name not in header]
    if missing:
        hint = f"; {fmt.missing_hint}" if fmt.missing_hint else ""
        raise TraceError(
            f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} for format "
            f"{fmt.name} (it needs {', '.join(fmt.required)}){hint}",
            path=path,
            line=line,
        )
    used = fmt.required + tuple(name for name in fmt.optional if name in header)
    return {name: header.index(name) for name in used}


def _width_error(row: list[str], header: list[str]) -> RowError:
    found, wanted = len(row), len(header)
    if found < wanted:
        detail = f"no value for {', '.join(header[found:])}"
    else:
        detail = f"{found - wanted} extra after the last column, {header[-1]}"
    return RowError(FIELD_COUNT, f"found {found} fields, the header has {wanted} ({detail})")


def _read(
    handle: TextIO,
    path: str,
    format: str | None,
    skip_bad: bool,
    limit: int | None,
    seed: int,
    mix: ModelMix,
    names: ModelNames,
) -> Trace:
    lines = iter(_Lines(handle, path))
    header_line, header = _header(lines, path)
    # The format first: a file without a header fails as "cannot tell the format", which
    # says more than a complaint about its first row's values as column names.
    fmt = _choose(header, format, path, header_line)
    _check_names(header, path, header_line)
    columns = _columns(header, fmt, path, header_line)
    parse, width = fmt.parse, len(header)
    model_column, name_column = fmt.model_column, fmt.name_column
    parsed: list[tuple[RawJob, int]] = []
    first_line: dict[str, int] = {}
    dropped: Counter[str] = Counter()
    for line, row in lines:
        try:
            if len(row) != width:
                raise _width_error(row, header)
            job = parse(row, columns, line)
            if isinstance(job, Drop):
                dropped[job.kind] += 1
                continue
            if model_column is not None and job.model is not None:
                job = job._replace(model=names.resolve(job.model, model_column))
            if job.name in first_line:
                raise RowError(
                    DUPLICATE_NAME,
                    f"job name {job.name!r} is already used on line {first_line[job.name]}",
                    name_column,
                )
        except RowError as err:
            if not skip_bad:
                raise TraceError(err.message, path=path, line=line, column=err.column) from None
            dropped[err.kind] += 1
            continue
        first_line[job.name] = line
        parsed.append((job, line))
    return _trace(parsed, fmt.name, path, dropped, limit, seed, mix)


def _trace(
    parsed: list[tuple[RawJob, int]],
    format: str,
    path: str,
    dropped: Counter[str],
    limit: int | None,
    seed: int,
    mix: ModelMix,
) -> Trace:
    parsed.sort(key=lambda item: (item[0].submit, item[1]))
    origin = parsed[0][0].submit if parsed else 0.0
    # Drawn for every job in submit order before `limit` cuts, so a job's model does not
    # depend on how much of the trace is kept.
    missing = sum(1 for job, _ in parsed if job.model is None)
    drawn = iter(mix.draw(random.Random(seed), missing))
    kept = parsed if limit is None else parsed[:limit]
    jobs = tuple(
        TraceJob(
            job.name,
            job.submit - origin,
            job.gpus,
            job.duration,
            job.queue,
            job.model if job.model is not None else next(drawn),
            line,
            job.cpus,
            job.memory,
            job.gpu_types,
            gpu_milli=job.gpu_milli,
        )
        for job, line in kept
    )
    reasons = dict(sorted(dropped.items()))
    notes = Counter(note for job, _ in kept for note in job.notes)
    return Trace(jobs, format, path, reasons, dict(sorted(notes.items())))
