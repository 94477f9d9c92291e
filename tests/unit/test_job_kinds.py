"""Job kinds on the wire, in job files, in stored specs, and what one machine's members are told."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from toposched.client.jobfile import JobFileError, parse_job_text
from toposched.common.frameworks import (
    Kind,
    KindError,
    Member,
    environment,
    hostfile,
    local_members,
    members,
)
from toposched.common.jobspec import job_kind, local_processes
from toposched.server.schemas import JobSubmit


def refused(**body: Any) -> list[tuple[tuple[str | int, ...], str]]:
    with pytest.raises(ValidationError) as err:
        JobSubmit.model_validate({"command": ["true"], **body})
    return [(tuple(e["loc"]), e["msg"]) for e in err.value.errors()]


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        (None, "pytorch"),
        ("pytorch", "pytorch"),
        ("tensorflow", "tensorflow"),
        ("mpi", "mpi"),
        ("pytorchjob", "pytorch"),
        ("tfjob", "tensorflow"),
        ("mpijob", "mpi"),
    ],
)
def test_a_kind_is_stored_by_its_own_name(given: str | None, stored: str) -> None:
    body: dict[str, Any] = {"command": ["true"]}
    if given is not None:
        body["kind"] = given
    spec = JobSubmit.model_validate(body).model_dump()
    assert (spec["kind"], spec["ps"]) == (stored, 0)


def test_parameter_servers_are_for_tensorflow_jobs() -> None:
    assert JobSubmit.model_validate({"command": ["x"], "kind": "tfjob", "ps": 64}).ps == 64
    [(loc, msg)] = refused(ps=1)
    assert loc == ("ps",)
    assert "parameter servers (ps=1) are for tensorflow jobs, not pytorch" in msg
    [(loc, msg)] = refused(kind="mpijob", ps=2)
    assert (loc, "not mpi" in msg) == (("ps",), True)
    for bad in (-1, 65):
        assert [loc for loc, _ in refused(kind="tensorflow", ps=bad)] == [("ps",)]
    assert [loc for loc, _ in refused(kind="tensorflow", ps="2")] == [("ps",)]  # strict types


def test_an_unknown_kind_is_refused_with_the_known_ones() -> None:
    [(loc, msg)] = refused(kind="caffe", ps=1)  # no second error about ps
    assert loc == ("kind",)
    assert "unknown job kind 'caffe'" in msg and "tensorflow" in msg and "tfjob" in msg
    assert [loc for loc, _ in refused(kind=1)] == [("kind",)]


def test_a_job_file_gives_kind_and_ps_with_their_lines() -> None:
    job = parse_job_text("kind: tfjob\nps: 2\ncommand: python train.py\n", "tf.yaml")
    assert (job.spec["kind"], job.spec["ps"]) == ("tfjob", 2)
    assert (job.line_of("body.kind"), job.line_of("body.ps")) == (1, 2)
    with pytest.raises(JobFileError) as err:
        parse_job_text("command: x\nkind: caffe\n", "bad.yaml")
    assert (err.value.line, err.value.field) == (2, "kind")
    assert str(err.value).startswith("bad.yaml:2: kind: unknown job kind 'caffe'; known: ")
    with pytest.raises(JobFileError, match=r"bad.yaml:1: ps: expected a whole number, got"):
        parse_job_text("ps: two\ncommand: x\n", "bad.yaml")


def test_a_stored_spec_from_before_kinds_is_pytorch() -> None:
    assert job_kind({"workers": 2}) == (Kind.PYTORCH, 0)
    assert job_kind({"kind": "tensorflow", "ps": 3}) == (Kind.TENSORFLOW, 3)
    names = [m.name for m in local_processes({"kind": "tensorflow", "ps": 2}, 2)]
    assert names == ["worker-0", "worker-1", "ps-0", "ps-1"]
    assert [m.name for m in local_processes({}, 3)] == ["worker-0", "worker-1", "worker-2"]


def test_on_one_machine_an_mpi_job_is_its_launcher() -> None:
    assert [m.name for m in members(Kind.MPI, 2)] == ["worker-0", "worker-1", "launcher-0"]
    assert local_members(Kind.MPI, 2) == [Member("launcher", 0)]
    with pytest.raises(KindError, match="ps must be <= 64"):
        members(Kind.TENSORFLOW, 1, 65)


def test_a_hostfile_gives_a_shared_host_all_its_slots_on_one_line() -> None:
    assert hostfile(["127.0.0.1"] * 3, 2) == "127.0.0.1 slots=6\n"
    assert hostfile(["a", "b", "a"], 1) == "a slots=2\nb slots=1\n"


def test_members_sharing_a_host_get_a_port_each_and_local_ranks_per_machine() -> None:
    hosts = {"worker": ["127.0.0.1"] * 3, "ps": ["127.0.0.1"]}
    ports = {"worker": [1001, 1002, 1003], "ps": [2001]}
    config = json.loads(
        environment(Kind.TENSORFLOW, Member("ps", 0), hosts, ports=ports)["TF_CONFIG"]
    )
    assert config == {
        "cluster": {
            "chief": ["127.0.0.1:1001"],
            "worker": ["127.0.0.1:1002", "127.0.0.1:1003"],
            "ps": ["127.0.0.1:2001"],
        },
        "task": {"type": "ps", "index": 0},
    }
    torch = environment(
        Kind.PYTORCH, Member("worker", 2), hosts, ports=ports, machines=["a", "b", "a"]
    )
    assert torch == {
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1001",
        "RANK": "2",
        "WORLD_SIZE": "3",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
    }
    launcher = environment(Kind.MPI, Member("launcher", 0), hosts, hostfile_path="/run/hf")
    assert launcher == {
        "OMPI_MCA_orte_default_hostfile": "/run/hf",
        "TOPOSCHED_HOSTFILE": "/run/hf",
    }
