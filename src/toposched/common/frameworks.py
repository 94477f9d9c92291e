"""Job kinds and the distributed environment each framework expects of its processes.

A job is `workers` GPU workers, plus (TensorFlow) parameter servers or (MPI) a launcher, which
need no GPU. Each driver says where the members run (a host name each); this module says what
each member is told:

- `pytorch`: torchrun's variables, rank 0 the master (`MASTER_ADDR`, `MASTER_PORT`, `RANK`,
  `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`);
- `tensorflow`: `TF_CONFIG`, the cluster (`worker`, and `ps` where asked) and the member's task,
  as `tf.distribute` reads it (MultiWorkerMirroredStrategy without `ps`,
  ParameterServerStrategy with it; with `ps`, worker 0 is also the `chief`, as TensorFlow's
  parameter-server training needs one coordinator);
- `mpi`: one launcher that runs `mpirun`/`horovodrun` over a hostfile naming each worker with
  its GPUs as slots (`OMPI_MCA_orte_default_hostfile`), the workers wait for it.

Arena's job types (`tfjob`, `mpijob`, `pytorchjob`) name the same kinds.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    PYTORCH = "pytorch"
    TENSORFLOW = "tensorflow"
    MPI = "mpi"


ARENA_KINDS = {"pytorchjob": Kind.PYTORCH, "tfjob": Kind.TENSORFLOW, "mpijob": Kind.MPI}
HOSTFILE = "/etc/toposched/hostfile"
TF_PORT = 2222
TORCH_PORT = 29500


class KindError(ValueError):
    """A job kind, or a role count, that the kind cannot have; the message names it."""


def kind_of(text: str) -> Kind:
    """A kind by its name or Arena's (`tfjob`); KindError lists the known ones."""
    found = ARENA_KINDS.get(text)
    if found is not None:
        return found
    try:
        return Kind(text)
    except ValueError:
        known = ", ".join([*(k.value for k in Kind), *ARENA_KINDS])
        raise KindError(f"unknown job kind {text!r}; known: {known}") from None


@dataclass(frozen=True)
class Member:
    """One process of a job: its role (`worker`, `ps`, `launcher`), its index in the role,
    and whether it holds GPUs."""

    role: str
    index: int

    @property
    def gpu(self) -> bool:
        return self.role == "worker"

    @property
    def name(self) -> str:
        return f"{self.role}-{self.index}"


def members(kind: Kind, workers: int, ps: int = 0) -> list[Member]:
    """Every member of a job, workers first (worker i is rank i)."""
    if ps and kind is not Kind.TENSORFLOW:
        raise KindError(f"parameter servers (ps={ps}) are for tensorflow jobs, not {kind.value}")
    if ps < 0:
        raise KindError(f"ps must be >= 0, got {ps}")
    out = [Member("worker", i) for i in range(workers)]
    out += [Member("ps", i) for i in range(ps)]
    if kind is Kind.MPI:
        out.append(Member("launcher", 0))
    return out


def environment(kind: Kind, member: Member, hosts: Mapping[str, Sequence[str]]) -> dict[str, str]:
    """What `member` is told, given the host of every member by role (`hosts["worker"][i]`)."""
    workers = hosts["worker"]
    if kind is Kind.PYTORCH:
        return {
            "MASTER_ADDR": workers[0],
            "MASTER_PORT": str(TORCH_PORT),
            "RANK": str(member.index),
            "WORLD_SIZE": str(len(workers)),
            "LOCAL_RANK": "0",  # one worker per pod: each pod is its own node to torch
            "LOCAL_WORLD_SIZE": "1",
        }
    if kind is Kind.TENSORFLOW:
        return {"TF_CONFIG": tf_config(member, hosts)}
    if member.role == "launcher":
        return {"OMPI_MCA_orte_default_hostfile": HOSTFILE, "TOPOSCHED_HOSTFILE": HOSTFILE}
    return {"TOPOSCHED_HOSTFILE": HOSTFILE}


def tf_config(member: Member, hosts: Mapping[str, Sequence[str]]) -> str:
    """TF_CONFIG for `member`: the whole cluster, and its own task."""
    cluster = {"worker": [f"{h}:{TF_PORT}" for h in hosts["worker"]]}
    ps = hosts.get("ps") or []
    task = {"type": member.role, "index": member.index}
    if ps:
        cluster["ps"] = [f"{h}:{TF_PORT}" for h in ps]
        # Parameter-server training needs a coordinator: worker 0 takes the chief's role.
        cluster["chief"] = cluster["worker"][:1]
        cluster["worker"] = cluster["worker"][1:]
        if member.role == "worker":
            task = (
                {"type": "chief", "index": 0}
                if member.index == 0
                else {"type": "worker", "index": member.index - 1}
            )
    return json.dumps({"cluster": cluster, "task": task}, sort_keys=True)


def hostfile(workers: Sequence[str], gpus_per_worker: int) -> str:
    """An Open MPI hostfile: each worker with one slot per GPU."""
    return "".join(f"{host} slots={gpus_per_worker}\n" for host in workers)
