"""The store's operations: each call is one transaction, so a crash leaves no half change."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import (
    Connection,
    Engine,
    Integer,
    Select,
    bindparam,
    create_engine,
    event,
    func,
    select,
)
from sqlalchemy.engine import Row
from sqlalchemy.exc import DBAPIError, IntegrityError, SQLAlchemyError

from toposched.common.wiretext import scrubbed
from toposched.store import schema
from toposched.store.migrations import MigrationError, check_version, migrate

_UNSET: Any = object()
_log = logging.getLogger(__name__)


class StoreError(RuntimeError):
    """The database cannot be opened or used; the message says which and why."""


class DuplicateJob(StoreError):
    """A job of that name exists (a name is free again only once its job is deleted)."""


# What a failed write looks like in the database's own words, and what it means to a person.
_FAULTS = (
    ("locked", ("locked", "busy"), "the database is locked by another process"),
    ("disk", ("disk is full", "no space"), "the disk is full"),
    # SQLite's word for a write the system refused: a file size limit, a failing disk.
    ("disk", ("disk i/o error", "file too large"), "the disk refused a write (full, or failing)"),
    ("read_only", ("readonly", "read-only", "read only"), "the database is read-only"),
)
FAULT_KINDS = (*dict.fromkeys(kind for kind, _, _ in _FAULTS), "other")


def write_fault(err: BaseException) -> str:
    """Why a write failed, in words a person acts on (locked, disk full, read-only, else as
    the database said it)."""
    said = (str(getattr(err, "orig", None) or err).strip().splitlines() or ["unknown error"])[0]
    lowered = said.lower()
    for _, words, meaning in _FAULTS:
        if any(word in lowered for word in words):
            return f"{meaning} ({said})"
    return said


def fault_kind(cause: str) -> str:
    """One of FAULT_KINDS for a `write_fault` message (a metric's label)."""
    return next((kind for kind, _, meaning in _FAULTS if cause.startswith(meaning)), "other")


def sqlite_url(path: str | Path) -> str:
    return f"sqlite:///{Path(path)}"


@dataclass(frozen=True)
class JobRow:
    seq: int
    name: str
    owner: str
    queue: str
    priority: int
    spec: dict[str, Any]
    state: str
    reason: str
    placement: list[dict[str, Any]] | None
    attempt: int
    restarts: int
    stop_kind: str | None
    submitted_at: float
    started_at: float | None
    ended_at: float | None
    service_gpu_s: float = 0.0  # attained service as of the last start or stop
    delete_when_ended: bool = False  # deleted while live: removed once it has ended


@dataclass(frozen=True)
class HistoryRow:
    time: float
    old: str | None
    new: str
    reason: str


@dataclass(frozen=True)
class TokenRow:
    user: str
    team: str
    role: str


# The hot statements are built once: building one per call (`.values(...)`) cost more than
# SQLite's commit, and a prebuilt one hits SQLAlchemy's compiled cache every time.
_INSERT_JOB = schema.jobs.insert()
_INSERT_HISTORY = schema.job_history.insert()
_INSERT_KEY = schema.submit_keys.insert()


@dataclass(frozen=True)
class NewJob:
    """A submission to store: `add_job`'s arguments, for `add_jobs`."""

    name: str
    owner: str
    queue: str
    priority: int
    spec: Mapping[str, Any]
    time: float
    key: str | None = None


def _pending(job: NewJob) -> dict[str, Any]:
    """The columns of a job as it is first stored: pending, never started."""
    return dict(
        name=job.name,
        owner=job.owner,
        queue=job.queue,
        priority=job.priority,
        spec=dict(job.spec),
        state="pending",
        reason="submitted",
        placement=None,
        attempt=-1,
        restarts=0,
        stop_kind=None,
        submitted_at=job.time,
        started_at=None,
        ended_at=None,
    )


# A job's columns in JobRow's field order, so that a row becomes a JobRow by position: a
# mapping per row costs more than the rest of reading a page of jobs.
_JOB_COLUMNS = [schema.jobs.c[field.name] for field in fields(JobRow)]
_JOB_BY_NAME = select(*_JOB_COLUMNS).where(schema.jobs.c.name == bindparam("job_name"))
_SEQ_BY_NAME = select(schema.jobs.c.seq).where(schema.jobs.c.name == bindparam("job_name"))
# One `owner = ? AND key IN (...)` per owner: SQLite searches the primary key with it, where
# a row-value IN over (owner, key) scans the whole table.
_JOBS_BY_KEYS = (
    select(schema.submit_keys.c.key, *_JOB_COLUMNS)
    .join(schema.submit_keys, schema.submit_keys.c.job_seq == schema.jobs.c.seq)
    .where(
        schema.submit_keys.c.owner == bindparam("owner"),
        schema.submit_keys.c.key.in_(bindparam("keys", expanding=True)),
    )
)
_DELETE_STOP = schema.job_stops.delete().where(schema.job_stops.c.job_seq == bindparam("seq"))
_TOKEN = select(schema.tokens.c.user, schema.tokens.c.team, schema.tokens.c.role).where(
    schema.tokens.c.token_hash == bindparam("hash")
)


SpecCheck = Callable[[dict[str, Any]], "str | None"]


def _job(row: Row[Any], spec_problem: SpecCheck | None = None) -> JobRow:
    job = JobRow(*row)  # type: ignore[call-arg]  # columns in field order (_JOB_COLUMNS)
    problems = {
        column: problem
        for column in ("spec", "placement")
        if (problem := column_problem(column, getattr(job, column), spec_problem)) is not None
    }
    if not problems:
        return job
    # Listed by its name, in a state of its own. Its placement, where it reads, is kept: a
    # restart must know which GPUs the job's workers still use (server/recovery.py).
    column, problem = next(iter(problems.items()))
    why = f"its stored {column} cannot be read ({problem}); `toposched admin fsck` lists such rows"
    placement = None if "placement" in problems else job.placement
    return replace(job, spec={}, placement=placement, state=CORRUPT, reason=why)


def column_problem(column: str, value: Any, spec_problem: SpecCheck | None = None) -> str | None:
    """Why a job's JSON column, as read, is no spec or placement (None: it is one). A spec is
    an object, a placement a list of objects or nothing. (The store holds any object as a
    spec, `{}` in its own tests: what the server needs of one, its command above all, is the
    server's to check, with `spec_problem`.)"""
    if isinstance(value, Unreadable):
        return value.problem
    if column == "spec":
        if not isinstance(value, dict):
            return f"a JSON {type(value).__name__}, not an object"
        if spec_problem is not None:
            return spec_problem(value)
    elif value is not None and not (
        isinstance(value, list) and all(isinstance(item, dict) for item in value)
    ):
        return "not a list of workers"
    return None


class Unreadable(dict[str, Any]):
    """A JSON column's text that no reader can decode (as `read_json` returns it): the job is
    shown as `corrupt` rather than stopping a start or a list."""

    def __init__(self, problem: str) -> None:
        super().__init__()
        self.problem = problem


def _sqlite_pragmas(busy_timeout_s: float) -> Callable[[Any, Any], None]:
    def on_connect(dbapi_conn: Any, _record: Any) -> None:
        # A rollback journal, not WAL: WAL's wal-index (the -shm file) is memory-mapped, and
        # a fault of a mapped file (made immutable, truncated, on a full tmpfs) kills the
        # process with SIGBUS, which no error handling can catch. With nothing mapped (mmap_size
        # 0 as well), every fault of the data directory is an I/O error that the server turns
        # into read-only service and recovers from. FULL syncs the journal before the database,
        # which keeps a power cut from corrupting the file; TRUNCATE empties the journal rather
        # than deleting it (no directory change per commit). Measured: about 10% fewer
        # submissions per second than WAL (benchmarks/api_load.py; docs/server.md).
        dbapi_conn.text_factory = read_text
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=TRUNCATE")
        cur.execute("PRAGMA synchronous=FULL")
        cur.execute("PRAGMA mmap_size=0")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        cur.close()

    return on_connect


def _keep_stop(
    conn: Connection, seq: int, old: str | None, new: str, deadline: float | None
) -> None:
    """Keep the job's stop deadline in step with its state: stored on the way into stopping,
    dropped on the way out (only then: most transitions never touch the table)."""
    if old == "stopping" or new == "stopping":
        conn.execute(_DELETE_STOP, {"seq": seq})
    if new == "stopping" and deadline is not None:
        conn.execute(schema.job_stops.insert().values(job_seq=seq, deadline=deadline))


# One UPDATE per set of columns a transition changes (a handful of shapes in all).
_UPDATES: dict[tuple[str, ...], Any] = {}


BUSY_TIMEOUT_S = 5.0
KEEP = object()  # `set_queue`: leave the queue's idle rule as it is
# The state of a deleted job's row: no job state, so no list or count shows it.
DELETED = "deleted"
CORRUPT = "corrupt"  # a job whose stored record cannot be read (see `_job`)


@functools.cache
def _jobs_query(
    states: bool, queue: bool, owner: bool, after: bool, limit: bool, newest_first: bool
) -> Select[Any]:
    """`Store.jobs`'s query for the filters given, with their values as parameters: built
    once per combination (building one costs more than SQLite takes to answer a page)."""
    c = schema.jobs.c
    query = select(*_JOB_COLUMNS)
    if after:
        bound = bindparam("after", type_=Integer)
        query = query.where(c.seq < bound if newest_first else c.seq > bound)
    if states:
        query = query.where(c.state.in_(bindparam("states", expanding=True)))
    else:
        query = query.where(c.state != DELETED)
    if queue:
        query = query.where(c.queue == bindparam("queue"))
    if owner:
        query = query.where(c.owner == bindparam("owner"))
    query = query.order_by(c.seq.desc() if newest_first else c.seq)
    if limit:
        query = query.limit(bindparam("limit", type_=Integer))
    return query


def read_json(text: str | bytes) -> Any:
    """A JSON column's value. orjson reads what this version writes; a value an older version
    let in with a lone UTF-16 surrogate (which orjson, rightly, refuses) is read by the standard
    library and its unreadable characters made U+FFFD, so that one bad row stops no list, get
    or start."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as err:
        try:
            value = json.loads(text)
        except ValueError:
            _log.error("a stored value is not JSON (%s): %.200s", err, text)
            return Unreadable(f"not JSON: {err}")
        _log.warning(
            "a stored value holds text that is not UTF-8 (a lone surrogate); read with U+FFFD "
            "in its place: %.200s",
            text,
        )
        return scrubbed(value)


def read_text(raw: bytes) -> str:
    """A SQLite text value: one that is not UTF-8 (SQLite stores whatever bytes it is given,
    from another program or a bad disk) is read with U+FFFD for its bad bytes, so that one
    bad row stops no list, get or start; `toposched admin fsck` finds and mends it."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        _log.warning("a stored text is not UTF-8; read with U+FFFD in its place: %.200r", raw)
        return raw.decode(errors="replace")


class Store:
    """Jobs, history, queues, labels and tokens in SQLite (default) or PostgreSQL.

    `busy_timeout_s`: how long a SQLite write waits for another process's lock before it fails.
    `migrate_it`: bring the database to this version's schema (False: open only a toposched
    database at this version, as found, writing nothing to check it; `admin fsck`).
    `spec_problem`: why a stored spec (an object) is of no use to its reader, or None; a job
    whose spec is not is read as `corrupt` (the server's check: common/jobspec.py).
    """

    def __init__(
        self,
        url: str,
        *,
        busy_timeout_s: float = BUSY_TIMEOUT_S,
        migrate_it: bool = True,
        spec_problem: SpecCheck | None = None,
    ) -> None:
        self.url = url
        self.spec_problem = spec_problem
        try:
            # orjson reads the JSON columns (a job's spec, its placement) several times faster
            # than the standard library: a page of 100 jobs decodes 200 of them.
            self.engine: Engine = create_engine(url, future=True, json_deserializer=read_json)
        except (SQLAlchemyError, ImportError, ValueError) as err:
            raise StoreError(f"cannot use database {self.shown()}: {err}") from None
        self.dialect = self.engine.dialect.name
        try:
            if not migrate_it:
                # Before the pragmas, which would set the journal mode of any file given.
                self._must_exist()
                self.version = check_version(self.engine)
                self.engine.dispose()
            if self.dialect == "sqlite":
                event.listen(self.engine, "connect", _sqlite_pragmas(busy_timeout_s))
            if migrate_it:
                self.version = migrate(self.engine)
        except MigrationError as err:
            self.engine.dispose()
            raise StoreError(f"database {self.shown()}: {err}") from None
        except DBAPIError as err:  # cannot connect, not a database, no permission
            self.engine.dispose()
            raise StoreError(f"cannot open database {self.shown()}: {err.orig}") from None

    def _must_exist(self) -> None:
        """A SQLite file that is not there: connecting would make it, empty."""
        path = self.engine.url.database
        if self.dialect == "sqlite" and path and path != ":memory:" and not Path(path).is_file():
            self.engine.dispose()
            raise StoreError(f"no database at {self.shown()}: nothing was made")

    def shown(self) -> str:
        """The URL without its password, for messages."""
        try:
            from sqlalchemy.engine import make_url

            return make_url(self.url).render_as_string(hide_password=True)
        except Exception:
            return "(unparsable URL)"

    def place(self) -> str:
        """Where the data lives, for messages: a SQLite file's path, else the URL."""
        if self.dialect != "sqlite" or not self.engine.url.database:
            return self.shown()
        return self.engine.url.database.removeprefix("file:").split("?")[0]

    def close(self) -> None:
        self.engine.dispose()

    def probe(self) -> None:
        """A write that changes nothing but must reach the disk: raises as a real write would
        (locked, disk full, read-only)."""
        v = schema.schema_version
        with self.engine.begin() as conn:
            # Changed and changed back: SQLite skips an update to the same value, which would
            # then not touch the journal (an unwritable journal would pass the probe).
            conn.execute(v.update().values(version=-v.c.version))
            conn.execute(v.update().values(version=-v.c.version))

    # ------------------------------------------------------------------ jobs

    def add_job(
        self,
        *,
        name: str,
        owner: str,
        queue: str,
        priority: int,
        spec: Mapping[str, Any],
        time: float,
        key: str | None = None,
    ) -> JobRow:
        """Insert a pending job, its first history line and its idempotency `key` (if any) in
        one transaction, or raise DuplicateJob."""
        job = NewJob(name, owner, queue, priority, spec, time, key)
        return self.add_jobs([job])[0]

    def add_jobs(self, jobs: Sequence[NewJob]) -> list[JobRow]:
        """`add_job` for several jobs in one transaction (one commit for a burst of
        submissions): all are stored, or none is and DuplicateJob names the first whose name
        or key is taken."""
        rows = []
        try:
            with self.engine.begin() as conn:
                for job in jobs:
                    values = _pending(job)
                    primary = conn.execute(_INSERT_JOB, values).inserted_primary_key
                    assert primary is not None
                    seq = int(primary[0])
                    conn.execute(
                        _INSERT_HISTORY,
                        dict(
                            job_seq=seq, time=job.time, old=None, new="pending", reason="submitted"
                        ),
                    )
                    if job.key is not None:
                        conn.execute(_INSERT_KEY, dict(owner=job.owner, key=job.key, job_seq=seq))
                    rows.append(JobRow(seq=seq, **values))
        except IntegrityError as err:
            for job in jobs:
                if self.job(job.name) is not None:
                    raise DuplicateJob(f"a job named {job.name!r} already exists") from None
                if job.key is not None and self.job_by_key(job.owner, job.key) is not None:
                    raise DuplicateJob(f"idempotency key {job.key!r} was used already") from None
            names = ", ".join(repr(job.name) for job in jobs)
            raise StoreError(f"job(s) {names} could not be stored: {err.orig}") from None
        return rows

    def transition(
        self,
        name: str,
        old: str | None,
        new: str,
        reason: str,
        time: float,
        *,
        placement: list[dict[str, Any]] | None = _UNSET,
        attempt: int | None = None,
        restarts: int | None = None,
        stop_kind: str | None = _UNSET,
        started_at: float | None = _UNSET,
        ended_at: float | None = _UNSET,
        stop_deadline: float | None = None,
        service_gpu_s: float | None = None,
    ) -> None:
        """Move a job to `new` and add the history line, in one transaction. A job moved to
        stopping keeps `stop_deadline` (when its workers are killed) until it leaves that state;
        `service_gpu_s`, if given, is the job's attained service now."""
        values: dict[str, Any] = {"state": new, "reason": reason}
        for key, value in (
            ("placement", placement),
            ("stop_kind", stop_kind),
            ("started_at", started_at),
            ("ended_at", ended_at),
        ):
            if value is not _UNSET:
                values[key] = value
        if attempt is not None:
            values["attempt"] = attempt
        if restarts is not None:
            values["restarts"] = restarts
        if service_gpu_s is not None:
            values["service_gpu_s"] = service_gpu_s
        update = _UPDATES.get(tuple(values))
        if update is None:
            update = _UPDATES[tuple(values)] = (
                schema.jobs.update()
                .where(schema.jobs.c.name == bindparam("job_name"))
                .values({key: bindparam(key) for key in values})
            )
        with self.engine.begin() as conn:
            seq = conn.execute(_SEQ_BY_NAME, {"job_name": name}).scalar()
            if seq is None:
                raise StoreError(f"no job named {name!r} in the store")
            conn.execute(update, {**values, "job_name": name})
            conn.execute(
                _INSERT_HISTORY,
                dict(job_seq=seq, time=time, old=old, new=new, reason=reason),
            )
            _keep_stop(conn, seq, old, new, stop_deadline)

    def ended_to_delete(self, ended: Iterable[str]) -> list[JobRow]:
        """The jobs in a state of `ended` whose delete was asked while they were live (a crash
        came between their end and their removal)."""
        j = schema.jobs
        query = select(*_JOB_COLUMNS).where(j.c.delete_when_ended == 1, j.c.state.in_(list(ended)))
        with self.engine.connect() as conn:
            return [_job(row, self.spec_problem) for row in conn.execute(query)]

    def delete_when_ended(self, name: str) -> None:
        """Mark live job `name` to be removed once it has ended (a delete of a live job)."""
        with self.engine.begin() as conn:
            conn.execute(
                schema.jobs.update().where(schema.jobs.c.name == name).values(delete_when_ended=1)
            )

    def set_stop_kind(self, name: str, kind: str | None) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                schema.jobs.update().where(schema.jobs.c.name == name).values(stop_kind=kind)
            )

    def stop_deadline(self, name: str) -> float | None:
        """When the workers of stopping job `name` are killed, if that was stored."""
        s, j = schema.job_stops, schema.jobs
        query = select(s.c.deadline).join(j, j.c.seq == s.c.job_seq).where(j.c.name == name)
        with self.engine.connect() as conn:
            deadline = conn.execute(query).scalar()
        return None if deadline is None else float(deadline)

    def remove_job(self, name: str, ended: Iterable[str], time: float) -> bool:
        """Delete job `name` if its state is one of `ended`; whether it was. Its name is free at
        once: the row is kept for the record (with its history and a last line) in state
        `deleted` under `NAME/SEQ`, a name no job can have, and no list shows it; its
        idempotency keys go. Kept rather than dropped: SQLite would give its seq to the next
        job, and a page that went on after that seq would skip it."""
        j = schema.jobs
        with self.engine.begin() as conn:
            query = select(j.c.seq, j.c.state).where(j.c.name == name, j.c.state.in_(list(ended)))
            found = conn.execute(query).first()
            if found is None:
                return False
            seq, state = found
            conn.execute(schema.submit_keys.delete().where(schema.submit_keys.c.job_seq == seq))
            conn.execute(
                j.update().where(j.c.seq == seq).values(name=f"{name}/{seq}", state=DELETED)
            )
            conn.execute(
                _INSERT_HISTORY,
                dict(job_seq=seq, time=time, old=state, new=DELETED, reason="deleted"),
            )
        return True

    def job_by_key(self, owner: str, key: str) -> JobRow | None:
        """The job `owner` submitted with idempotency key `key`, if any."""
        return self.jobs_by_keys([(owner, key)]).get((owner, key))

    def jobs_by_keys(self, keys: Iterable[tuple[str, str]]) -> dict[tuple[str, str], JobRow]:
        """`job_by_key` for many (owner, key) pairs in one read; those not found are left out."""
        by_owner: dict[str, list[str]] = {}
        for owner, key in keys:
            by_owner.setdefault(owner, []).append(key)
        if not by_owner:
            return {}
        found: dict[tuple[str, str], JobRow] = {}
        with self.engine.connect() as conn:
            for owner, wanted in by_owner.items():
                for row in conn.execute(_JOBS_BY_KEYS, {"owner": owner, "keys": wanted}):
                    found[(owner, row[0])] = JobRow(*row[1:])
        return found

    def job(self, name: str) -> JobRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(_JOB_BY_NAME, {"job_name": name}).first()
        return None if row is None else _job(row, self.spec_problem)

    def jobs(
        self,
        *,
        states: Iterable[str] | None = None,
        queue: str | None = None,
        owner: str | None = None,
        limit: int | None = None,
        newest_first: bool = False,
        after_seq: int | None = None,
    ) -> list[JobRow]:
        """Jobs matching every filter given, in submission order (or newest first);
        `after_seq`: only those after the job of that `seq` in that order (a page's
        continuation: seq only grows, and is never given again, so pages neither skip nor repeat
        a job). A deleted job is in no list."""
        query = _jobs_query(
            states is not None, queue is not None, owner is not None, after_seq is not None,
            limit is not None, newest_first,
        )  # fmt: skip
        values = {
            "states": list(states or ()),
            "queue": queue,
            "owner": owner,
            "after": after_seq,
            "limit": limit,
        }
        with self.engine.connect() as conn:
            return [_job(row, self.spec_problem) for row in conn.execute(query, values)]

    def history(self, name: str) -> list[HistoryRow]:
        h, j = schema.job_history, schema.jobs
        query = (
            select(h.c.time, h.c.old, h.c.new, h.c.reason)
            .join(j, j.c.seq == h.c.job_seq)
            .where(j.c.name == name)
            .order_by(h.c.id)
        )
        with self.engine.connect() as conn:
            return [HistoryRow(*row) for row in conn.execute(query)]

    def count_by_state(self) -> dict[str, int]:
        query = (
            select(schema.jobs.c.state, func.count())
            .where(schema.jobs.c.state != DELETED)
            .group_by(schema.jobs.c.state)
        )
        with self.engine.connect() as conn:
            return {state: int(n) for state, n in conn.execute(query)}

    def count_by_queue(self, states: Iterable[str]) -> dict[tuple[str, str], int]:
        """Jobs in `states`, counted by (queue, state)."""
        j = schema.jobs
        query = (
            select(j.c.queue, j.c.state, func.count())
            .where(j.c.state.in_(list(states)))
            .group_by(j.c.queue, j.c.state)
        )
        with self.engine.connect() as conn:
            return {(queue, state): int(n) for queue, state, n in conn.execute(query)}

    # ------------------------------------------------------------------ queues and labels

    def set_queue(self, name: str, guaranteed_gpus: int | None = None, idle: Any = KEEP) -> None:
        """Set what is given of a queue's share and idle rule (`idle=None` removes the rule);
        a new queue's share is 0 unless given."""
        q = schema.queues
        values: dict[str, Any] = {}
        if guaranteed_gpus is not None:
            values["guaranteed_gpus"] = guaranteed_gpus
        if idle is not KEEP:
            values["idle"] = None if idle is None else json.dumps(idle, sort_keys=True)
        with self.engine.begin() as conn:
            done = conn.execute(q.update().where(q.c.name == name).values(**values)).rowcount
            if not done:
                conn.execute(q.insert().values(name=name, **{"guaranteed_gpus": 0, **values}))

    def queues(self) -> dict[str, int]:
        q = schema.queues
        with self.engine.connect() as conn:
            rows = conn.execute(select(q.c.name, q.c.guaranteed_gpus).order_by(q.c.name))
            return {name: int(gpus) for name, gpus in rows}

    def queue_idle_rules(self) -> dict[str, dict[str, Any]]:
        """Each queue's idle rule, as stored (the wire's IdleIn), for the queues that have one."""
        q = schema.queues
        with self.engine.connect() as conn:
            rows = conn.execute(select(q.c.name, q.c.idle).where(q.c.idle.is_not(None)))
            return {name: read_json(idle) for name, idle in rows}

    def set_label(self, node: str, key: str, value: str | None) -> None:
        t = schema.node_labels
        with self.engine.begin() as conn:
            conn.execute(t.delete().where(t.c.node == node, t.c.key == key))
            if value is not None:
                conn.execute(t.insert().values(node=node, key=key, value=value))

    def labels(self) -> dict[str, dict[str, str]]:
        t = schema.node_labels
        out: dict[str, dict[str, str]] = {}
        with self.engine.connect() as conn:
            for node, key, value in conn.execute(select(t.c.node, t.c.key, t.c.value)):
                out.setdefault(node, {})[key] = value
        return out

    # ------------------------------------------------------------------ tokens

    def add_token(self, token_hash: str, user: str, team: str, role: str, time: float) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                schema.tokens.insert().values(
                    token_hash=token_hash, user=user, team=team, role=role, created_at=time
                )
            )

    def token(self, token_hash: str) -> TokenRow | None:
        with self.engine.connect() as conn:
            row = conn.execute(_TOKEN, {"hash": token_hash}).first()
        return None if row is None else TokenRow(*row)
