"""The durable store against real SQLite and PostgreSQL databases, with exact expected values."""

from __future__ import annotations

import itertools
import json
import random
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, event, func, inspect, select, text
from sqlalchemy.exc import IntegrityError, OperationalError

from tests.integration.postgres import free_port
from toposched.store import (
    SCHEMA_VERSION,
    DuplicateJob,
    HistoryRow,
    JobRow,
    Store,
    StoreError,
    TokenRow,
    fault_kind,
    schema,
    sqlite_url,
    write_fault,
)
from toposched.store.migrations import MIGRATIONS

TABLES = {
    "schema_version",
    "jobs",
    "job_history",
    "queues",
    "node_labels",
    "tokens",
    "submit_keys",
    "job_stops",
}
PASSWORD = "s3cret-pw"


@pytest.fixture
def open_store(db_url: str) -> Iterator[Callable[[], Store]]:
    """Opens Stores on the test's database and closes them all at the end."""
    opened: list[Store] = []

    def open_() -> Store:
        store = Store(db_url)
        opened.append(store)
        return store

    yield open_
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: Callable[[], Store]) -> Store:
    return open_store()


def add(
    store: Store,
    name: str,
    *,
    owner: str = "alice",
    queue: str = "default",
    priority: int = 0,
    spec: dict[str, Any] | None = None,
    time: float = 100.0,
) -> JobRow:
    return store.add_job(
        name=name,
        owner=owner,
        queue=queue,
        priority=priority,
        spec={"gpus": 1} if spec is None else spec,
        time=time,
    )


def count_rows(store: Store, table: Any) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def names(rows: list[JobRow]) -> list[str]:
    return [row.name for row in rows]


# ---------------------------------------------------------------------- opening and migrating


def test_fresh_database_migrates_to_schema_version(store: Store) -> None:
    assert store.version == SCHEMA_VERSION
    with store.engine.connect() as conn:
        assert set(inspect(conn).get_table_names()) == TABLES
        assert conn.execute(select(schema.schema_version.c.version)).all() == [(SCHEMA_VERSION,)]
    assert store.jobs() == []


def test_reopening_is_a_no_op_and_keeps_data(open_store: Callable[[], Store]) -> None:
    first = open_store()
    row = add(first, "keep", spec={"gpus": 2})
    first.set_queue("research", 4)
    first.close()

    again = open_store()
    assert again.version == SCHEMA_VERSION
    with again.engine.connect() as conn:
        # Still exactly one version row: a reopen neither re-runs nor re-records migrations.
        assert conn.execute(select(schema.schema_version.c.version)).all() == [(SCHEMA_VERSION,)]
    assert again.jobs() == [row]
    assert again.history("keep") == [HistoryRow(100.0, None, "pending", "submitted")]
    assert again.queues() == {"research": 4}


def test_database_from_a_newer_toposched_is_refused(
    db_url: str, open_store: Callable[[], Store]
) -> None:
    open_store().close()
    engine = create_engine(db_url)
    with engine.begin() as conn:
        conn.execute(schema.schema_version.update().values(version=SCHEMA_VERSION + 1))

    with pytest.raises(StoreError) as caught:
        Store(db_url)
    message = str(caught.value)
    assert f"schema version {SCHEMA_VERSION + 1}" in message
    assert f"({SCHEMA_VERSION})" in message
    assert "upgrade toposched" in message
    # Refusing must not "fix" the version row: the newer toposched still owns this database.
    with engine.connect() as conn:
        assert conn.execute(select(schema.schema_version.c.version)).all() == [
            (SCHEMA_VERSION + 1,)
        ]
    engine.dispose()


