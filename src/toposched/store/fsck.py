"""Rows the store cannot read back as stored: found, mended where only unreadable characters
are lost, and ended (deleted) where a job's record says nothing usable (`toposched admin
fsck`)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from sqlalchemy import ColumnElement, LargeBinary, Text, cast, select

from toposched.common.wiretext import scrubbed
from toposched.store import schema
from toposched.store.db import CORRUPT, DELETED, SpecCheck, Store, column_problem

# The JSON columns, then the job's text ones: a text column holds whatever bytes another
# program wrote to the SQLite file.
COLUMNS = ("spec", "placement")
TEXTS = ("name", "owner", "queue", "state", "reason", "stop_kind")
LABEL_TEXTS = ("node", "key", "value")
NOT_UTF8 = "text that is not UTF-8 (bytes no encoding reads)"
SURROGATE = "text that is not UTF-8 (a lone UTF-16 surrogate)"


@dataclass(frozen=True)
class Unreadable:
    """A stored column the server cannot read as stored: a job's (by seq and name) or a node
    label's (`label` "NODE/KEY", seq 0)."""

    seq: int
    name: str
    column: str
    problem: str
    repairable: bool  # mended in place: its unreadable characters made U+FFFD
    label: bool = False

    def to_json(self) -> dict[str, object]:
        where: dict[str, object] = (
            {"label": self.name} if self.label else {"seq": self.seq, "job": self.name}
        )
        return {
            **where,
            "column": self.column,
            "problem": self.problem,
            "repairable": self.repairable,
        }

    def describe(self) -> str:
        where = f"label {self.name}" if self.label else f"job {self.name} (seq {self.seq})"
        return f"{where}: {self.column}: {self.problem}"


def _raw(store: Store, column: Any) -> ColumnElement[Any]:
    """The column's stored bytes on SQLite (its text reader would mend them); elsewhere its
    text (the database checks the encoding itself; a JSON column would come back decoded)."""
    return cast(column, LargeBinary) if store.dialect == "sqlite" else cast(column, Text)


def _text(raw: bytes | str | None) -> tuple[str | None, bool]:
    """The stored value as text, and whether it was UTF-8."""
    if raw is None or isinstance(raw, str):
        return raw, True
    try:
        return raw.decode(), True
    except UnicodeDecodeError:
        return raw.decode(errors="replace"), False


def unreadable(store: Store) -> Iterator[Unreadable]:
    """Each job column and node label the server cannot read as stored, jobs first in their
    order; read as the database holds them (not through the store's own readers, which mend
    what they can quietly)."""
    jobs = schema.jobs
    names = (*COLUMNS, *TEXTS)
    query = (
        select(jobs.c.seq, *(_raw(store, jobs.c[name]) for name in names))
        .where(jobs.c.state != DELETED)  # read by nothing, ever
        .order_by(jobs.c.seq)
    )
    labels = schema.node_labels
    by_label = select(*(_raw(store, labels.c[name]) for name in LABEL_TEXTS))
    with store.engine.connect() as conn:
        for seq, *raws in conn.execution_options(yield_per=1000).execute(query):
            read = dict(zip(names, (_text(raw) for raw in raws), strict=True))
            name = read["name"][0] or ""
            for column in names:
                text, utf8 = read[column]
                found = None if text is None else _problem(column, text, utf8, store.spec_problem)
                if found is not None:
                    yield Unreadable(seq, name, column, *found)
        for label in conn.execute(by_label):
            read = dict(zip(LABEL_TEXTS, (_text(raw) for raw in label), strict=True))
            for column, (_, utf8) in read.items():
                if not utf8:
                    where = f"{read['node'][0]}/{read['key'][0]}"
                    yield Unreadable(0, where, column, NOT_UTF8, True, label=True)


def _problem(
    column: str, text: str, utf8: bool, spec_problem: SpecCheck | None
) -> tuple[str, bool] | None:
    if column not in COLUMNS:
        return None if utf8 else (NOT_UTF8, True)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        try:
            value = json.loads(text)
        except ValueError as err:
            return f"not JSON ({err})", False
        problem = column_problem(column, value, spec_problem)
        return (SURROGATE, True) if problem is None else (problem, False)
    problem = column_problem(column, value, spec_problem)
    if problem is not None:
        return problem, False
    return None if utf8 else (NOT_UTF8, True)


class NotRepaired(ValueError):
    """A row --repair leaves as it is; the message says why."""


def repair(store: Store, found: Unreadable, ended: tuple[str, ...]) -> None:
    """Mend the column (each unreadable character made U+FFFD; nothing else changes), or, for
    a job whose spec or placement says nothing usable, delete it as `delete` does (kept under
    NAME/SEQ, its name free) once it has ended (`ended`: the ended states). A live one is
    left: its workers may still run, and the server keeps their GPUs until they are gone."""
    if found.label:
        _mend_label(store, found)
        return
    jobs = schema.jobs
    column = jobs.c[found.column]
    with store.engine.begin() as conn:
        raw, state = conn.execute(
            select(_raw(store, column), jobs.c.state).where(jobs.c.seq == found.seq)
        ).one()
        text, _ = _text(raw)
        if text is None:
            return
        if not found.repairable:
            if state not in (*ended, CORRUPT):
                raise NotRepaired(
                    f"job {found.name!r} is {state}: its workers may still run; the server "
                    "keeps their GPUs until they are gone, then --repair can end it"
                )
            name = found.name.split("/")[0]
            conn.execute(
                jobs.update()
                .where(jobs.c.seq == found.seq)
                .values(name=f"{name}/{found.seq}", state=DELETED)
            )
            return
        value: Any = scrubbed(json.loads(text)) if found.column in COLUMNS else text
        conn.execute(jobs.update().where(jobs.c.seq == found.seq).values({column: value}))


def _mend_label(store: Store, found: Unreadable) -> None:
    labels = schema.node_labels
    with store.engine.begin() as conn:
        rows = conn.execute(select(*(_raw(store, labels.c[n]) for n in LABEL_TEXTS))).all()
        for raws in rows:
            texts = [_text(raw)[0] for raw in raws]
            if f"{texts[0]}/{texts[1]}" != found.name:
                continue
            match = [
                _raw(store, labels.c[n]) == raw for n, raw in zip(LABEL_TEXTS, raws, strict=True)
            ]
            conn.execute(
                labels.update().where(*match).values(dict(zip(LABEL_TEXTS, texts, strict=True)))
            )
