"""Which cores a job's processes are pinned to: the pure choice, the plan per process, records."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from toposched.common.frameworks import Member
from toposched.executors import supervisor
from toposched.executors.cores import (
    CoreChoice,
    CpuListError,
    choose_cores,
    cores_path,
    cpu_list,
    parse_cpu_list,
    plan,
    read_cores,
)
from toposched.executors.supervisor import write_json_atomic
from toposched.topology.presets import preset

DGX1 = preset("dgx1-v100").cpu_affinity  # GPUs 0-3: 0-19,40-59; GPUs 4-7: 20-39,60-79
DGX1_HOST = frozenset(range(80))
SOCKET0 = frozenset([*range(20), *range(40, 60)])
WORKER = Member("worker", 0)


@pytest.mark.parametrize(
    ("text", "cpus"),
    [
        ("0-3", {0, 1, 2, 3}),
        ("0-1,40-41", {0, 1, 40, 41}),
        ("7", {7}),
        ("0,2,4", {0, 2, 4}),
        (" 3-4 ", {3, 4}),
    ],
)
def test_cpu_lists_read_as_nvidia_smi_and_proc_print_them(text: str, cpus: set[int]) -> None:
    assert parse_cpu_list(text) == cpus
    assert parse_cpu_list(cpu_list(cpus)) == cpus


@pytest.mark.parametrize("text", ["", "a-3", "3-", "4-2", "0-3;5", "-1", "N/A"])
def test_a_bad_cpu_list_is_refused_quoting_it(text: str) -> None:
    with pytest.raises(CpuListError, match="CPU list"):
        parse_cpu_list(text)


def test_cpu_list_is_the_shortest_form() -> None:
    assert cpu_list([5, 0, 1, 2, 40, 41]) == "0-2,5,40-41"
    assert cpu_list([]) == ""


# --- choose_cores: cores of the NUMA node, cores already held, N --------------------------


def test_free_cores_of_the_numa_node_lowest_first() -> None:
    assert choose_cores(SOCKET0, DGX1_HOST, set(), 4) == (0, 1, 2, 3)


def test_held_cores_are_passed_over_for_free_ones_of_the_same_node() -> None:
    assert choose_cores(SOCKET0, DGX1_HOST, {0, 1, 2}, 4) == (3, 4, 5, 6)


def test_when_the_node_is_held_free_cores_elsewhere_come_before_sharing() -> None:
    held = set(SOCKET0) - {19}
    assert choose_cores(SOCKET0, DGX1_HOST, held, 3) == (19, 20, 21)


def test_more_cpus_asked_than_the_numa_node_has_takes_the_rest_from_the_host() -> None:
    near = {0, 1, 2, 3}
    got = choose_cores(near, range(8), set(), 6)
    assert got == (0, 1, 2, 3, 4, 5)
    assert set(got) >= near


def test_with_every_core_held_they_are_shared_nearest_first() -> None:
    assert choose_cores({2, 3}, range(4), set(range(4)), 3) == (0, 2, 3)


def test_never_more_cores_than_the_host_has() -> None:
    assert choose_cores({0, 1}, {0, 1}, set(), 8) == (0, 1)


def test_numa_cores_the_host_lacks_are_not_used() -> None:
    assert choose_cores({40, 41, 42}, {0, 1, 41}, set(), 2) == (0, 41)


def test_zero_asked_gives_none() -> None:
    assert choose_cores(SOCKET0, DGX1_HOST, set(), 0) == ()


# --- plan: one process's cores and its note ----------------------------------------------


def test_a_worker_that_asks_nothing_gets_its_whole_numa_node_and_holds_none() -> None:
    got = plan(WORKER, (5,), DGX1, DGX1_HOST, set(), 0)
    assert cpu_list(got.cores) == "20-39,60-79"
    assert got.numa == "20-39,60-79"
    assert not got.holds
    assert got.note == ""


def test_a_worker_asking_cpus_gets_that_many_on_its_node() -> None:
    got = plan(WORKER, (0,), DGX1, DGX1_HOST, {0, 1}, 2500)  # 2.5 CPUs: 3 cores
    assert got.cores == (2, 3, 4)
    assert got.holds
    assert got.note == ""


def test_a_worker_on_gpus_of_two_nodes_gets_both_nodes() -> None:
    got = plan(WORKER, (3, 4), DGX1, DGX1_HOST, set(), 0)
    assert got.cores == tuple(range(80))
    assert got.numa == "0-79"


def test_more_cpus_than_the_node_has_says_where_the_rest_came_from() -> None:
    affinity = ["0-1", "2-3"]
    got = plan(WORKER, (0,), affinity, range(4), set(), 3000)
    assert got.cores == (0, 1, 2)
    assert "3 CPUs asked, 2 on its GPUs' NUMA node: 2 from the rest of the host" in got.note


def test_sharing_a_held_core_is_said() -> None:
    got = plan(WORKER, (0,), ["0-1"], range(2), {0, 1}, 1000)
    assert got.cores == (0,)
    assert "shares 0 with other workers" in got.note


def test_an_emulated_list_naming_no_core_of_this_host_falls_back_to_the_host() -> None:
    got = plan(WORKER, (4,), DGX1, {0, 1}, set(), 0)
    assert got.cores == (0, 1)
    assert got.note == (
        "its GPUs' NUMA node (20-39,60-79) has no core on this host (0-1): the host's cores"
    )


def test_an_emulated_list_partly_on_this_host_keeps_what_is_here_and_says_so() -> None:
    got = plan(WORKER, (0,), DGX1, {0, 1}, set(), 0)
    assert got.cores == (0, 1)
    assert got.note == "CPUs 2-19,40-59 of its GPUs' NUMA node (0-19,40-59) are not on this host"


def test_more_than_the_host_has_gives_all_of_it_and_says_so() -> None:
    got = plan(WORKER, (0,), ["0-1"], {0, 1}, set(), 4000)
    assert got.cores == (0, 1)
    assert "4 CPUs asked, the host has 2: all of them" in got.note


def test_unknown_affinity_means_the_hosts_cores() -> None:
    got = plan(WORKER, (0, 1), ["0-3", None], range(8), set(), 0)
    assert got.cores == tuple(range(8))
    assert got.numa is None
    assert got.note == "CPU affinity of GPU 1 unknown: the host's cores"


def test_an_unreadable_affinity_means_the_hosts_cores() -> None:
    got = plan(WORKER, (0,), ["0-3;9"], range(4), set(), 0)
    assert got.cores == (0, 1, 2, 3)
    assert "GPU 0: CPU list '0-3;9'" in got.note


def test_a_parameter_server_gets_what_it_asks_from_the_whole_host() -> None:
    ps = Member("ps", 0)
    assert plan(ps, (), DGX1, DGX1_HOST, set(), 0).cores == tuple(range(80))
    got = plan(ps, (), DGX1, DGX1_HOST, {0, 1}, 2000)
    assert got.cores == (2, 3)
    assert got.numa is None
    assert got.note == "no GPU: cores of the whole host"


def test_an_mpi_launcher_asks_for_every_rank_on_its_gpus_nodes() -> None:
    launcher = Member("launcher", 0)
    got = plan(launcher, (4, 5, 6, 7), DGX1, DGX1_HOST, set(), 2000, workers=2)
    assert got.cores == (20, 21, 22, 23)
    assert plan(launcher, (4, 5), DGX1, DGX1_HOST, set(), 0).cores == tuple(
        sorted(parse_cpu_list("20-39,60-79"))
    )


# --- the record -------------------------------------------------------------------------


def test_the_record_reads_back(tmp_path: Path) -> None:
    choice = CoreChoice((0, 1, 2, 5), 4000, "0-19,40-59", "a note")
    write_json_atomic(cores_path(tmp_path, 3), choice.to_json(), durable=False)
    assert read_cores(tmp_path, 3) == choice
    assert read_cores(tmp_path, 4) is None


@pytest.mark.parametrize(
    "text",
    ["", "{", "[]", '{"cores": "0-1"}', '{"cores": "x", "asked": 0, "numa": null, "note": ""}'],
)
def test_a_bad_record_reads_as_none(tmp_path: Path, text: str) -> None:
    cores_path(tmp_path, 0).write_text(text)
    assert read_cores(tmp_path, 0) is None


@pytest.mark.parametrize("argv", [[], ["run"], ["run", "x"], ["run", "0", "--", "true"]])
def test_the_supervisor_refuses_a_bad_command_line(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert supervisor.main(argv) == 2
    assert (
        "usage: python -I -m toposched.executors.supervisor RUN_DIR RANK" in capsys.readouterr().err
    )


@pytest.mark.parametrize(
    "record",
    [
        {"command": [], "env": None},
        {"command": "true", "env": None},
        {"command": ["true"], "env": {"A": 1}},
        {"command": ["true"], "env": None, "cpus": 0},
        {"command": ["true"], "env": None, "user": [0]},
        {"command": ["true"], "env": None, "container": ["podman"]},
    ],
)
def test_the_supervisor_runs_nothing_of_a_record_that_is_not_one(
    tmp_path: Path, record: dict[str, object], capsys: pytest.CaptureFixture[str]
) -> None:
    path = supervisor.start_path(tmp_path, 0)
    path.write_text(json.dumps(record))
    assert supervisor.main([str(tmp_path), "0"]) == 2
    assert capsys.readouterr().err == f"{path} is not a start record\n"
    assert not supervisor.exit_path(tmp_path, 0).exists()  # nothing ran, nothing recorded
    assert supervisor.main([str(tmp_path), "1"]) == 2
    assert "no readable start record" in capsys.readouterr().err


def test_a_start_record_is_private_and_read_once(tmp_path: Path) -> None:
    path = supervisor.start_path(tmp_path, 0)
    record = supervisor.StartRecord(["true"], {"SECRET": "x"}, None, None, None, None)
    supervisor.write_start(path, record)
    assert path.stat().st_mode & 0o777 == 0o600
    module = "toposched.executors.supervisor"
    ran = subprocess.run([sys.executable, "-I", "-m", module, str(tmp_path), "0"], timeout=60)
    assert ran.returncode == 0
    assert not path.exists()
    ended = supervisor.read_exit(tmp_path, 0)
    assert ended is not None and ended.returncode == 0
