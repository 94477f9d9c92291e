"""Workers pinned to their GPUs' NUMA cores, shown by what real worker processes see."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.test_local_executor import my_children, wait_until
from tests.server import kill_leftover_workers
from toposched.common.frameworks import Kind
from toposched.executors.cores import parse_cpu_list
from toposched.executors.local import LocalExecutor, RunSpec, WorkerExit
from toposched.executors.supervisor import read_pids
from toposched.topology.node import NodeTopology
from toposched.topology.presets import preset

# Cores 0 and 1 are what the smallest machine these tests run on (2 cores) has.
pytestmark = pytest.mark.skipif(
    not {0, 1} <= os.sched_getaffinity(0), reason="needs CPUs 0 and 1 to pin workers to"
)

# What a worker sees: its mask, /proc's list, a thread's mask and a child's list, by its pid.
SHOW = r"""
import json, os, subprocess, sys, threading, time
def allowed(status):
    return next(l.split(":", 1)[1].strip() for l in status.splitlines()
                if l.startswith("Cpus_allowed_list:"))
thread = {}
t = threading.Thread(target=lambda: thread.update(mask=sorted(os.sched_getaffinity(0))))
t.start(); t.join()
child = subprocess.run(["cat", "/proc/self/status"], capture_output=True, text=True).stdout
mine = allowed(open("/proc/self/status").read())
seen = {"mask": sorted(os.sched_getaffinity(0)), "allowed": mine, "thread": thread["mask"],
        "child": allowed(child)}
path = os.path.join(sys.argv[1], f"{os.getpid()}.json")
with open(path + ".tmp", "w") as f:
    json.dump(seen, f)
os.rename(path + ".tmp", path)
if sys.argv[2] == "sleep":
    time.sleep(60)