@pytest.mark.parametrize(
    ("url", "prefix", "detail"),
    [
        pytest.param(
            "postgresql+psycopg://alice:{pw}@127.0.0.1:{port}/toposched",
            "cannot open database postgresql+psycopg://alice:***@127.0.0.1:{port}/toposched: ",
            "Connection refused",
            id="postgresql-nothing-listening",
        ),
        pytest.param(
            "sqlite:///{tmp}/no/such/dir/store.db",
            "cannot open database sqlite:///{tmp}/no/such/dir/store.db: ",
            "unable to open database file",
            id="sqlite-missing-directory",
        ),
        pytest.param(
            "nosuchdb://alice:{pw}@db.example/toposched",
            "cannot use database nosuchdb://alice:***@db.example/toposched: ",
            "nosuchdb",
            id="unknown-dialect",
        ),
        pytest.param(
            "alice:{pw} at the database, please",
            "cannot use database (unparsable URL): ",
            "parse",
            id="not-a-url",
        ),
    ],
)
def test_unusable_url_is_a_store_error_without_the_password(
    url: str, prefix: str, detail: str, tmp_path: Path
) -> None:
    fill = {"pw": PASSWORD, "port": free_port(), "tmp": tmp_path}
    with pytest.raises(StoreError) as caught:
        Store(url.format(**fill))
    message = str(caught.value)
    assert message.startswith(prefix.format(**fill))
    assert detail in message
    assert PASSWORD not in message


def test_sqlite_file_that_is_not_a_database_is_a_store_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    text = "these are notes, not a database\n" * 64
    path.write_text(text)
    with pytest.raises(StoreError, match=r"^cannot open database sqlite:///.*: file is not a"):
        Store(sqlite_url(path))
    assert path.read_text() == text


# ---------------------------------------------------------------------- jobs


def test_add_job_returns_the_stored_row(store: Store) -> None:
    row = add(store, "train", owner="bob", queue="research", priority=5, time=12.5)
    assert row == JobRow(
        seq=1,
        name="train",
        owner="bob",
        queue="research",
        priority=5,
        spec={"gpus": 1},
        state="pending",
        reason="submitted",
        placement=None,
        attempt=-1,
        restarts=0,
        stop_kind=None,
        submitted_at=12.5,
        started_at=None,
        ended_at=None,
    )
    assert store.job("train") == row
    assert store.job("nope") is None
    assert store.history("train") == [HistoryRow(12.5, None, "pending", "submitted")]


def test_duplicate_name_raises_and_changes_nothing(store: Store) -> None:
    row = add(store, "train")
    with pytest.raises(DuplicateJob, match=r"^a job named 'train' already exists$"):
        add(store, "train", owner="mallory", queue="other", priority=9, time=200.0)
    assert store.jobs() == [row]
    assert store.history("train") == [HistoryRow(100.0, None, "pending", "submitted")]
    assert count_rows(store, schema.job_history) == 1


def test_jobs_order_and_filters(store: Store) -> None:
    add(store, "a", owner="alice", queue="default")
    add(store, "b", owner="bob", queue="research")
    add(store, "c", owner="alice", queue="research")
    add(store, "d", owner="bob", queue="default")
    add(store, "e", owner="alice", queue="default")
    store.transition("b", "pending", "running", "placed", 101.0)
    store.transition("c", "pending", "running", "placed", 102.0)
    store.transition("d", "pending", "failed", "bad spec", 103.0)

    assert names(store.jobs()) == ["a", "b", "c", "d", "e"]
    assert [row.seq for row in store.jobs()] == [1, 2, 3, 4, 5]
    assert names(store.jobs(states=["running"])) == ["b", "c"]
    assert names(store.jobs(states=("pending", "failed"))) == ["a", "d", "e"]
    assert names(store.jobs(states=[])) == []
    assert names(store.jobs(queue="research")) == ["b", "c"]
    assert names(store.jobs(owner="alice")) == ["a", "c", "e"]
    assert names(store.jobs(owner="bob", queue="default")) == ["d"]
    assert names(store.jobs(owner="alice", states=["running"])) == ["c"]
    assert names(store.jobs(owner="nobody")) == []
    assert names(store.jobs(limit=2)) == ["a", "b"]
    assert names(store.jobs(newest_first=True)) == ["e", "d", "c", "b", "a"]
    assert names(store.jobs(newest_first=True, limit=2)) == ["e", "d"]
    assert names(store.jobs(owner="alice", newest_first=True, limit=2)) == ["e", "c"]


