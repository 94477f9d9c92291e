"""The FGD paper's experiment: openb pods packed one by one, never leaving, as demand grows.

The protocol of hkust-adsl/kubernetes-scheduler-simulator's `experiments/` README (Weng et al.,
ATC '23): every pod of the list (CPU-only and never-scheduled ones too) on the openb GPU node
list; the list inflated with pods drawn at random from it until the GPUs asked reach 1.3x the
cluster's (`tune`); the pods shuffled with the same seed; each placed by the policy or failed,
none ever ending. Measured as each pod arrives: the GPUs allocated (thousandths, over the
cluster's) against the GPUs asked so far; at the end, the GPUs left unallocated, which at
130% demand are the ones the placements left unusable ("fragmented").
"""

from __future__ import annotations

import csv
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from os import PathLike

from toposched.placement.sharing import (
    MILLI,
    Ask,
    Board,
    Measure,
    NodeRoom,
    Task,
    Workload,
    share_policy,
)
from toposched.topology.cluster import Cluster
from toposched.topology.resources import type_key

TUNE = 1.3  # the paper's workload: 130% of the cluster's GPUs asked
SEED = 42  # the first of its ten seeds (42..51)
MIB = 2**20


@dataclass(frozen=True)
class Pod:
    name: str
    cpus: int  # millicores
    memory: int  # bytes
    gpus: int
    milli: int  # per GPU (1000 for whole GPUs, 0 for none)
    types: frozenset[str]  # GPU type keys it accepts (empty: any)

    @property
    def asked(self) -> int:
        return self.gpus * self.milli

    def ask(self) -> Ask:
        return Ask(self.gpus, self.milli if self.gpus else 0, 0, self.cpus, self.memory)

    def task(self) -> Task:
        return Task(self.gpus, self.milli if self.gpus else 0, self.cpus, self.types)


def read_pods(path: str | PathLike[str]) -> list[Pod]:
    """Every pod of an openb pod list (`name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec
    ...]`), the resampled lists without times too; sorted by name, as the simulator keeps them."""
    pods = []
    with open(path, newline="", encoding="utf-8") as handle:
        for line, row in enumerate(csv.DictReader(handle), start=2):
            try:
                gpus = int(row["num_gpu"])
                milli = int(row["gpu_milli"]) if gpus else 0
                spec = (row.get("gpu_spec") or "").strip()
                types = frozenset(type_key(t) for t in spec.split("|") if t.strip())
                pod = Pod(
                    row["name"],
                    int(row["cpu_milli"]),
                    int(row["memory_mib"]) * MIB,
                    gpus,
                    milli,
                    types,
                )
            except (KeyError, ValueError, TypeError) as err:
                raise ValueError(f"{path}:{line}: not an openb pod row ({err})") from None
            if gpus < 0 or not 0 <= milli <= MILLI or (gpus > 1 and milli != MILLI):
                raise ValueError(f"{path}:{line}: num_gpu {gpus} with gpu_milli {milli}")
            pods.append(pod)
    return sorted(pods, key=lambda p: p.name)


def tuned(pods: Sequence[Pod], total_milli: int, rng: random.Random, tune: float) -> list[Pod]:
    """The paper simulator's tuning (pkg/simulator/simulator.go, TunePodsByNodeTotalResource):
    pods removed from `pods` at random while the GPUs asked exceed `tune` x the cluster's, or
    copies of pods drawn at random from `pods` appended until the next one drawn would pass it
    (that check adds the drawn pod's thousandths per GPU, as the simulator's does)."""
    out = list(pods)
    asked = sum(p.asked for p in out)
    target = tune * total_milli
    if asked >= target:
        while asked > target and out:
            asked -= out.pop(rng.randrange(len(out))).asked
        return out
    source = sorted(pods, key=lambda p: p.name)
    i = 0
    while True:
        pod = source[rng.randrange(len(source))]
        if asked + pod.milli > target:
            break
        out.append(replace(pod, name=f"{pod.name}-tuned-{i}"))
        asked += pod.asked
        i += 1
    return out


def arrivals_in(pods: Sequence[Pod], order: Sequence[str]) -> list[Pod]:
    """`pods` as `order` names them, each name once per arrival (a copy named after its pod)."""
    by_name = {p.name: p for p in pods}
    out = []
    for i, name in enumerate(order):
        pod = by_name.get(name)
        if pod is None:
            raise ValueError(f"arrival {i} names pod {name!r}, which the pod list lacks")
        out.append(pod)
    return out


