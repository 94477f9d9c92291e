"""The server's runtime driven step by step: a real LocalExecutor, real workers, SQLite.

`step()` is called by the test instead of the runtime's thread, so that what one poll of the
executor returns is decided by the test (e.g. every worker of a gang ended before one poll).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.exc import OperationalError

from tests.server import WORKER, alive, kill_leftover_workers, wait_for
from toposched.core import SchedulerPolicy
from toposched.discovery.files import load_topology
from toposched.executors.local import ExecutorError, LocalExecutor
from toposched.executors.supervisor import StartRecord, read_pids, start_path, write_start
from toposched.server.localnode import LocalNode
from toposched.server.runtime import Runtime
from toposched.server.schemas import JobSubmit
from toposched.server.shared import Unavailable
from toposched.store import Store, sqlite_url
from toposched.topology.cluster import Node


class Rig:
    """A runtime over `data` (store, runs), as `toposched serve` builds it, minus HTTP."""

    def __init__(
        self,
        data: Path,
        node: str = "node-a",
        clock: Callable[[], float] = time.time,
        **policy: Any,
    ) -> None:
        self.data = data
        self.store = Store(sqlite_url(data / "toposched.db"))
        self.executor = LocalExecutor(data / "runs")
        local = LocalNode(Node(node, load_topology("dgx1-v100")), "emulated (dgx1-v100)")
        policies = SchedulerPolicy(**policy)
        self.runtime = Runtime(self.store, self.executor, local, policies, clock=clock)

    def submit(self, name: str, out: Path, **fields: Any) -> str:
        env = {"OUT": str(out), **fields.pop("env", {})}
        body = JobSubmit(command=[sys.executable, "-c", WORKER], env=env, **fields)
        spec = body.model_dump(exclude={"name", "queue"})
        self.runtime.submit("admin", body.queue or "default", spec, name)
        return name

    def state(self, name: str) -> str:
        row = self.store.job(name)
        assert row is not None
        return row.state

    def steps_until(self, name: str, state: str) -> None:
        def reached() -> bool:
            self.runtime.step()
            return self.state(name) == state

        try:
            wait_for(reached, f"{name} to be {state}")
        except AssertionError as err:
            raise AssertionError(f"{err}; it is {self.state(name)}") from None


@pytest.fixture
def data(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "data"
    path.mkdir()
    yield path
    kill_leftover_workers(path)


def exited(rig: Rig, job: str, attempt: int, ranks: int) -> bool:
    run = rig.executor.run_dir(job, attempt)
    return all((run / f"worker-{rank}.exit").exists() for rank in range(ranks))


def test_a_gang_whose_workers_end_in_one_poll_fails_if_one_failed(data: Path, out: Path) -> None:
    rig = Rig(data)
    rig.submit("mixed", out, workers=2, env={"WAIT": "go", "EXIT_1": "3"})
    rig.runtime.step()  # starts the workers
    (out / "go").write_text("")
    wait_for(lambda: exited(rig, "mixed", 0, 2), "both workers to end")
    rig.runtime.step()  # one poll reports both ends
    row = rig.store.job("mixed")
    assert row is not None
    assert (row.state, row.reason) == ("failed", "worker 1: exited 3")


def test_every_end_in_one_poll_is_handled_when_a_gang_is_requeued(data: Path, out: Path) -> None:
    # "flaky" fails and is requeued, but "big" (higher priority) takes the GPUs it freed, so
    # "flaky" waits; the ends of its second worker and of "solo" came in the same poll.
    rig = Rig(data, preemption=False)
    go = {"WAIT": "go", "EXIT_0": "1", "EXIT_1": "1"}
    rig.submit("flaky", out, workers=2, restart="on-failure", env=go)
    rig.submit("solo", out, env={"WAIT": "go"})
    rig.submit("big", out, gpus=7, priority=10, env={"WAIT": "never"})
    rig.runtime.step()
    assert [rig.state(j) for j in ("flaky", "solo", "big")] == ["running", "running", "pending"]
    (out / "go").write_text("")
    wait_for(lambda: exited(rig, "flaky", 0, 2) and exited(rig, "solo", 0, 1), "the ends")
    rig.runtime.step()
    assert [rig.state(j) for j in ("flaky", "solo", "big")] == ["pending", "succeeded", "running"]
    rig.runtime.cancel("big")
    rig.steps_until("big", "cancelled")


def test_a_run_killed_at_recovery_is_not_tracked_for_ever(data: Path, out: Path) -> None:
    first = Rig(data, node="node-a")
    first.submit("moved", out, env={"WAIT": "never"})
    first.runtime.step()
    wait_for(lambda: (data / "runs/moved/attempt-0/worker-0.pid").exists(), "the worker")
    # The server restarts under another node name: the placement no longer fits, the old
    # workers are killed and the job starts again as a new attempt.
    second = Rig(data, node="node-b")
    assert any("stopped and requeued" in note for note in second.runtime.recover())
    second.steps_until("moved", "running")
    wait_for(lambda: exited(second, "moved", 0, 1), "the old worker to be killed")

    def forgotten() -> bool:
        second.runtime.step()
        try:
            second.executor.running("moved", 0)
        except ExecutorError:
            return True
        return False

    wait_for(forgotten, "the killed attempt to be forgotten")
    second.runtime.cancel("moved")
    second.steps_until("moved", "cancelled")


def test_a_cancel_while_stopping_survives_a_crash(data: Path, out: Path) -> None:
    first = Rig(data)
    first.runtime.configure_queue("owners", 8)
    checkpoint = {"signal": "SIGUSR1", "grace_s": 10}
    first.submit("borrower", out, queue="guests", gpus=8, checkpoint=checkpoint, env={"WAIT": "x"})
    first.runtime.step()
    first.submit("owner", out, queue="owners", gpus=8, env={"WAIT": "go"})
    assert first.state("borrower") == "stopping"  # preempted for the owner
    assert first.runtime.cancel("borrower").state == "stopping"
    # The server dies before the borrower has stopped; the next one must still cancel it.
    second = Rig(data)
    second.runtime.recover()
    second.steps_until("borrower", "cancelled")
    second.steps_until("owner", "running")
    (out / "go").write_text("")
    second.steps_until("owner", "succeeded")
    assert second.state("borrower") == "cancelled"


def test_a_job_cancelled_before_its_workers_started_stays_cancelled_after_a_crash(
    data: Path, out: Path
) -> None:
    first = Rig(data)
    first.submit("unwanted", out, env={"WAIT": "never"})
    assert first.runtime.cancel("unwanted").state == "stopping"
    # The server dies before its thread started the workers (or stopped them).
    second = Rig(data)
    assert second.runtime.recover() == ["unwanted: cancelled (its workers had not started)"]
    assert second.state("unwanted") == "cancelled"
    second.runtime.step()
    assert not (data / "runs/unwanted/attempt-0").exists()
    assert second.runtime.gpu_owners() == {}


def test_a_start_cut_short_by_a_crash_leaves_no_worker_behind(
    data: Path, out: Path, tmp_path: Path
) -> None:
    first = Rig(data)
    first.submit("cut", out, workers=2, env={"WAIT": "never"})
    row = first.store.job("cut")
    assert row is not None and row.state == "running"
    # The server died while it started the gang: rank 0's supervisor had recorded its worker,
    # rank 1's (slow to come up) had not yet.
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep 30\nexec "{sys.executable}" "$@"\n')
    slow.chmod(0o755)
    run_dir = first.executor.run_dir("cut", 0)
    run_dir.mkdir(parents=True)
    supervisors = []
    for rank, python in enumerate((sys.executable, str(slow))):
        argv = [python, "-I", "-m", "toposched.executors.supervisor", str(run_dir), str(rank)]
        env = {**os.environ, "OUT": str(out), "RANK": str(rank), "TOPOSCHED_RESTART_COUNT": "0"}
        write_start(start_path(run_dir, rank), StartRecord([sys.executable, "-c", WORKER], env))
        supervisors.append(subprocess.Popen(argv, start_new_session=True))
    try:
        wait_for(lambda: (run_dir / "worker-0.pid").exists(), "rank 0's worker")
        pids = read_pids(run_dir, 0)
        assert pids is not None
        worker0 = pids.worker_pid
        second = Rig(data)
        assert second.runtime.recover() == ["cut: requeued (its workers had not started)"]
        # Rank 1's supervisor is killed before it starts a worker unwatched. Rank 0's worker
        # is killed; its supervisor is killed too, or records that death first and exits 0
        # (which of the two kills lands first is not fixed): either way nothing is left.
        codes = [proc.wait(timeout=10) for proc in supervisors]
        assert codes[1] == -9
        assert codes[0] in (0, -9)
        # Killed: on a busy machine it may still be on its way out (state R, SIGKILL pending)
        # the instant its supervisor is gone. It waits for a file never written: nothing but
        # the kill ends it.
        wait_for(lambda: not alive(worker0), "rank 0's killed worker to be gone", 5)
        assert not (run_dir / "worker-1.pid").exists()
        row = second.store.job("cut")
        assert row is not None and (row.state, row.attempt) == ("running", 1)
        second.runtime.cancel("cut")
        second.steps_until("cut", "cancelled")
    finally:
        for proc in supervisors:
            proc.kill()
            proc.wait()


def test_a_resize_that_ended_while_the_server_was_down_requeues_the_job(
    data: Path, out: Path
) -> None:
    first = Rig(data, grow_after_s=0)
    first.submit("grower", out, elastic={"min": 1, "max": 2}, env={"WAIT": "never"})
    row = first.store.job("grower")
    assert row is not None and (row.state, row.stop_kind) == ("stopping", "resize")
    first.runtime.step()  # starts the worker, then sends the resize's SIGTERM
    wait_for(lambda: exited(first, "grower", 0, 1), "the worker to stop")
    # The server died before it took the end in (its SIGTERM is not the job failing), and the
    # next one does not grow jobs at once: the job starts again at its first size.
    second = Rig(data)
    assert second.runtime.recover() == ["grower: adopted attempt 0, still stopping (resize)"]
    second.steps_until("grower", "running")
    row = second.store.job("grower")
    assert row is not None and (row.state, row.attempt, len(row.placement or [])) == (
        "running",
        1,
        1,
    )
    history = [h.new for h in second.store.history("grower")]
    assert history == ["pending", "running", "stopping", "pending", "running"]
    second.runtime.cancel("grower")
    second.steps_until("grower", "cancelled")


def test_a_resize_still_stopping_at_recovery_does_not_end_the_job(data: Path, out: Path) -> None:
    first = Rig(data, grow_after_s=0)
    elastic, checkpoint = {"min": 1, "max": 2}, {"signal": "SIGUSR1", "grace_s": 10}
    first.submit("grower", out, elastic=elastic, checkpoint=checkpoint, env={"WAIT": "x"})
    assert first.state("grower") == "stopping"
    first.runtime.step()
    wait_for(lambda: exited(first, "grower", 0, 1), "the checkpoint")
    # As if the server had died while the worker was saving its checkpoint: its exit file comes
    # after the next server has adopted it.
    exit_file = data / "runs/grower/attempt-0/worker-0.exit"
    saved = exit_file.read_bytes()
    exit_file.unlink()
    second = Rig(data)
    second.runtime.recover()
    exit_file.write_bytes(saved)
    for _ in range(5):
        second.runtime.step()
    assert second.state("grower") in ("pending", "running")
    second.runtime.cancel("grower")
    second.steps_until("grower", "cancelled")


def test_a_database_failure_mid_decision_degrades_the_runtime_until_a_write_succeeds(
    data: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = Rig(data)

    def disk_full(*_args: Any, **_kwargs: Any) -> None:
        raise OperationalError("UPDATE jobs", {}, Exception("database or disk is full"))

    # The submission is stored, so it is accepted; storing the core's decision to start it
    # fails, and so does every write after it.
    monkeypatch.setattr(first.store, "transition", disk_full)
    monkeypatch.setattr(first.store, "probe", disk_full)
    first.submit("started", out, env={"WAIT": "never"})
    assert first.runtime.degraded is not None
    assert first.runtime.degraded.startswith("the disk is full")
    assert first.state("started") == "pending"
    # Nothing else is taken, stored or started by this runtime while it cannot write.
    with pytest.raises(Unavailable, match="the disk is full"):
        first.submit("later", out)
    with pytest.raises(Unavailable):
        first.runtime.cancel("started")
    first.runtime.step()
    assert first.store.job("later") is None
    assert not (data / "runs" / "started").exists()
    # Writes succeed again: the same runtime rebuilds its state from the database, without a
    # restart, and the stored job starts.
    monkeypatch.undo()
    first.steps_until("started", "running")
    assert first.runtime.degraded is None
    history = [h.new for h in first.store.history("started")]
    assert history == ["pending", "running"]
    first.runtime.cancel("started")
    first.steps_until("started", "cancelled")


def test_a_stop_deadline_survives_a_restart(
    data: Path, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    now = [1000.0]
    first = Rig(data, clock=lambda: now[0])
    first.submit("stubborn", out, env={"WAIT": "never"})
    first.runtime.step()
    assert first.runtime.cancel("stubborn").state == "stopping"
    assert first.store.stop_deadline("stubborn") == 1010.0  # the policy's 10 s stop grace
    # The server dies during the grace; the next one starts 4 s later and grants what is left.
    now[0] = 1004.0
    second = Rig(data, clock=lambda: now[0])
    graces: list[float] = []
    stop = second.executor.stop
    monkeypatch.setattr(
        second.executor, "stop", lambda job, attempt, sig, grace: graces.append(grace)
    )
    second.runtime.recover()
    second.runtime.step()
    assert graces == [6.0]
    monkeypatch.setattr(second.executor, "stop", stop)
    second.executor.stop("stubborn", 0, "SIGKILL", 0)
    second.steps_until("stubborn", "cancelled")
    assert second.store.stop_deadline("stubborn") is None


def test_a_restart_keeps_each_jobs_attained_service(data: Path, out: Path) -> None:
    """Issue 16: least attained service survives a restart. `long` had 160 GPU-seconds when it
    was preempted for `short` (demoted past 100); `short` had run 10 s on 8 GPUs when the
    server died. The next server hands both back: `long` still waits demoted, behind a job
    submitted after the restart, and `short` counts on from 80."""
    now = [1000.0]
    # Demoted after 100 GPU-seconds; without the stop rule, whose test of a stop's worth
    # would keep a job that has run for seconds, and whose patience would keep `short` waiting.
    las = {"demote_after_gpu_h": 100 / 3600, "pay_margin": None, "preempt_patience_s": 0.0}
    first = Rig(data, clock=lambda: now[0], **las)
    checkpoint = {"signal": "SIGUSR1", "grace_s": 10}
    first.submit("long", out, gpus=8, checkpoint=checkpoint, env={"WAIT": "never"})
    first.runtime.step()
    assert first.state("long") == "running"
    now[0] = 1020.0
    first.submit("short", out, gpus=8, env={"WAIT": "go"})
    assert first.state("long") == "stopping"  # demoted at 1012.5: preempted for `short`
    first.steps_until("short", "running")
    long_row = first.store.job("long")
    assert long_row is not None and long_row.service_gpu_s == 160.0
    first.runtime.step()  # starts short's workers
    runs = data / "runs/short/attempt-0"
    wait_for(lambda: list(runs.glob("worker-*.pid")), "short's worker")
    # The server dies; the next one starts 10 s later.
    now[0] = 1030.0
    second = Rig(data, clock=lambda: now[0], **las)
    assert "short: adopted attempt 0 on" in " ".join(second.runtime.recover())
    assert second.runtime.view.attained_service("long") == 160.0
    assert second.runtime.view.attained_service("short") == 80.0
    assert "demoted" in second.runtime.explain("long")[1]
    # Its own file to wait on: with `go`'s, it could end before a step saw it running.
    second.submit("fresh", out, gpus=8, env={"WAIT": "fresh-go"})
    assert [r.name for r in second.runtime.view.pending()] == ["fresh", "long"]
    (out / "go").write_text("")
    second.steps_until("short", "succeeded")
    second.steps_until("fresh", "running")
    second.runtime.cancel("long")
    second.steps_until("long", "cancelled")
    (out / "fresh-go").write_text("")
    second.steps_until("fresh", "succeeded")