def test_pages_after_a_seq_neither_skip_nor_repeat_while_jobs_are_added(store: Store) -> None:
    # Property-style, seeded: pages of random sizes, read between random bursts of submits,
    # list every job the filter matches exactly once, on each backend.
    rng = random.Random(20)
    made: list[str] = []
    for i in range(12):
        add(store, f"j{i:03d}", queue=rng.choice(["a", "b"]))
        made.append(f"j{i:03d}")
    seen: list[str] = []
    after: int | None = None
    while True:
        page = store.jobs(queue="a", limit=rng.randint(1, 4), after_seq=after)
        seen += names(page)
        if not page and len(made) > 40:
            break
        after = page[-1].seq if page else after
        for _ in range(rng.randint(0, 3) if len(made) <= 40 else 0):
            name = f"j{len(made):03d}"
            add(store, name, queue=rng.choice(["a", "b"]))
            made.append(name)
    assert seen == names(store.jobs(queue="a"))
    assert len(seen) == len(set(seen))
    assert store.jobs(after_seq=10**9) == []
    last = store.jobs()[-1]
    assert store.jobs(after_seq=last.seq - 1) == [last]
    back = store.jobs(queue="a", newest_first=True, limit=3, after_seq=last.seq + 1)
    assert names(back) == seen[::-1][:3]
    assert (
        names(store.jobs(queue="a", newest_first=True, after_seq=back[-1].seq)) == (seen[::-1][3:])
    )


def test_spec_and_placement_json_round_trip_exactly(
    store: Store, open_store: Callable[[], Store]
) -> None:
    spec: dict[str, Any] = {
        "zeta": "last key first: order is kept",
        "name": "训练-ü ☃ 🚀",
        "gpus": 8,
        "nested": {
            "list": [1, 2.5, "três", None, True, False, {"deep": ["ŝ", [], {}]}],
            "empty": {},
            "none": None,
        },
        "big": 2**53 + 1,
        "tiny": 1e-300,
        "negative": -0.1,
        "quote": 'he said "hi"\n\tthen \\ left',
    }
    placement: list[dict[str, Any]] = [
        {"node": "nœud-1", "gpus": [0, 1, 2, 3]},
        {"node": "n2", "gpus": []},
    ]
    add(store, "json", spec=spec)
    store.transition("json", "pending", "running", "placed", 101.0, placement=placement)

    # A second Store reads what the first wrote: nothing comes from a cache.
    row = open_store().job("json")
    assert row is not None
    assert row.spec == spec
    assert row.placement == placement
    assert json.dumps(row.spec) == json.dumps(spec)  # the same keys in the same order
    assert type(row.spec["big"]) is int
    assert type(row.spec["nested"]["list"][1]) is float


def test_transition_updates_only_what_is_given(store: Store) -> None:
    other = add(store, "other", time=5.0)
    first = expected = add(store, "j", time=10.0)
    gang = [{"node": "n1", "gpus": [0, 1]}]

    steps: list[tuple[tuple[str | None, str, str, float], dict[str, Any]]] = [
        (("pending", "running", "placed", 20.0), {"placement": gang, "attempt": 0}),
        (("running", "running", "started", 21.0), {"started_at": 21.0}),
        (("running", "pending", "preempted", 30.0), {"placement": None, "stop_kind": "preempt"}),
        (("pending", "pending", "still waiting", 35.0), {}),
        (("pending", "running", "placed", 40.0), {"placement": gang, "attempt": 1, "restarts": 0}),
        (("running", "pending", "gpu lost", 45.0), {"restarts": 1, "stop_kind": None}),
        (("pending", "succeeded", "exit 0", 50.0), {"ended_at": 50.0, "attempt": 2}),
    ]
    history = [HistoryRow(10.0, None, "pending", "submitted")]
    for (old, new, reason, time), fields in steps:
        store.transition("j", old, new, reason, time, **fields)
        expected = replace(expected, state=new, reason=reason, **fields)
        history.append(HistoryRow(time, old, new, reason))
        assert store.job("j") == expected
        assert store.history("j") == history

    assert store.job("j") == replace(
        first,
        state="succeeded",
        reason="exit 0",
        placement=gang,
        attempt=2,
        restarts=1,
        stop_kind=None,
        started_at=21.0,
        ended_at=50.0,
    )
    assert store.job("other") == other
    assert store.history("other") == [HistoryRow(5.0, None, "pending", "submitted")]
    assert count_rows(store, schema.job_history) == 2 + len(steps)


