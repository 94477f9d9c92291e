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

Where every member runs on one machine (the standalone server's local executor), members share
the host, so each is given its own port (`ports`), local ranks count per machine (`machines`),
and an MPI job is its launcher alone (`local_members`): mpirun starts the ranks itself.

Arena's job types (`tfjob`, `mpijob`, `pytorchjob`) name the same kinds.
"""

from __future__ import annotations

import json
from collections import Counter
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
MAX_PS = 64


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
    if ps > MAX_PS:
        raise KindError(f"ps must be <= {MAX_PS}, got {ps}")
    out = [Member("worker", i) for i in range(workers)]
    out += [Member("ps", i) for i in range(ps)]
    if kind is Kind.MPI:
        out.append(Member("launcher", 0))
    return out


def local_members(kind: Kind, workers: int, ps: int = 0) -> list[Member]:
    """The processes of a job whose members all run on one machine, in the order of their logs.

    As `members`, but an MPI job is its launcher alone: on one machine mpirun starts the ranks
    (the workers) itself, as its own children, with no remote shell to reach them by.
    """
    roster = members(kind, workers, ps)
    return [m for m in roster if m.role == "launcher"] if kind is Kind.MPI else roster


def environment(
    kind: Kind,
    member: Member,
    hosts: Mapping[str, Sequence[str]],
    *,
    ports: Mapping[str, Sequence[int]] | None = None,
    machines: Sequence[str] | None = None,
    hostfile_path: str = HOSTFILE,
) -> dict[str, str]:
    """What `member` is told, given the host of every member by role (`hosts["worker"][i]`).

    `ports` gives each member's port by role where members share a host (else each listens on
    its framework's port); `machines` names the machine of each worker where that is not its
    host (torch's local ranks count the workers of one machine); `hostfile_path` is where the
    MPI hostfile is.
    """
    workers = hosts["worker"]
    if kind is Kind.PYTORCH:
        where = list(machines if machines is not None else workers)
        mine = where[member.index]
        return {
            "MASTER_ADDR": workers[0],
            "MASTER_PORT": str(ports["worker"][0] if ports else TORCH_PORT),
            "RANK": str(member.index),
            "WORLD_SIZE": str(len(workers)),
            "LOCAL_RANK": str(where[: member.index].count(mine)),
            "LOCAL_WORLD_SIZE": str(where.count(mine)),
        }
    if kind is Kind.TENSORFLOW:
        return {"TF_CONFIG": tf_config(member, hosts, ports)}
    if member.role == "launcher":
        return {
            "OMPI_MCA_orte_default_hostfile": hostfile_path,
            "TOPOSCHED_HOSTFILE": hostfile_path,
        }
    return {"TOPOSCHED_HOSTFILE": hostfile_path}


def tf_config(
    member: Member,
    hosts: Mapping[str, Sequence[str]],
    ports: Mapping[str, Sequence[int]] | None = None,
) -> str:
    """TF_CONFIG for `member`: the whole cluster, and its own task."""

    def addresses(role: str) -> list[str]:
        got = ports.get(role) if ports else None
        return [f"{h}:{got[i] if got else TF_PORT}" for i, h in enumerate(hosts.get(role) or [])]

    cluster = {"worker": addresses("worker")}
    ps = addresses("ps")
    task = {"type": member.role, "index": member.index}
    if ps:
        cluster["ps"] = ps
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
    """An Open MPI hostfile: each worker's host with one slot per GPU; workers that share a host
    make one line with all their slots."""
    slots = Counter(workers)  # in the order hosts first appear
    return "".join(f"{host} slots={n * gpus_per_worker}\n" for host, n in slots.items())
