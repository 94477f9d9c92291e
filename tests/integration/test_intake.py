"""Submissions that wait for the runtime's lock are taken together: one transaction, each
answered as if alone (a refused one fails alone; a retry in the same burst finds its job)."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from tests.integration.test_runtime import Rig
from tests.server import kill_leftover_workers, wait_for
from toposched.server.schemas import JobSubmit
from toposched.server.shared import Conflict, QueueFull
from toposched.store import JobRow, NewJob


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    data = tmp_path / "data"
    data.mkdir()
    yield Rig(data)
    kill_leftover_workers(data)


def spec(**fields: Any) -> dict[str, Any]:
    body = JobSubmit(command=[sys.executable, "-c", "pass"], **fields)
    return body.model_dump(exclude={"name", "queue"})


Answer = tuple[JobRow, bool, str] | BaseException


def burst(rig: Rig, calls: list[tuple[str | None, str | None]]) -> list[Answer]:
    """Each (name, idempotency key) submitted from its own thread while the test holds the
    lock; released once all are waiting, so that the first to get it takes them all."""
    answers: list[Answer | None] = [None] * len(calls)

    def one(i: int, name: str | None, key: str | None) -> Callable[[], None]:
        def run() -> None:
            try:
                answers[i] = rig.runtime.submit("admin", "default", spec(gpus=8), name, key)
            except BaseException as err:  # the answer under test
                answers[i] = err

        return run

    threads = [threading.Thread(target=one(i, *call)) for i, call in enumerate(calls)]
    with rig.runtime.lock:
        for thread in threads:
            thread.start()
        wait_for(lambda: len(rig.runtime.intake.waiting) == len(calls), "every submit to wait")
    for thread in threads:
        thread.join(timeout=30)
    assert all(answer is not None for answer in answers)
    return [answer for answer in answers if answer is not None]


def spy_batches(rig: Rig) -> list[list[str]]:
    sizes: list[list[str]] = []
    add_jobs = rig.store.add_jobs

    def recording(jobs: list[NewJob]) -> list[JobRow]:
        sizes.append([job.name for job in jobs])
        return add_jobs(jobs)

    rig.store.add_jobs = recording  # type: ignore[method-assign]
    return sizes


def test_a_burst_is_stored_in_one_transaction_and_each_answered(rig: Rig) -> None:
    batches = spy_batches(rig)
    answers = burst(
        rig, [("a", None), ("b", "k1"), ("a", None), ("c", "k1"), (None, "k1"), ("d", None)]
    )
    assert len(batches) == 1 and sorted(batches[0]) == ["a", "b", "d"]
    # Two submits of `a`: one stored, the other refused as a taken name.
    a_answers = [answers[0], answers[2]]
    assert sum(isinstance(a, Conflict) for a in a_answers) == 1
    assert sum(isinstance(a, tuple) and a[0].name == "a" for a in a_answers) == 1
    # The key k1: the first with it is stored; a retry without a name gets that job back as a
    # replay, and one naming another job is refused.
    first_k1 = answers[1]
    assert isinstance(first_k1, tuple) and first_k1[0].name == "b" and first_k1[1] is False
    retry = answers[4]
    assert isinstance(retry, tuple) and retry[0].name == "b" and retry[1] is True
    other = answers[3]
    assert isinstance(other, Conflict) and "'b'" in str(other)
    assert {row.name for row in rig.store.jobs()} == {"a", "b", "d"}
    assert all(rig.runtime.view.knows(name) for name in ("a", "b", "d"))


def test_a_name_taken_in_the_store_fails_alone(rig: Rig) -> None:
    # Stored behind the runtime's back: the core does not know it, only the database does,
    # so the batch's transaction fails and its jobs are stored one by one.
    rig.store.add_job(
        name="taken", owner="admin", queue="default", priority=0, spec=spec(), time=1.0
    )
    batches = spy_batches(rig)
    answers = burst(rig, [("x", None), ("taken", None), ("y", None)])
    assert sorted(batches[0]) == ["taken", "x", "y"]  # the one transaction, refused
    assert isinstance(answers[1], Conflict) and "taken" in str(answers[1])
    for answer, name in ((answers[0], "x"), (answers[2], "y")):
        assert isinstance(answer, tuple) and answer[0].name == name
        assert rig.runtime.view.knows(name)
    assert not rig.runtime.view.knows("taken")


def test_a_read_that_fails_after_a_start_leaves_no_submission_of_the_burst_behind(
    rig: Rig,
) -> None:
    """The first job starts at once, so its answer is read back from the store, and that read
    fails: it is still answered (as stored), and the rest of the burst is stored, handed to
    the core and answered too."""
    job = rig.store.job
    reads: list[str] = []

    def flaky(name: str) -> JobRow | None:
        reads.append(name)
        # The first read of `a` is its start's (_launch); the second, the answer's read-back.
        if reads.count("a") == 2 and name == "a":
            raise OperationalError("SELECT", {}, Exception("database is locked"))
        return job(name)

    rig.store.job = flaky  # type: ignore[method-assign]
    answers = burst(rig, [("a", None), ("b", None), ("c", None)])
    assert reads.count("a") >= 2
    for answer, name in zip(answers, "abc", strict=True):
        assert isinstance(answer, tuple) and answer[0].name == name, answer
        assert rig.runtime.view.knows(name)
    assert rig.runtime.degraded is None


def test_a_queue_takes_no_more_waiting_jobs_than_its_cap(rig: Rig) -> None:
    """Counted within a burst (each admitted one counts, even one that starts at once) and
    across them (the jobs the core has waiting, those held for jobs they run after too); the
    refused are stored nowhere and told the cap (issue 47: a team queued without end)."""
    rig.runtime.intake.max_waiting = 2
    answers = burst(rig, [(name, None) for name in "abcde"])
    assert [isinstance(a, tuple) for a in answers] == [True, True, False, False, False]
    for refused in answers[2:]:
        assert isinstance(refused, QueueFull)
        assert "queue 'default' has 2 jobs waiting" in str(refused)
        assert "serve --max-waiting 2" in str(refused)
    assert {row.name for row in rig.store.jobs()} == {"a", "b"}
    assert rig.runtime.view.job("a").state == "running"  # all 8 GPUs
    assert rig.runtime.view.waiting_in("default") == 1
    rig.runtime.intake.max_waiting = 3
    rig.runtime.submit("admin", "default", spec(gpus=8), "f")
    rig.runtime.submit("admin", "default", spec(gpus=8, after=["a"]), "g")  # held for a
    assert rig.runtime.view.waiting_in("default") == 3
    with pytest.raises(QueueFull, match="has 3 jobs waiting"):
        rig.runtime.submit("admin", "default", spec(gpus=8), "h")
    assert not rig.runtime.view.knows("h") and rig.store.job("h") is None
    assert rig.runtime.view.waiting_in("other") == 0