def test_set_stop_kind_changes_only_stop_kind(store: Store) -> None:
    row = add(store, "j")
    store.set_stop_kind("j", "drain")
    assert store.job("j") == replace(row, stop_kind="drain")
    store.set_stop_kind("j", None)
    assert store.job("j") == row
    assert len(store.history("j")) == 1


def test_transition_of_an_unknown_job_raises_and_adds_no_history(store: Store) -> None:
    add(store, "known")
    with pytest.raises(StoreError, match=r"^no job named 'ghost' in the store$"):
        store.transition("ghost", "pending", "running", "placed", 1.0)
    assert count_rows(store, schema.job_history) == 1
    assert store.history("ghost") == []
    assert store.count_by_state() == {"pending": 1}


def test_count_by_state(store: Store) -> None:
    assert store.count_by_state() == {}
    for name in "abcde":
        add(store, name)
    store.transition("a", "pending", "running", "placed", 1.0)
    store.transition("b", "pending", "running", "placed", 1.0)
    store.transition("c", "pending", "failed", "oops", 1.0)
    assert store.count_by_state() == {"pending": 2, "running": 2, "failed": 1}


def test_count_by_queue(store: Store) -> None:
    assert store.count_by_queue(["pending"]) == {}
    for name, queue in (("a", "ml"), ("b", "ml"), ("c", "ml"), ("d", "cv")):
        add(store, name, queue=queue)
    store.transition("a", "pending", "running", "placed", 1.0)
    store.transition("c", "pending", "failed", "oops", 1.0)
    assert store.count_by_queue(["pending", "running"]) == {
        ("ml", "pending"): 1,
        ("ml", "running"): 1,
        ("cv", "pending"): 1,
    }


# ---------------------------------------------------------------------- atomicity


def test_failed_history_insert_leaves_the_job_unchanged(store: Store) -> None:
    row = add(store, "j")
    # job_history.time is NOT NULL: the UPDATE of jobs succeeds, then the INSERT violates it.
    with pytest.raises(IntegrityError):
        store.transition(
            "j",
            "pending",
            "running",
            "placed",
            None,  # type: ignore[arg-type]
            placement=[{"node": "n1", "gpus": [0]}],
            attempt=0,
            started_at=1.0,
        )
    assert store.job("j") == row
    assert store.history("j") == [HistoryRow(100.0, None, "pending", "submitted")]


