"""Rows the store cannot read back as stored: found, and repaired where only the unreadable
characters are lost (`toposched admin fsck`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import orjson
from sqlalchemy import Text, cast, select

from toposched.common.wiretext import scrubbed
from toposched.store import schema
from toposched.store.db import Store

# The JSON columns: everything else a job holds is a plain column the driver checks on insert.
COLUMNS = ("spec", "placement")


@dataclass(frozen=True)
class Unreadable:
    """A job's column that orjson, the store's reader, refuses."""

    seq: int
    name: str
    column: str
    problem: str
    repairable: bool  # JSON the standard library reads: its lone surrogates become U+FFFD

    def to_json(self) -> dict[str, object]:
        return {
            "seq": self.seq,
            "job": self.name,
            "column": self.column,
            "problem": self.problem,
            "repairable": self.repairable,
        }


def unreadable(store: Store) -> Iterator[Unreadable]:
    """Each job column orjson cannot read, in job order, read as the database holds the text
    (not through the store's own reader, which would mend it quietly)."""
    jobs = schema.jobs
    query = select(
        jobs.c.seq, jobs.c.name, *(cast(getattr(jobs.c, c), Text) for c in COLUMNS)
    ).order_by(jobs.c.seq)
    with store.engine.connect() as conn:
        for seq, name, *texts in conn.execution_options(yield_per=1000).execute(query):
            for column, text in zip(COLUMNS, texts, strict=True):
                if text is None:
                    continue
                found = _problem(text)
                if found is not None:
                    yield Unreadable(seq, name, column, *found)


def _problem(text: str) -> tuple[str, bool] | None:
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        pass
    else:
        return None
    try:
        json.loads(text)
    except ValueError as err:
        return f"not JSON ({err})", False
    return "text that is not UTF-8 (a lone UTF-16 surrogate)", True


def repair(store: Store, found: Unreadable) -> None:
    """Write the column back with each lone surrogate made U+FFFD; nothing else changes."""
    if not found.repairable:
        raise ValueError(f"job {found.name!r}: {found.column} cannot be repaired: {found.problem}")
    jobs = schema.jobs
    column = getattr(jobs.c, found.column)
    with store.engine.begin() as conn:
        text = conn.execute(select(cast(column, Text)).where(jobs.c.seq == found.seq)).scalar()
        if text is None:
            return
        value = scrubbed(json.loads(text))
        conn.execute(jobs.update().where(jobs.c.seq == found.seq).values({column: value}))
