"""The local executor and its supervisors, with real worker processes."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.server import kill_leftover_workers
from toposched.common.frameworks import Kind
from toposched.executors import local
from toposched.executors.local import ExecutorError, LocalExecutor, RunSpec, WorkerExit
from toposched.executors.mps import PIPE_DIRECTORY, GpuShare
from toposched.executors.supervisor import proc_stat, read_exit, read_pids

WORKERS = Path(__file__).parent / "workers"
ACT = str(WORKERS / "act.py")
TIMEOUT_S = 10.0


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


@pytest.fixture
def make_executor(runs: Path) -> Iterator[Callable[..., LocalExecutor]]:
    """Executors on `runs`; afterwards no worker is left and every supervisor has been reaped."""
    made: list[LocalExecutor] = []
    # Children from before (another suite's server or PostgreSQL) are not this test's.
    before = set(my_children())

    def make(python: str = sys.executable) -> LocalExecutor:
        made.append(LocalExecutor(runs, python=python))
        return made[-1]

    yield make
    kill_leftover_workers(runs.parent)

    def no_children() -> bool:
        for executor in made:
            executor.poll()
        return not set(my_children()) - before

    wait_until("every supervisor to be reaped", no_children)


@pytest.fixture
def executor(make_executor: Callable[..., LocalExecutor]) -> LocalExecutor:
    return make_executor()


def spec(
    out: Path,
    *actions: str,
    job: str = "job",
    attempt: int = 0,
    workers: tuple[tuple[str, tuple[int, ...]], ...] | None = None,
    env: Mapping[str, str] | None = None,
    command: tuple[str, ...] | None = None,
    workdir: str | None = None,
) -> RunSpec:
    return RunSpec(
        job=job,
        attempt=attempt,
        queue="research",
        command=command or (sys.executable, ACT, str(out), *actions),
        env=env or {},
        workdir=workdir,
        workers=workers or tuple(("node-a", (rank,)) for rank in range(len(actions))),
        restart_count=2,
    )


def wait_until(what: str, ready: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.01)


def collect(executor: LocalExecutor, count: int) -> dict[int, WorkerExit]:
    """Poll until `count` ends are reported; fail on a rank reported twice."""
    ends: dict[int, WorkerExit] = {}

    def more() -> bool:
        for end in executor.poll():
            assert end.rank not in ends, f"rank {end.rank} reported twice"
            ends[end.rank] = end
        return len(ends) >= count

    wait_until(f"{count} worker ends", more)
    return ends


def info(out: Path, rank: int) -> dict[str, Any]:
    """What the worker of `rank` saw: its env, pid, ppid, pgid and cwd."""
    path = out / f"info-{rank}.json"
    wait_until(path.name, path.exists)
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def wait_ready(out: Path, *ranks: int) -> None:
    for rank in ranks:
        wait_until(f"rank {rank} ready", (out / f"ready-{rank}").exists)


def gone(pid: int) -> bool:
    """No such process any more (a zombie nobody here can reap counts as gone)."""
    stat = proc_stat(pid)
    return stat is None or not stat.alive


def my_children() -> dict[int, str]:
    """pid -> state of every child of this test process."""
    children = {}
    for entry in os.listdir("/proc"):
        try:
            raw = Path(f"/proc/{entry}/stat").read_bytes() if entry.isdigit() else b""
        except OSError:
            continue
        fields = raw[raw.rfind(b")") + 2 :].split()
        if fields and int(fields[1]) == os.getpid():
            children[int(entry)] = fields[0].decode()
    return children


def test_env_of_two_workers_on_one_node(
    executor: LocalExecutor, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OUTER_ONLY", "outer")
    monkeypatch.setenv("SHARED", "outer")
    job_env = {"SHARED": "job", "JOB_ONLY": "yes", "RANK": "99", "TOPOSCHED_JOB": "spoof"}
    run = spec(out, "exit:0", "exit:0", workers=(("n0", (0, 1)), ("n0", (2, 3))), env=job_env)
    executor.start(run)
    collect(executor, 2)
    envs = [info(out, rank)["env"] for rank in (0, 1)]
    for rank, env in enumerate(envs):
        assert env["CUDA_VISIBLE_DEVICES"] == ("0,1", "2,3")[rank]
        assert env["RANK"] == str(rank)
        assert env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == "2"
        assert env["LOCAL_WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["TOPOSCHED_JOB"] == "job"
        assert env["TOPOSCHED_QUEUE"] == "research"
        assert env["TOPOSCHED_RESTART_COUNT"] == "2"
        assert env["TOPOSCHED_ATTEMPT"] == "0"
        assert env["PYTHONUNBUFFERED"] == "1"
        assert env["OUTER_ONLY"] == "outer"
        assert env["SHARED"] == "job"
        assert env["JOB_ONLY"] == "yes"
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]
    assert 0 < int(envs[0]["MASTER_PORT"]) < 65536


def test_local_ranks_count_per_node(executor: LocalExecutor, out: Path) -> None:
    workers = (("a", (0,)), ("b", (0,)), ("a", (1,)), ("b", ()))
    run = spec(out, "exit:0", "exit:0", "exit:0", "exit:0", workers=workers)
    executor.start(run)
    collect(executor, 4)
    envs = [info(out, rank)["env"] for rank in range(4)]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "0", "1", "1"]
    assert [e["LOCAL_WORLD_SIZE"] for e in envs] == ["2"] * 4
    assert envs[3]["CUDA_VISIBLE_DEVICES"] == ""


def test_job_may_set_pythonunbuffered_and_workdir(
    executor: LocalExecutor, out: Path, tmp_path: Path
) -> None:
    run = spec(out, "exit:0", env={"PYTHONUNBUFFERED": ""}, workdir=str(tmp_path))
    executor.start(run)
    collect(executor, 1)
    got = info(out, 0)
    assert got["env"]["PYTHONUNBUFFERED"] == ""
    assert got["cwd"] == str(tmp_path)


def test_stdout_and_stderr_land_in_the_log(executor: LocalExecutor, out: Path) -> None:
    executor.start(spec(out, "exit:0", "exit:0"))
    collect(executor, 2)
    for rank in (0, 1):
        log = executor.log_path("job", 0, rank)
        assert log == executor.run_dir("job", 0) / f"worker-{rank}.log"
        text = log.read_text()
        assert f"to stdout from rank {rank}" in text
        assert f"to stderr from rank {rank}" in text


def test_each_exit_is_reported_once(executor: LocalExecutor, out: Path) -> None:
    executor.start(spec(out, "exit:0", "exit:3", "signal:SIGKILL"))
    assert executor.running("job", 0) == {0, 1, 2}
    ends = collect(executor, 3)
    assert [(ends[r].returncode, ends[r].reason) for r in range(3)] == [
        (0, "exited 0"),
        (3, "exited 3"),
        (-9, "killed by SIGKILL"),
    ]
    assert all((e.job, e.attempt) == ("job", 0) for e in ends.values())
    assert executor.running("job", 0) == set()
    for _ in range(3):
        assert executor.poll() == []
    exit_file = json.loads((executor.run_dir("job", 0) / "worker-2.exit").read_text())
    assert exit_file["returncode"] == -9
    assert exit_file["signal"] == "SIGKILL"
    executor.forget("job", 0)
    with pytest.raises(ExecutorError):
        executor.running("job", 0)


def test_each_worker_has_a_process_group_of_its_own(executor: LocalExecutor, out: Path) -> None:
    executor.start(spec(out, "sleep", "sleep"))
    wait_ready(out, 0, 1)
    groups = set()
    for rank in (0, 1):
        got = info(out, rank)
        pids = read_pids(executor.run_dir("job", 0), rank)
        assert pids is not None
        assert got["pid"] == got["pgid"] == pids.worker_pid == pids.pgid
        assert got["ppid"] == pids.supervisor_pid
        assert pids.pgid != os.getpgid(pids.supervisor_pid)
        assert pids.pgid != os.getpgid(0)
        groups.add(pids.pgid)
    assert len(groups) == 2
    executor.stop("job", 0, "SIGKILL", 0)
    collect(executor, 2)


def test_stop_lets_a_worker_that_traps_sigterm_exit(executor: LocalExecutor, out: Path) -> None:
    executor.start(spec(out, "trap"))
    wait_ready(out, 0)
    executor.stop("job", 0, "SIGTERM", 30)
    assert collect(executor, 1)[0].reason == "exited 0"


def test_stop_kills_a_worker_that_ignores_sigterm_after_the_grace(
    executor: LocalExecutor, out: Path
) -> None:
    executor.start(spec(out, "ignore"))
    wait_ready(out, 0)
    executor.stop("job", 0, "SIGTERM", 0.2)
    end = collect(executor, 1)[0]
    assert (end.returncode, end.reason) == (-9, "killed by SIGKILL")


def test_checkpoint_signal_reaches_the_worker(executor: LocalExecutor, out: Path) -> None:
    executor.start(spec(out, "trap"))
    wait_ready(out, 0)
    executor.stop("job", 0, "SIGUSR1", math.inf)
    wait_until("SIGUSR1 recorded", (out / "usr1-0").exists)
    assert executor.poll() == []
    assert executor.running("job", 0) == {0}
    executor.stop("job", 0, "SIGTERM", 30)
    assert collect(executor, 1)[0].reason == "exited 0"


def test_stop_kills_the_whole_process_tree(executor: LocalExecutor, out: Path) -> None:
    executor.start(spec(out, "spawn"))
    wait_ready(out, 0)
    child = int((out / "child-0").read_text())
    assert not gone(child)
    executor.stop("job", 0, "SIGTERM", 30)
    assert collect(executor, 1)[0].reason == "killed by SIGTERM"
    wait_until("the worker's child to die", lambda: gone(child))


def test_children_left_behind_by_an_ended_worker_are_killed(
    executor: LocalExecutor, out: Path
) -> None:
    executor.start(spec(out, "orphan"))
    assert collect(executor, 1)[0].reason == "exited 0"
    # The child ignores SIGTERM: only the supervisor's clean-up of the group ends it
    wait_until("the orphaned child to die", lambda: gone(int((out / "child-0").read_text())))


def test_a_new_executor_adopts_a_run_after_the_server_is_killed(
    runs: Path, make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    run = {
        "job": "adopted",
        "attempt": 1,
        "command": [sys.executable, ACT, str(out), "exit:5", "sleep"],
        "workers": [["n0", [0]], ["n0", [1]]],
    }
    server = subprocess.Popen(
        [sys.executable, str(WORKERS / "serve.py"), str(runs), json.dumps(run)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline() == "started\n"
        run_dir = runs / "adopted" / "attempt-1"
        # Rank 0 ends while its server is still up, and is reported only by the new executor
        wait_until("rank 0's exit record", (run_dir / "worker-0.exit").exists)
        wait_ready(out, 1)
    finally:
        server.kill()
        server.wait()
        assert server.stdout is not None
        server.stdout.close()
    executor = make_executor()
    executor.adopt("adopted", 1, 2)
    assert executor.running("adopted", 1) == {0, 1}
    assert collect(executor, 1)[0].reason == "exited 5"
    assert executor.running("adopted", 1) == {1}
    executor.stop("adopted", 1, "SIGTERM", 30)
    assert collect(executor, 1)[1].reason == "killed by SIGTERM"
    assert executor.running("adopted", 1) == set()
    with pytest.raises(ExecutorError):
        executor.adopt("adopted", 1, 2)


def test_an_adopted_rank_without_records_is_lost(executor: LocalExecutor) -> None:
    executor.adopt("ghost", 0, 1)
    end = collect(executor, 1)[0]
    assert end.returncode is None
    assert end.reason.startswith("lost")


def test_a_worker_whose_supervisor_vanishes_is_lost_and_killed(
    executor: LocalExecutor, out: Path
) -> None:
    executor.start(spec(out, "sleep"))
    wait_ready(out, 0)
    pids = read_pids(executor.run_dir("job", 0), 0)
    assert pids is not None
    os.kill(pids.supervisor_pid, signal.SIGKILL)
    end = collect(executor, 1)[0]
    assert end.returncode is None
    assert end.reason == "lost: supervisor vanished without recording the exit"
    wait_until("the lost worker to die", lambda: gone(pids.worker_pid))


def test_a_command_that_cannot_run_reports_127_or_126(
    executor: LocalExecutor, tmp_path: Path
) -> None:
    """With the reason the job's `get` shows, not only the status (`exited 127`)."""
    program = str(tmp_path / "no-such-program")
    executor.start(spec(tmp_path, "x", command=(program,)))
    missing = collect(executor, 1)[0]
    assert missing.returncode == 127
    assert missing.reason == f"cannot run {program!r}: No such file or directory"
    assert "cannot run" in executor.log_path("job", 0, 0).read_text()
    not_executable = tmp_path / "script"
    not_executable.write_text("#!/bin/sh\n")
    executor.start(spec(tmp_path, "x", attempt=1, command=(str(not_executable),)))
    denied = collect(executor, 1)[0]
    assert denied.returncode == 126
    assert denied.reason == f"cannot run {str(not_executable)!r}: Permission denied"
    executor.start(spec(tmp_path, "x", attempt=2, command=("no-such-program-on-path",)))
    unfound = collect(executor, 1)[0]
    assert unfound.returncode == 127
    assert unfound.reason == "cannot run 'no-such-program-on-path': not found on PATH"