def test_history_insert_failing_mid_transaction_rolls_back(store: Store) -> None:
    row = add(store, "j")
    executed: list[str] = []

    # Fails the INSERT into job_history as it reaches the driver, whichever way the store builds
    # it, after the statements before it in the same transaction have run.
    def fail_history_insert(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        executed.append(" ".join(statement.split()).upper())
        if executed[-1].startswith("INSERT INTO JOB_HISTORY"):
            raise RuntimeError("history insert failed")

    event.listen(store.engine, "before_cursor_execute", fail_history_insert)
    try:
        with pytest.raises(RuntimeError, match="history insert failed"):
            store.transition("j", "pending", "running", "placed", 1.0, attempt=0, restarts=3)
        # Honest failure: the jobs row had been updated inside the transaction when it struck.
        assert any(s.startswith("UPDATE JOBS SET") for s in executed), executed
        executed.clear()
        with pytest.raises(RuntimeError, match="history insert failed"):
            add(store, "k")
        assert any(s.startswith("INSERT INTO JOBS ") for s in executed), executed
    finally:
        event.remove(store.engine, "before_cursor_execute", fail_history_insert)

    assert store.jobs() == [row]
    assert store.history("j") == [HistoryRow(100.0, None, "pending", "submitted")]
    assert count_rows(store, schema.job_history) == 1
    # The name of the rolled-back job is free again.
    assert add(store, "k").name == "k"


def test_a_submit_key_finds_its_job_for_its_owner_only(store: Store) -> None:
    row = store.add_job(
        name="keyed", owner="alice", queue="q", priority=0, spec={}, time=1.0, key="k1"
    )
    assert store.job_by_key("alice", "k1") == row
    assert store.job_by_key("bob", "k1") is None
    assert store.job_by_key("alice", "k2") is None
    # A key names one job: a second job with it is refused, and nothing of it is stored.
    with pytest.raises(DuplicateJob, match="idempotency key 'k1'"):
        store.add_job(
            name="again", owner="alice", queue="q", priority=0, spec={}, time=2.0, key="k1"
        )
    assert names(store.jobs()) == ["keyed"]
    # Another owner may choose the same key.
    other = store.add_job(
        name="bobs", owner="bob", queue="q", priority=0, spec={}, time=3.0, key="k1"
    )
    assert store.job_by_key("bob", "k1") == other


def test_a_stop_deadline_lives_while_the_job_is_stopping(store: Store) -> None:
    add(store, "j")
    store.transition("j", "pending", "running", "placed", 1.0, attempt=0)
    assert store.stop_deadline("j") is None
    store.transition(
        "j", "running", "stopping", "cancel", 2.0, stop_kind="cancel", stop_deadline=12.0
    )
    assert store.stop_deadline("j") == 12.0
    store.transition("j", "stopping", "cancelled", "stopped", 5.0, stop_kind=None)
    assert store.stop_deadline("j") is None
    assert count_rows(store, schema.job_stops) == 0


def test_a_version_1_database_is_migrated_with_its_jobs(db_url: str) -> None:
    engine = create_engine(db_url)
    with engine.begin() as conn:
        schema.metadata.create_all(conn, tables=[schema.schema_version])
        MIGRATIONS[0](conn)
        conn.execute(schema.schema_version.insert().values(version=1))
        conn.execute(
            schema.jobs.insert().values(
                name="before",
                owner="a",
                queue="q",
                priority=0,
                spec={},
                state="pending",
                reason="submitted",
                attempt=-1,
                restarts=0,
                submitted_at=1.0,
            )
        )
        conn.execute(text("INSERT INTO queues (name, guaranteed_gpus) VALUES ('q', 4)"))
    engine.dispose()
    store = Store(db_url)
    try:
        assert store.version == SCHEMA_VERSION == 6
        assert store.queues() == {"q": 4} and store.queue_idle_rules() == {}  # v5: no rule
        rule = {"after": 1800.0, "below": 5.0, "action": "stop"}
        store.set_queue("q", idle=rule)
        assert store.queues() == {"q": 4} and store.queue_idle_rules() == {"q": rule}
        store.set_queue("q", 2)
        assert store.queues() == {"q": 2} and store.queue_idle_rules() == {"q": rule}
        store.set_queue("q", idle=None)
        assert store.queue_idle_rules() == {}
        assert names(store.jobs()) == ["before"]
        before = store.job("before")
        assert before is not None and before.service_gpu_s == 0.0  # v3: no service yet
        assert not before.delete_when_ended  # v4: no delete asked
        store.delete_when_ended("before")
        marked = store.job("before")
        assert marked is not None and marked.delete_when_ended
        store.transition("before", "pending", "running", "started", 3.0, service_gpu_s=42.5)
        after_start = store.job("before")
        assert after_start is not None and after_start.service_gpu_s == 42.5
        store.add_job(name="after", owner="a", queue="q", priority=0, spec={}, time=2.0, key="k")
        assert store.job_by_key("a", "k") is not None
        # v6: a state name longer than 16 characters, in the job and in its history.
        why = "dependency before ended failed; it had to succeed"
        store.transition("after", "pending", "dependency-failed", why, 4.0, ended_at=4.0)
        ended = store.job("after")
        assert ended is not None and ended.state == "dependency-failed"
        assert store.history("after")[-1].new == "dependency-failed"
        assert names(store.jobs(states=["dependency-failed"])) == ["after"]
    finally:
        store.close()


def test_a_probe_writes_nothing_and_fails_as_writes_do(tmp_path: Path) -> None:
    url = sqlite_url(tmp_path / "p.db")
    Store(url).close()
    store = Store(url)
    store.probe()
    assert store.version == SCHEMA_VERSION
    store.close()
    read_only = Store(f"sqlite:///file:{tmp_path / 'p.db'}?mode=ro&uri=true")
    try:
        with pytest.raises(OperationalError) as caught:
            read_only.probe()
        assert write_fault(caught.value).startswith("the database is read-only (")
        assert read_only.place() == str(tmp_path / "p.db")
    finally:
        read_only.close()


@pytest.mark.parametrize(
    ("said", "meaning", "kind"),
    [
        ("database is locked", "the database is locked by another process", "locked"),
        ("database or disk is full", "the disk is full", "disk"),
        ("disk I/O error", "the disk refused a write (full, or failing)", "disk"),
        ("attempt to write a readonly database", "the database is read-only", "read_only"),
        ("server closed the connection", "server closed the connection", "other"),
    ],
)
def test_write_faults_are_named_for_people_and_metrics(said: str, meaning: str, kind: str) -> None:
    cause = write_fault(OperationalError("UPDATE jobs", {}, Exception(said)))
    assert cause.startswith(meaning)
    assert fault_kind(cause) == kind


# ---------------------------------------------------------------------- queues, labels, tokens


def test_queues_insert_then_update(store: Store) -> None:
    assert store.queues() == {}
    store.set_queue("research", 4)
    store.set_queue("default", 0)
    assert store.queues() == {"default": 0, "research": 4}
    store.set_queue("research", 16)
    store.set_queue("default", 0)  # the same value again: still one row
    assert store.queues() == {"default": 0, "research": 16}
    assert count_rows(store, schema.queues) == 2


def test_labels_set_overwrite_and_remove(store: Store) -> None:
    assert store.labels() == {}
    store.set_label("n1", "zone", "a")
    store.set_label("n1", "rack", "r1")
    store.set_label("n2", "zone", "b")
    assert store.labels() == {"n1": {"zone": "a", "rack": "r1"}, "n2": {"zone": "b"}}
    store.set_label("n1", "zone", "c")
    assert store.labels() == {"n1": {"zone": "c", "rack": "r1"}, "n2": {"zone": "b"}}
    store.set_label("n1", "rack", None)
    store.set_label("n3", "never", None)  # removing a label that is not there is a no-op
    assert store.labels() == {"n1": {"zone": "c"}, "n2": {"zone": "b"}}
    store.set_label("n2", "zone", None)
    assert store.labels() == {"n1": {"zone": "c"}}
    assert count_rows(store, schema.node_labels) == 1


def test_tokens(store: Store) -> None:
    assert count_rows(store, schema.tokens) == 0
    assert store.token("0" * 64) is None
    store.add_token("a" * 64, "alice", "ml", "admin", 1.0)
    store.add_token("b" * 64, "bøb", "vision", "user", 2.0)
    assert store.token("a" * 64) == TokenRow("alice", "ml", "admin")
    assert store.token("b" * 64) == TokenRow("bøb", "vision", "user")
    assert store.token("c" * 64) is None
    assert count_rows(store, schema.tokens) == 2


# ---------------------------------------------------------------------- concurrency

THREADS, PER_THREAD = 8, 50


def test_concurrent_writers_lose_nothing(store: Store) -> None:
    # All threads start together so their transactions really contend for the database.
    start = threading.Barrier(THREADS)

    def writer(t: int) -> None:
        start.wait(timeout=30)
        for i in range(PER_THREAD):
            add(store, f"w{t}-{i:02d}", owner=f"u{t}", priority=i, spec={"t": t, "i": i})

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        for future in [pool.submit(writer, t) for t in range(THREADS)]:
            future.result()  # re-raises a writer's error, e.g. "database is locked"

    rows = store.jobs()
    assert len(rows) == THREADS * PER_THREAD
    expected = {f"w{t}-{i:02d}" for t in range(THREADS) for i in range(PER_THREAD)}
    assert set(names(rows)) == expected
    seqs = [row.seq for row in rows]
    assert all(a < b for a, b in itertools.pairwise(seqs))
    for t in range(THREADS):
        # Each thread submitted its jobs one after another: they must come back in that order.
        mine = [row for row in rows if row.owner == f"u{t}"]
        assert [row.spec for row in mine] == [{"t": t, "i": i} for i in range(PER_THREAD)]
    assert count_rows(store, schema.job_history) == THREADS * PER_THREAD
    assert store.count_by_state() == {"pending": THREADS * PER_THREAD}


def test_concurrent_transitions_lose_nothing(store: Store) -> None:
    # Transitions read the job before they write it: contention must not make them fail.
    start = threading.Barrier(THREADS)
    per_thread = PER_THREAD // 2

    def worker(t: int) -> None:
        start.wait(timeout=30)
        for i in range(per_thread):
            name = f"w{t}-{i:02d}"
            add(store, name, owner=f"u{t}", time=1.0)
            store.transition(name, "pending", "running", "placed", 2.0, attempt=0)
            store.transition(name, "running", "succeeded", "exit 0", 3.0, ended_at=3.0)

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        for future in [pool.submit(worker, t) for t in range(THREADS)]:
            future.result()

    assert store.count_by_state() == {"succeeded": THREADS * per_thread}
    assert count_rows(store, schema.job_history) == 3 * THREADS * per_thread
    assert store.history("w7-24") == [
        HistoryRow(1.0, None, "pending", "submitted"),
        HistoryRow(2.0, "pending", "running", "placed"),
        HistoryRow(3.0, "running", "succeeded", "exit 0"),
    ]


def test_a_row_with_a_lone_surrogate_is_read_with_u_fffd_in_its_place(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # What an older toposched let in (issue 33): SQLite keeps the JSON escape, orjson refuses
    # to read it back. PostgreSQL's json type refuses it on the way in, so only SQLite holds it.
    store = Store(sqlite_url(tmp_path / "poisoned.db"))
    add(store, "good", spec={"command": ["echo", "fine"]})
    add(store, "bad", spec={"command": ["echo", "fine"]})
    with store.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE jobs SET spec = ? WHERE name = 'bad'",
            ('{"command": ["echo", "a\\ud800b"], "env": {"K\\udfff": "v"}}',),
        )
    assert store.job("bad").spec == {"command": ["echo", "a\ufffdb"], "env": {"K\ufffd": "v"}}
    assert names(store.jobs()) == ["good", "bad"]
    assert "lone surrogate" in caplog.text
    store.close()


def test_a_delete_asked_live_is_found_once_the_job_has_ended(store: Store) -> None:
    add(store, "j")
    add(store, "k")
    store.delete_when_ended("j")
    assert store.ended_to_delete(["succeeded", "cancelled"]) == []  # still live
    store.transition("j", "pending", "cancelled", "cancelled", 2.0)
    store.transition("k", "pending", "cancelled", "cancelled", 2.0)
    [ended] = store.ended_to_delete(["succeeded", "cancelled"])
    assert ended.name == "j" and ended.delete_when_ended
    assert store.remove_job("j", ["cancelled"], 3.0)
    assert store.ended_to_delete(["succeeded", "cancelled"]) == []  # deleted rows are not ended
