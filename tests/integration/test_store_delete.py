"""Deleting an ended job from the store frees its name: on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Table, func, select

from toposched.store import DuplicateJob, Store, schema
from toposched.store.fsck import unreadable

ENDED = ("succeeded", "failed", "cancelled", "rejected")


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    opened = Store(db_url)
    yield opened
    opened.close()


def rows(store: Store, table: Table) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(select(func.count()).select_from(table)).scalar_one())


def test_an_ended_job_is_removed_whole_and_its_name_taken_again(store: Store) -> None:
    first = store.add_job(
        name="train", owner="ann", queue="q", priority=0, spec={"gpus": 1}, time=1.0, key="k1"
    )
    store.transition("train", "pending", "running", "started", 2.0)
    store.transition("train", "running", "stopping", "cancel", 3.0, stop_deadline=9.0)
    assert not store.remove_job("train", ENDED, 3.5)  # live: kept
    store.transition("train", "stopping", "cancelled", "cancelled", 4.0)
    with pytest.raises(DuplicateJob):
        store.add_job(name="train", owner="ann", queue="q", priority=0, spec={}, time=5.0)

    assert store.remove_job("train", ENDED, 5.0)
    assert store.job("train") is None and store.history("train") == []
    assert store.job_by_key("ann", "k1") is None and rows(store, schema.submit_keys) == 0
    assert store.jobs() == [] and store.count_by_state() == {}
    # Kept for the record, under a name no job can have.
    kept = store.job(f"train/{first.seq}")
    assert kept is not None and kept.state == "deleted"
    assert [h.new for h in store.history(kept.name)][-2:] == ["cancelled", "deleted"]
    assert not store.remove_job("train", ENDED, 5.5)  # gone already

    again = store.add_job(
        name="train", owner="bob", queue="q", priority=0, spec={"gpus": 2}, time=6.0, key="k1"
    )
    # A seq of its own: a page that went on after the old job's does not skip it.
    assert again.seq > first.seq and again.owner == "bob"
    assert [h.new for h in store.history("train")] == ["pending"]
    assert store.job_by_key("bob", "k1") == again
    assert [row.name for row in store.jobs(after_seq=first.seq)] == ["train"]
    assert store.count_by_state() == {"pending": 1}


def test_fsck_finds_a_spec_that_is_no_object_on_either_backend(store: Store) -> None:
    """`admin fsck` and the server's start read every row as the database holds it: on
    PostgreSQL a JSON column comes back parsed unless read as text (an AttributeError there
    stopped the server's start)."""
    store.add_job(name="fine", owner="ann", queue="q", priority=0, spec={"gpus": 1}, time=1.0)
    store.add_job(name="bad", owner="ann", queue="q", priority=0, spec={"gpus": 1}, time=2.0)
    with store.engine.begin() as conn:
        conn.execute(schema.jobs.update().where(schema.jobs.c.name == "bad").values(spec=[]))
    found = list(unreadable(store))
    assert [(f.name, f.column) for f in found] == [("bad", "spec")], found
    assert not found[0].repairable