def test_starting_a_run_twice_is_an_error(
    make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    executor = make_executor()
    run = spec(out, "exit:0")
    executor.start(run)
    with pytest.raises(ExecutorError, match="already started"):
        executor.start(run)
    collect(executor, 1)
    # A restarted server must not start over a run whose records are still there
    with pytest.raises(ExecutorError, match="already started"):
        make_executor().start(run)


def test_a_failed_start_starts_nothing_and_can_be_retried(
    runs: Path, make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    run = spec(out, "exit:0", "exit:0")
    with pytest.raises(ExecutorError, match="cannot start its supervisor"):
        make_executor(str(runs / "no-such-python")).start(run)
    false = shutil.which("false")
    assert false is not None
    broken = make_executor(false)
    with pytest.raises(ExecutorError, match="exited with status 1 before starting the worker"):
        broken.start(run)
    with pytest.raises(ExecutorError):
        broken.running("job", 0)
    executor = make_executor()
    executor.start(run)
    assert [e.returncode for e in collect(executor, 2).values()] == [0, 0]


def test_a_start_that_fails_midway_kills_the_workers_already_started(
    runs: Path, make_executor: Callable[..., LocalExecutor], out: Path, tmp_path: Path
) -> None:
    # An interpreter whose rank 1 supervisor fails once rank 0's worker is surely running
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'if [ "$5" = 1 ]; then until [ -e {out}/ready-0 ]; do sleep 0.01; done; exit 1; fi\n'
        f'exec {sys.executable} "$@"\n'
    )
    python.chmod(0o755)
    with pytest.raises(ExecutorError, match="worker 1: its supervisor exited with status 1"):
        make_executor(str(python)).start(spec(out, "sleep", "sleep"))
    wait_until("rank 0's worker to die", lambda: gone(info(out, 0)["pid"]))
    run_dir = runs / "job" / "attempt-0"
    assert not list(run_dir.glob("worker-*.pid")) and not list(run_dir.glob("worker-*.exit"))


def test_the_supervisor_ignores_termination_signals(executor: LocalExecutor, out: Path) -> None:
    executor.start(spec(out, "sleep"))
    wait_ready(out, 0)
    pids = read_pids(executor.run_dir("job", 0), 0)
    assert pids is not None
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        os.killpg(pids.supervisor_pid, sig)  # its session's group, which the worker is not in
    assert executor.poll() == []
    executor.stop("job", 0, "SIGTERM", 30)
    assert collect(executor, 1)[0].reason == "killed by SIGTERM"


def test_bad_requests_are_errors(executor: LocalExecutor, out: Path) -> None:
    with pytest.raises(ExecutorError, match="not tracked"):
        executor.stop("nope", 0, "SIGTERM", 1)
    executor.start(spec(out, "sleep"))
    wait_ready(out, 0)
    with pytest.raises(ExecutorError, match="unknown signal"):
        executor.stop("job", 0, "SIGNOPE", 1)
    with pytest.raises(ExecutorError, match="have not been reported"):
        executor.forget("job", 0)
    with pytest.raises(ExecutorError, match="cannot name"):
        executor.run_dir("../escape", 0)
    executor.stop("job", 0, "SIGKILL", 0)
    collect(executor, 1)
    executor.forget("job", 0)


def test_supervisors_are_reaped(executor: LocalExecutor, out: Path) -> None:
    executor.start(spec(out, "exit:0", "exit:3", "signal:SIGKILL", "sleep"))
    wait_ready(out, 3)
    executor.stop("job", 0, "SIGTERM", 30)
    collect(executor, 4)
    run_dir = executor.run_dir("job", 0)
    supervisors = set()
    for rank in range(4):
        pids = read_pids(run_dir, rank)
        assert pids is not None
        supervisors.add(pids.supervisor_pid)

    def reaped() -> bool:
        executor.poll()
        return not supervisors & set(my_children())

    wait_until("the supervisors to be reaped", reaped)
    executor.forget("job", 0)
    assert "Z" not in my_children().values()


def test_a_released_run_is_adopted_again_and_its_ends_reported_anew(
    executor: LocalExecutor, out: Path
) -> None:
    # Children this test did not start (a session's control plane) are not its to reap.
    before = set(my_children())
    executor.start(spec(out, "exit:3", "sleep"))
    ended = collect(executor, 1)
    assert ended[0].returncode == 3
    # A runtime rebuilding its state forgets every run and adopts it again from its files:
    # what was reported before is reported again, to the new core, once.
    executor.release_all()
    with pytest.raises(ExecutorError):
        executor.running("job", 0)
    executor.adopt("job", 0, 2)
    assert collect(executor, 1)[0].reason == "exited 3"
    assert executor.running("job", 0) == {1}
    executor.stop("job", 0, "SIGTERM", 30)
    assert collect(executor, 1)[1].reason == "killed by SIGTERM"

    def reaped() -> bool:
        executor.poll()
        return not set(my_children()) - before

    wait_until("the released supervisors to be reaped", reaped)


# ---------------------------------------------------------------------- job kinds

MEMBER = str(WORKERS / "member.py")


def kind_spec(
    out: Path,
    kind: Kind,
    workers: tuple[tuple[str, tuple[int, ...]], ...],
    servers: int = 0,
    **actions: str,
) -> RunSpec:
    """A run of `kind` with `servers` parameter servers; `actions` by role (member.py's)."""
    args = [f"{role}={action}" for role, action in actions.items()]
    return RunSpec(
        job="job",
        attempt=0,
        queue="research",
        command=(sys.executable, MEMBER, str(out), *args),
        env={},
        workdir=None,
        workers=workers,
        restart_count=0,
        kind=kind,
        ps=servers,
    )


def seen(executor: LocalExecutor, out: Path, rank: int, job: str = "job") -> dict[str, str]:
    """The environment the process of `rank` saw (found by the pid its supervisor recorded)."""
    pids = read_pids(executor.run_dir(job, 0), rank)
    assert pids is not None
    path = out / f"info-{pids.worker_pid}.json"
    wait_until(path.name, path.exists)
    env: dict[str, str] = json.loads(path.read_text())["env"]
    return env


ONE_GPU_EACH = (("n0", (0,)), ("n0", (1,)), ("n0", (2,)))


def test_tensorflow_workers_and_parameter_servers_see_one_cluster(
    executor: LocalExecutor, out: Path
) -> None:
    run = kind_spec(out, Kind.TENSORFLOW, ONE_GPU_EACH, servers=2, worker="exit:0", ps="sleep")
    executor.start(run)
    assert executor.running("job", 0) == {0, 1, 2, 3, 4}
    envs = [seen(executor, out, rank) for rank in range(5)]
    configs = [json.loads(env["TF_CONFIG"]) for env in envs]
    cluster = configs[0]["cluster"]
    assert [c["cluster"] for c in configs] == [cluster] * 5
    assert sorted(cluster) == ["chief", "ps", "worker"]
    addresses = [*cluster["chief"], *cluster["worker"], *cluster["ps"]]
    assert len(addresses) == 5 and len(set(addresses)) == 5  # a port each
    assert all(a.startswith("127.0.0.1:") and 0 < int(a.split(":")[1]) < 65536 for a in addresses)
    # Worker 0 is the chief; the other workers are TensorFlow's workers 0 and 1
    assert [c["task"] for c in configs] == [
        {"type": "chief", "index": 0},
        {"type": "worker", "index": 0},
        {"type": "worker", "index": 1},
        {"type": "ps", "index": 0},
        {"type": "ps", "index": 1},
    ]
    assert [env["CUDA_VISIBLE_DEVICES"] for env in envs] == ["0", "1", "2", "", ""]
    for env in envs:
        assert "RANK" not in env and "MASTER_ADDR" not in env and "TOPOSCHED_HOSTFILE" not in env
        assert (env["TOPOSCHED_JOB"], env["TOPOSCHED_ATTEMPT"]) == ("job", "0")
    # The workers end; the parameter servers, which serve for ever, are stopped, and that
    # stop fails nothing
    ends = collect(executor, 5)
    assert [(ends[r].reason, ends[r].failed) for r in range(3)] == [("exited 0", False)] * 3
    for rank, name in ((3, "ps-0"), (4, "ps-1")):
        assert (ends[rank].returncode, ends[rank].reason) == (-15, f"{name} killed by SIGTERM")
        assert ends[rank].expected and not ends[rank].failed
    for rank in range(5):
        assert " says hello" in executor.log_path("job", 0, rank).read_text()
    assert "ps " in executor.log_path("job", 0, 3).read_text()


def test_tensorflow_without_parameter_servers_has_workers_only(
    executor: LocalExecutor, out: Path
) -> None:
    executor.start(kind_spec(out, Kind.TENSORFLOW, ONE_GPU_EACH[:2]))
    envs = [seen(executor, out, rank) for rank in range(2)]
    configs = [json.loads(env["TF_CONFIG"]) for env in envs]
    workers = configs[0]["cluster"]["worker"]
    assert len(set(workers)) == 2
    assert configs == [
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 0}},
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": 1}},
    ]
    assert [e.reason for e in collect(executor, 2).values()] == ["exited 0"] * 2