"""


def two_gpus(*affinity: str) -> NodeTopology:
    n = len(affinity)
    codes = [["X" if i == j else "NV1" for j in range(n)] for i in range(n)]
    return NodeTopology.from_codes(codes, cpu_affinity=list(affinity), name="test")


@pytest.fixture
def make_executor(tmp_path: Path) -> Iterator[Callable[..., LocalExecutor]]:
    """Executors on one runs directory; afterwards no worker is left and all are reaped."""
    made: list[LocalExecutor] = []
    before = set(my_children())

    def make(**options: Any) -> LocalExecutor:
        made.append(LocalExecutor(tmp_path / "runs", **options))
        return made[-1]

    yield make
    kill_leftover_workers(tmp_path)

    def no_children() -> bool:
        for executor in made:
            executor.poll()
        return not set(my_children()) - before

    wait_until("every supervisor to be reaped", no_children)


def run(
    out: Path,
    job: str,
    workers: tuple[tuple[int, ...], ...],
    *,
    cpus: int = 0,
    action: str = "exit",
    kind: Kind = Kind.PYTORCH,
    ps: int = 0,
) -> RunSpec:
    return RunSpec(
        job=job,
        attempt=0,
        queue="research",
        command=(sys.executable, "-c", SHOW, str(out), action),
        env={},
        workdir=None,
        workers=tuple(("node", gpus) for gpus in workers),
        restart_count=0,
        kind=kind,
        ps=ps,
        cpus=cpus,
    )


def collect(executor: LocalExecutor, count: int) -> list[WorkerExit]:
    """Poll until `count` ends, of any jobs, are reported."""
    ends: list[WorkerExit] = []

    def more() -> bool:
        ends.extend(executor.poll())
        return len(ends) >= count

    wait_until(f"{count} ends", more)
    return ends


def seen(executor: LocalExecutor, out: Path, job: str, rank: int) -> dict[str, Any]:
    """What process `rank` of `job` saw, checked to be one mask for it, a thread and a child."""
    pids = read_pids(executor.run_dir(job, 0), rank)
    assert pids is not None
    path = out / f"{pids.worker_pid}.json"
    wait_until(path.name, path.exists)
    got: dict[str, Any] = json.loads(path.read_text())
    assert parse_cpu_list(got["allowed"]) == set(got["mask"])
    assert got["thread"] == got["mask"]
    assert parse_cpu_list(got["child"]) == set(got["mask"])
    return got


def test_each_worker_runs_on_its_gpus_numa_node(
    make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    executor = make_executor(topology=two_gpus("1", "0"))
    executor.start(run(out, "job", ((0,), (1,))))
    collect(executor, 2)
    assert [seen(executor, out, "job", rank)["allowed"] for rank in (0, 1)] == ["1", "0"]
    records = executor.cores("job", 0, 2)
    assert [(r.cores, r.numa, r.note, r.holds) for r in records if r] == [
        ((1,), "1", "", False),
        ((0,), "0", "", False),
    ]


def test_workers_asking_cpus_get_cores_no_other_worker_holds(
    make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    executor = make_executor(topology=two_gpus("0-1", "0-1"), host_cores={0, 1})
    executor.start(run(out, "a", ((0,),), cpus=1000, action="sleep"))
    executor.start(run(out, "b", ((1,),), cpus=500, action="sleep"))  # half a CPU: one core
    assert seen(executor, out, "a", 0)["mask"] == [0]
    assert seen(executor, out, "b", 0)["mask"] == [1]
    # Every core is held now: the next shares, and says so
    executor.start(run(out, "c", ((0,),), cpus=1000))
    assert seen(executor, out, "c", 0)["mask"] == [0]
    shared = executor.cores("c", 0, 1)[0]
    assert shared is not None and shared.note == "shares 0 with other workers"
    # A worker that asks nothing gets its whole node, whoever holds it
    executor.start(run(out, "d", ((1,),)))
    assert seen(executor, out, "d", 0)["mask"] == [0, 1]
    for job in ("a", "b"):
        executor.stop(job, 0, "SIGKILL", 0)
    collect(executor, 4)


def test_a_gang_asking_cpus_is_spread_over_free_cores(
    make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    executor = make_executor(topology=two_gpus("0-1", "0-1"), host_cores={0, 1})
    executor.start(run(out, "job", ((0,), (1,)), cpus=1000))
    collect(executor, 2)
    assert [seen(executor, out, "job", rank)["mask"] for rank in (0, 1)] == [[0], [1]]


def test_more_cpus_asked_than_the_host_has_gives_all_of_it(
    make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    executor = make_executor(topology=two_gpus("1", "0"), host_cores={0, 1})
    executor.start(run(out, "job", ((0,),), cpus=3000))
    collect(executor, 1)
    assert seen(executor, out, "job", 0)["mask"] == [0, 1]
    record = executor.cores("job", 0, 1)[0]
    assert record is not None
    assert record.note == (
        "3 CPUs asked, 1 on its GPUs' NUMA node: 0 from the rest of the host; "
        "3 CPUs asked, the host has 2: all of them"
    )


def test_an_emulated_topology_uses_only_cores_this_host_has(
    make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    host = os.sched_getaffinity(0)
    executor = make_executor(topology=preset("dgx1-v100"))
    executor.start(run(out, "job", ((0,), (4,))))
    collect(executor, 2)
    for rank, listed in enumerate(("0-19,40-59", "20-39,60-79")):
        here = parse_cpu_list(listed) & host
        assert set(seen(executor, out, "job", rank)["mask"]) == (here or host)
        record = executor.cores("job", 0, 2)[rank]
        assert record is not None and record.numa == listed
        if not here:
            assert record.note.startswith(f"its GPUs' NUMA node ({listed}) has no core on this")


def test_a_parameter_server_takes_its_cpus_from_the_whole_host(
    make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    executor = make_executor(topology=two_gpus("1", "0"), host_cores={0, 1})
    job = run(out, "job", ((0,),), cpus=1000, kind=Kind.TENSORFLOW, ps=1, action="sleep")
    executor.start(job)
    assert seen(executor, out, "job", 0)["mask"] == [1]  # the worker, on GPU 0's node
    assert seen(executor, out, "job", 1)["mask"] == [0]  # the parameter server: what is free
    ps = executor.cores("job", 0, 2)[1]
    assert ps is not None and ps.note == "no GPU: cores of the whole host"
    executor.stop("job", 0, "SIGKILL", 0)
    collect(executor, 2)


def test_an_mpi_launcher_and_the_ranks_it_starts_run_on_every_gpus_node(
    make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    executor = make_executor(topology=two_gpus("1", "1", "0"), host_cores={0, 1})
    executor.start(run(out, "job", ((0,), (1,)), kind=Kind.MPI))
    collect(executor, 1)
    assert seen(executor, out, "job", 0)["allowed"] == "1"  # the child stands for a rank


def test_an_adopted_run_keeps_holding_its_cores(
    make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    topology = two_gpus("0-1", "0-1")
    first = make_executor(topology=topology, host_cores={0, 1})
    first.start(run(out, "a", ((0,),), cpus=1000, action="sleep"))
    assert seen(first, out, "a", 0)["mask"] == [0]
    first.release_all()
    again = make_executor(topology=topology, host_cores={0, 1})  # a restarted server's
    again.adopt("a", 0, 1)
    again.start(run(out, "b", ((1,),), cpus=1000))
    assert seen(again, out, "b", 0)["mask"] == [1]
    again.stop("a", 0, "SIGKILL", 0)
    collect(again, 2)


def test_cores_the_kernel_refuses_leave_the_worker_unpinned_and_the_log_says_so(
    make_executor: Callable[..., LocalExecutor], out: Path
) -> None:
    missing = max(os.sched_getaffinity(0)) + 4096  # no machine here has this CPU
    executor = make_executor(host_cores={missing})
    executor.start(run(out, "job", ((0,),)))
    collect(executor, 1)
    assert set(seen(executor, out, "job", 0)["mask"]) == os.sched_getaffinity(0)
    log = executor.log_path("job", 0, 0).read_text()
    assert f"[toposched] worker 0: cannot pin to CPUs {missing}:" in log
