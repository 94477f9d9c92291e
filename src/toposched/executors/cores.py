"""Which CPU cores each process of a job is pinned to, and the record that says so."""

# A GPU worker runs on the cores of its GPUs' NUMA node (the node topology's `cpu_affinity`,
# from NVML or nvidia-smi), as far as this host has them. A worker that asks for N CPUs gets N
# cores: its NUMA node's free ones first, then the rest of the host's free ones, and only then
# cores another worker holds (a core shared halves both workers; one on the other socket only
# makes its memory farther). A worker that asks for none gets every core of its NUMA node and
# holds none, so that it never pushes a worker that asked off its cores. A parameter server
# has no GPU and so no NUMA node: N cores of the whole host (none asked: all of them). An MPI
# launcher holds every GPU of the job and the ranks mpirun starts inherit its cores: it gets
# its GPUs' NUMA nodes, or N cores for each worker (what the scheduler counts for the job).

from __future__ import annotations

import json
import math
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from toposched.topology.cpulist import CpuListError, cpu_list, parse_cpu_list

if TYPE_CHECKING:  # the supervisor imports this module: it stays light
    from toposched.common.frameworks import Member

__all__ = [
    "CoreChoice",
    "CpuListError",
    "choose_cores",
    "cores_path",
    "cpu_list",
    "parse_cpu_list",
    "plan",
    "read_cores",
]


def choose_cores(
    near: Collection[int], host: Collection[int], held: Collection[int], count: int
) -> tuple[int, ...]:
    """`count` cores for one worker, lowest first in each group: free ones of `near` (its NUMA
    node), free ones of the rest of `host`, then held ones, near first. Never more than the
    host has; `near` cores the host lacks are not used."""
    usable = set(host)
    near_set = set(near) & usable
    far_set = usable - near_set
    taken = set(held)
    order = [
        *sorted(near_set - taken),
        *sorted(far_set - taken),
        *sorted(near_set & taken),
        *sorted(far_set & taken),
    ]
    return tuple(sorted(order[: max(count, 0)]))


@dataclass(frozen=True)
class CoreChoice:
    """One process's cores, how many CPUs it asked (millicores, 0: none), whether it holds them
    (it asked), what its GPUs' NUMA nodes list, and what was not as asked, in words."""

    cores: tuple[int, ...]
    asked: int = 0
    numa: str | None = None  # the CPUs of its GPUs' NUMA nodes, one list; None: no GPU, unknown
    note: str = ""

    @property
    def holds(self) -> bool:
        return self.asked > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "cores": cpu_list(self.cores),
            "asked": self.asked,
            "numa": self.numa,
            "note": self.note,
        }


def plan(
    member: Member,
    gpus: Sequence[int],
    affinity: Sequence[str | None],
    host: Collection[int],
    held: Collection[int],
    asked: int,
    workers: int = 1,
) -> CoreChoice:
    """The cores of one process: `gpus` it holds, `affinity` each GPU's CPU list (indexed by GPU,
    None or missing where unknown), the `host` cores this process may use, cores `held` by other
    processes, `asked` millicores per worker. `workers` is how many ranks an MPI launcher
    starts: they inherit its cores, so it asks for theirs (and runs on its GPUs' nodes)."""
    count = math.ceil(asked / 1000) * (workers if member.role == "launcher" else 1)
    if not gpus:
        # A parameter server has no GPU, so no NUMA node of its own: any of the host's cores
        why = "no GPU: cores of the whole host"
        cores = choose_cores((), host, held, count) if count else tuple(sorted(host))
        return CoreChoice(cores, asked, None, _shortfall(why, count, cores, held))
    near, numa, notes = _near(gpus, affinity, host)
    if not count:
        return CoreChoice(tuple(sorted(near)), 0, numa, "; ".join(notes))
    cores = choose_cores(near, host, held, count)
    if outside := [c for c in cores if c not in near]:
        notes.append(
            f"{count} CPUs asked, {len(near)} on its GPUs' NUMA node: "
            f"{cpu_list(outside)} from the rest of the host"
        )
    return CoreChoice(cores, asked, numa, _shortfall("; ".join(notes), count, cores, held))


def _near(
    gpus: Sequence[int], affinity: Sequence[str | None], host: Collection[int]
) -> tuple[frozenset[int], str | None, list[str]]:
    """The host's cores on the GPUs' NUMA nodes, the GPUs' CPUs as one list, and notes."""
    lists = [affinity[g] if 0 <= g < len(affinity) else None for g in gpus]
    if unknown := [str(g) for g, text in zip(gpus, lists, strict=True) if not text]:
        why = f"CPU affinity of GPU {','.join(unknown)} unknown: the host's cores"
        return frozenset(host), None, [why]
    listed: set[int] = set()
    for gpu, text in zip(gpus, lists, strict=True):
        try:
            listed |= parse_cpu_list(text or "")
        except CpuListError as err:
            return frozenset(host), text, [f"GPU {gpu}: {err}: the host's cores"]
    numa = cpu_list(listed)
    here = listed & set(host)
    if not here:
        here_text = cpu_list(host)
        why = (
            f"its GPUs' NUMA node ({numa}) has no core on this host ({here_text}): the host's cores"
        )
        return frozenset(host), numa, [why]
    notes = []
    if missing := listed - here:
        notes.append(
            f"CPUs {cpu_list(missing)} of its GPUs' NUMA node ({numa}) are not on this host"
        )
    return frozenset(here), numa, notes


def _shortfall(note: str, count: int, cores: Sequence[int], held: Collection[int]) -> str:
    notes = [note] if note else []
    if count > len(cores):
        notes.append(f"{count} CPUs asked, the host has {len(cores)}: all of them")
    if shared := [c for c in cores if c in held]:
        notes.append(f"shares {cpu_list(shared)} with other workers")
    return "; ".join(notes)


def cores_path(run_dir: Path, rank: int) -> Path:
    return run_dir / f"worker-{rank}.cores"


def read_cores(run_dir: Path, rank: int) -> CoreChoice | None:
    """The record the executor wrote before starting process `rank`, or None (none, or bad)."""
    try:
        data = json.loads(cores_path(run_dir, rank).read_bytes())
        cores = tuple(sorted(parse_cpu_list(data["cores"]))) if data["cores"] else ()
        asked, numa, note = data["asked"], data["numa"], data["note"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(asked, int) or not isinstance(note, str):
        return None
    return CoreChoice(cores, asked, numa if isinstance(numa, str) else None, note)