def rooms_of(cluster: Cluster) -> list[NodeRoom]:
    out = []
    for i, node in enumerate(cluster.nodes):
        hw = node.hardware
        mib = hw.gpu_memory // MIB
        out.append(
            NodeRoom(
                i,
                type_key(hw.gpu_type),
                (MILLI,) * node.size,
                (mib,) * node.size,
                hw.cpus,
                hw.memory,
            )
        )
    return out


@dataclass(frozen=True)
class PackingResult:
    policy: str
    total_gpus: int
    pods: int
    failed: int
    # (GPUs asked so far in % of the cluster's, GPUs allocated in % of the cluster's), at
    # every whole percent of demand reached
    curve: tuple[tuple[int, float], ...]
    allocated_milli: int
    fragmentation: float  # FGD's measure summed over the nodes at the end, in GPUs

    @property
    def alloc_ratio(self) -> float:
        return self.allocated_milli / (self.total_gpus * MILLI)

    @property
    def unallocated_gpus(self) -> float:
        return self.total_gpus - self.allocated_milli / MILLI

    def alloc_ratio_at(self, percent: int) -> float:
        """The share of the cluster's GPUs allocated once the GPUs asked first reached
        `percent` of its (at the end, where demand stopped short of it)."""
        return dict(self.curve).get(percent, self.curve[-1][1]) / 100

    def unallocated_gpus_at(self, percent: int) -> float:
        """The GPUs unallocated then: where the paper's bar charts (and FGD's own simulator's
        figures in benchmarks/fgd_peer.py) read it, at 100%."""
        return self.total_gpus * (1 - self.alloc_ratio_at(percent))


def pack(
    pods: Sequence[Pod],
    cluster: Cluster,
    policy: str,
    seed: int = SEED,
    tune: float = TUNE,
    order: Sequence[str] | None = None,
) -> PackingResult:
    """Place `pods` (read_pods) on `cluster` by share policy `policy` under the protocol.

    `order`: the pods' names in the order they arrive, a name once per copy (as FGD's own
    simulator logged its run: benchmarks/fgd_peer.py), in place of this protocol's own shuffle
    and tuning, so that a side-by-side replays the very same arrivals; a name not in `pods` is
    a ValueError."""
    rng = random.Random(seed)
    rooms = rooms_of(cluster)
    total = sum(len(r.left) for r in rooms)
    if order is not None:
        arrivals = arrivals_in(pods, order)
    else:
        # The simulator's order (pkg/simulator/core.go, Simulate): the list by name,
        # shuffled, then tuned, so that copies arrive after every pod of the list.
        arrivals = sorted(pods, key=lambda p: p.name)
        rng.shuffle(arrivals)
        arrivals = tuned(arrivals, total * MILLI, rng, tune)
    # FGD's target workload: the kinds of the list as read, before tuning (SetTypicalPods runs
    # on the workload pods before TunePodsByNodeTotalResource).
    counts: dict[Task, int] = {}
    for pod in pods:
        counts[pod.task()] = counts.get(pod.task(), 0) + 1
    workload = Workload.typical(counts)
    rooms_all = [r.index for r in rooms]
    board = Board(rooms, share_policy(policy, workload, random.Random(seed)))
    by_type: dict[frozenset[str], list[int]] = {}
    asked = allocated = failed = 0
    curve: list[tuple[int, float]] = []
    for pod in arrivals:
        eligible = by_type.get(pod.types)
        if eligible is None:
            eligible = by_type[pod.types] = [
                r.index for r in rooms if not pod.types or r.gpu_type in pod.types
            ]
        ask = pod.ask()
        choice = board.choose(ask, rooms_all if pod.gpus == 0 else eligible)
        asked += pod.asked
        if choice is None:
            failed += 1
        else:
            board.land(choice.node, ask, choice.gpus)
            allocated += ask.total_milli if ask.gpus else 0
        percent = int(100 * asked / (total * MILLI))
        while len(curve) <= percent:
            curve.append((len(curve), 100 * allocated / (total * MILLI)))
    measure = Measure(workload)
    frag = sum(measure.of(r) for r in board.rooms) / MILLI
    return PackingResult(policy, total, len(arrivals), failed, tuple(curve), allocated, frag)