def test_a_failing_parameter_server_is_a_failure(executor: LocalExecutor, out: Path) -> None:
    run = kind_spec(out, Kind.TENSORFLOW, ONE_GPU_EACH[:1], servers=1, worker="sleep", ps="exit:3")
    executor.start(run)
    end = collect(executor, 1)[1]
    assert (end.rank, end.returncode, end.reason) == (1, 3, "ps-0 exited 3")
    assert end.failed and not end.expected
    assert executor.running("job", 0) == {0}
    executor.stop("job", 0, "SIGTERM", 30)
    assert collect(executor, 1)[0].failed  # stopped, not ended by itself


def test_a_parameter_server_that_ignores_sigterm_is_killed_after_its_grace(
    executor: LocalExecutor, out: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(local, "PS_GRACE_S", 0.3)
    run = kind_spec(out, Kind.TENSORFLOW, ONE_GPU_EACH[:1], servers=1, worker="wait", ps="ignore")
    executor.start(run)
    wait_until("the ps to ignore SIGTERM", lambda: len(list(out.glob("ready-*"))) == 2)
    (out / "go").write_text("")
    ends = collect(executor, 2)
    assert (ends[0].reason, ends[1].reason) == ("exited 0", "ps-0 killed by SIGKILL")
    assert not ends[1].failed


def test_an_adopted_tensorflow_run_stops_its_parameter_server_once_its_workers_end(
    executor: LocalExecutor, out: Path
) -> None:
    run = kind_spec(out, Kind.TENSORFLOW, ONE_GPU_EACH[:1], servers=1, worker="wait", ps="sleep")
    executor.start(run)
    wait_until("both members", lambda: len(list(out.glob("ready-*"))) == 2)
    executor.release_all()
    executor.adopt("job", 0, 1, Kind.TENSORFLOW, 1)
    assert executor.running("job", 0) == {0, 1}
    (out / "go").write_text("")
    ends = collect(executor, 2)
    assert (ends[0].reason, ends[1].reason) == ("exited 0", "ps-0 killed by SIGTERM")
    assert not ends[1].failed


def test_a_parameter_server_stopped_before_a_restart_is_no_failure_after_it(
    executor: LocalExecutor, out: Path, runs: Path
) -> None:
    """The workers end and the parameter server is told to go; the server restarts before
    it reports that end. The adopting executor reads every end from the files: the parameter
    server's is still the job's end, not a failure."""
    run = kind_spec(out, Kind.TENSORFLOW, ONE_GPU_EACH[:1], servers=1, worker="exit:0", ps="sleep")
    executor.start(run)
    wait_until("the worker to end", lambda: read_exit(executor.run_dir("job", 0), 0) is not None)
    with executor._lock:  # the poll that reports the worker's end and stops the ps, unreported
        for worker in executor._runs[("job", 0)].workers:
            worker.reported = worker.member.role == "worker"
        executor._stop_parameter_servers(executor._runs[("job", 0)], time.monotonic())
    wait_until("the ps to end", lambda: read_exit(executor.run_dir("job", 0), 1) is not None)
    executor.release_all()
    again = LocalExecutor(runs)
    again.adopt("job", 0, 1, Kind.TENSORFLOW, 1)
    ends = collect(again, 2)
    assert (ends[0].reason, ends[1].reason) == ("exited 0", "ps-0 killed by SIGTERM")
    assert not ends[0].failed and not ends[1].failed


def test_mpi_runs_its_launcher_alone_with_every_gpu_and_a_hostfile(
    executor: LocalExecutor, out: Path
) -> None:
    workers = (("n0", (0, 1)), ("n0", (4, 5)))
    executor.start(kind_spec(out, Kind.MPI, workers, launcher="sleep"))
    assert executor.running("job", 0) == {0}
    env = seen(executor, out, 0)
    hostfile = executor.run_dir("job", 0) / "hostfile"
    assert env["OMPI_MCA_orte_default_hostfile"] == env["TOPOSCHED_HOSTFILE"] == str(hostfile)
    # mpirun starts the 4 ranks itself, one per slot, each with one GPU of the visible four
    assert hostfile.read_text() == "127.0.0.1 slots=4\n"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1,4,5"
    assert "RANK" not in env and "TF_CONFIG" not in env and "MASTER_PORT" not in env
    assert (env["TOPOSCHED_JOB"], env["TOPOSCHED_QUEUE"]) == ("job", "research")
    executor.stop("job", 0, "SIGTERM", 30)
    end = collect(executor, 1)[0]
    assert (end.rank, end.reason) == (0, "launcher-0 killed by SIGTERM")
    assert "launcher " in executor.log_path("job", 0, 0).read_text()


def test_an_mpi_launchers_exit_is_the_jobs(executor: LocalExecutor, out: Path) -> None:
    executor.start(kind_spec(out, Kind.MPI, ONE_GPU_EACH, launcher="exit:4"))
    end = collect(executor, 1)[0]
    assert (end.returncode, end.reason, end.failed) == (4, "launcher-0 exited 4", True)


def test_every_attempt_of_a_job_is_told_the_same_checkpoint_directory(
    executor: LocalExecutor, out: Path, runs: Path
) -> None:
    for attempt in (0, 1):
        executor.start(spec(out, "exit:0", attempt=attempt))
        collect(executor, 1)
        executor.forget("job", attempt)
    first = json.loads((out / "info-0.json").read_text())["env"]["TOPOSCHED_CHECKPOINT_DIR"]
    assert first == str(runs / "job" / "checkpoint") == str(executor.checkpoint_dir("job"))
    assert (runs / "job" / "checkpoint").is_dir()
    # act.py rewrote info-0.json for attempt 1
    again = json.loads((out / "info-0.json").read_text())["env"]
    assert (again["TOPOSCHED_ATTEMPT"], again["TOPOSCHED_CHECKPOINT_DIR"]) == ("1", first)


def test_parameter_servers_are_for_tensorflow_only(executor: LocalExecutor, out: Path) -> None:
    for kind in (Kind.PYTORCH, Kind.MPI):
        with pytest.raises(ExecutorError, match="parameter servers"):
            executor.start(kind_spec(out, kind, ONE_GPU_EACH, servers=1))
    assert not (executor.run_dir("job", 0)).exists()


def test_a_shared_worker_sees_its_gpu_and_the_mps_share_where_a_daemon_answers(
    executor: LocalExecutor, out: Path, tmp_path: Path
) -> None:
    pipes = tmp_path / "mps"
    pipes.mkdir()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as daemon:
        daemon.bind(str(pipes / "control"))
        daemon.listen(4)
        run = replace(
            spec(out, "exit:0", workers=(("node-a", (5,)),), env={PIPE_DIRECTORY: str(pipes)}),
            share=GpuShare(250, 4096),
        )
        executor.start(run)
        collect(executor, 1)
    env = info(out, 0)["env"]
    assert env["CUDA_VISIBLE_DEVICES"] == "5"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=4096M"


def test_a_shared_worker_without_mps_is_time_sliced_on_its_gpu(
    executor: LocalExecutor, out: Path, tmp_path: Path
) -> None:
    run = replace(
        spec(out, "exit:0", workers=(("node-a", (2,)),), env={PIPE_DIRECTORY: str(tmp_path)}),
        share=GpuShare(500, 8192),
    )
    executor.start(run)
    collect(executor, 1)
    env = info(out, 0)["env"]
    assert env["CUDA_VISIBLE_DEVICES"] == "2"
    assert not any(name.startswith("CUDA_MPS_ACTIVE") for name in env)
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env
