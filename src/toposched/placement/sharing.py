"""Placing work where GPUs are shared: FGD's fragmentation measure and the share policies.

A node is seen as `NodeRoom`: each GPU's thousandths left, its GPU memory left, its CPUs and
memory free. An `Ask` is one worker: a share of one GPU (`milli` < 1000 and/or `memory_mib`),
whole GPUs (`gpus` x 1000), or no GPU at all. The policies choose a (node, GPUs) among the
feasible ones; a whole GPU is only ever a GPU nobody holds a share of.

`fgd` is Weng et al., "Beware of Fragmentation" (USENIX ATC '23): a node's fragmentation
against the target workload M is F_n(M) = sum over task kinds m of p_m * F_n(m), where F_n(m)
is all the node's unallocated thousandths if m cannot run there (wrong type, too few GPUs or
CPUs, or m asks no GPU) and otherwise those on GPUs with less left than m asks per GPU; each
task goes where F's increase is least. `best-fit`, `gpu-packing` and `random` are the
baselines of the paper's simulator (hkust-adsl/kubernetes-scheduler-simulator), and
`toposched` is FGD's measure with interference among the jobs on one GPU and one node
breaking its ties (docs/placement.md says why).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

MILLI = 1000  # a whole GPU, in thousandths
MAX_SPEC_CPU = 128_000  # best-fit's normalisers, as the paper's simulator has them
MAX_SPEC_GPU = 8_000
MAX_POINTS = 100  # a node's best score in the paper's simulator (kube-scheduler's)
POPULAR = 0.95  # the share of tasks the typical kinds cover (the paper's simulator: 95%)


@dataclass(frozen=True)
class Task:
    """A kind of task of the target workload: `gpus` GPUs of `milli` thousandths each (0 GPUs:
    CPUs alone), `cpus` millicores, on one of `types` (GPU type keys; empty: any)."""

    gpus: int
    milli: int
    cpus: int = 0
    types: frozenset[str] = frozenset()

    def runs_on(self, gpu_type: str) -> bool:
        return not self.types or gpu_type in self.types


@dataclass(frozen=True)
class Workload:
    """Task kinds with their popularity (summing to 1): what the measure is taken against."""

    kinds: tuple[tuple[Task, float], ...]

    def __post_init__(self) -> None:
        if not self.kinds:
            raise ValueError("a workload needs at least one task kind")
        if any(p < 0 for _, p in self.kinds) or abs(sum(p for _, p in self.kinds) - 1) > 1e-6:
            raise ValueError("task kinds' popularities must be >= 0 and sum to 1")

    @classmethod
    def typical(cls, counts: Mapping[Task, int], cover: float = POPULAR) -> Workload:
        """The most common kinds of the tasks counted in `counts` that together make `cover`
        of them (the paper's simulator keeps those, popularity renormalised), most common
        first; equally common kinds in its order (pkg/type/resource.go, TargetPodList sorted
        in reverse: more CPUs, then more thousandths per GPU, more GPUs, the later types)."""
        counts = {task: n for task, n in counts.items() if n > 0}
        if not counts:
            raise ValueError("a workload needs at least one task")
        total = sum(counts.values())
        ranked = sorted(counts.items(), key=lambda kv: (kv[1], _rank_key(kv[0])), reverse=True)
        kept: list[tuple[Task, int]] = []
        covered = 0
        for task, n in ranked:
            if covered >= cover * total:
                break
            kept.append((task, n))
            covered += n
        return cls(tuple((task, n / covered) for task, n in kept))

    @property
    def cpu_steps(self) -> tuple[int, ...]:
        """The kinds' CPU asks, sorted: a node's free CPUs matter to the measure only through
        how many of these they cover."""
        return tuple(sorted({task.cpus for task, _ in self.kinds}))


def _rank_key(task: Task) -> tuple[int, int, int, str]:
    return (task.cpus, task.milli, task.gpus, "|".join(sorted(task.types)))


@dataclass(frozen=True)
class NodeRoom:
    """What a node has left for new work: per GPU, thousandths (0 for a GPU that cannot be
    given: failed, or held whole) and MiB of GPU memory; free millicores and bytes (None: not
    counted); the jobs sharing each GPU (for interference)."""

    index: int
    gpu_type: str  # type key
    left: tuple[int, ...]
    memory_left: tuple[int, ...]  # MiB per GPU; a GPU of unknown memory has 0
    cpus: int | None = None
    memory: int | None = None
    tenants: tuple[int, ...] = ()  # jobs sharing each GPU now (empty: none anywhere)

    def tenants_on(self, gpu: int) -> int:
        return self.tenants[gpu] if self.tenants else 0


@dataclass(frozen=True)
class Ask:
    """One worker: `gpus` whole GPUs, or part of one (`milli` < 1000 and/or `memory_mib`), or
    none; `cpus` millicores and `memory` bytes of the node."""

    gpus: int = 1
    milli: int = MILLI
    memory_mib: int = 0
    cpus: int = 0
    memory: int = 0

    @property
    def shared(self) -> bool:
        return self.gpus == 1 and (self.milli < MILLI or self.memory_mib > 0)

    @property
    def total_milli(self) -> int:
        return self.milli if self.shared else self.gpus * MILLI


def _fits_host(room: NodeRoom, ask: Ask) -> bool:
    if room.cpus is not None and ask.cpus > room.cpus:
        return False
    return not (room.memory is not None and ask.memory > room.memory)


def options(room: NodeRoom, ask: Ask) -> list[tuple[int, ...]]:
    """The GPUs `ask` could take on `room`: each GPU a share fits on; the first whole GPUs
    nobody shares (as the paper's simulator gives them); () for a task without GPUs."""
    if not _fits_host(room, ask):
        return []
    if ask.gpus == 0:
        return [()]
    if ask.shared:
        return [
            (g,)
            for g, left in enumerate(room.left)
            if left >= ask.milli and room.memory_left[g] >= ask.memory_mib
        ]
    whole = tuple(g for g, left in enumerate(room.left) if left == MILLI)
    return [whole[: ask.gpus]] if len(whole) >= ask.gpus else []


def after(room: NodeRoom, ask: Ask, gpus: tuple[int, ...]) -> NodeRoom:
    """`room` once `ask` holds `gpus` there."""
    left, memory_left, tenants = list(room.left), list(room.memory_left), list(room.tenants)
    for g in gpus:
        if ask.shared:
            left[g] -= ask.milli
            memory_left[g] -= ask.memory_mib
            if not tenants:
                tenants = [0] * len(left)
            tenants[g] += 1
        else:
            left[g] = 0
            memory_left[g] = 0
    return replace(
        room,
        left=tuple(left),
        memory_left=tuple(memory_left),
        cpus=None if room.cpus is None else room.cpus - ask.cpus,
        memory=None if room.memory is None else room.memory - ask.memory,
        tenants=tuple(tenants),
    )


def task_fragment(left: Sequence[int], cpus: int | None, gpu_type: str, task: Task) -> int:
    """F_n(m): the thousandths of a node (`left` per GPU) that task kind `task` cannot use."""
    total = sum(left)
    if task.gpus == 0 or not task.runs_on(gpu_type):
        return total
    if cpus is not None and task.cpus > cpus:
        return total
    if sum(1 for x in left if x >= task.milli) < task.gpus:
        return total
    return sum(x for x in left if x < task.milli)


@dataclass
class Measure:
    """F_n(M) for one workload, memoised: it depends on a node's GPU type, its thousandths
    left as a multiset, and which kinds' CPU asks its free CPUs cover."""

    workload: Workload
    _memo: dict[tuple[str, tuple[int, ...], int], float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._steps = self.workload.cpu_steps

    def of(self, room: NodeRoom) -> float:
        covered = (
            len(self._steps) if room.cpus is None else bisect.bisect_right(self._steps, room.cpus)
        )
        key = (room.gpu_type, tuple(sorted(room.left)), covered)
        value = self._memo.get(key)
        if value is None:
            # Any CPU count that covers the same kinds gives the same answer.
            cpus = None if covered == len(self._steps) else self._steps[covered] - 1
            value = sum(
                p * task_fragment(key[1], cpus, room.gpu_type, task)
                for task, p in self.workload.kinds
            )
            if len(self._memo) > 200_000:
                self._memo.clear()
            self._memo[key] = value
        return value

    def increase(self, room: NodeRoom, ask: Ask, gpus: tuple[int, ...]) -> float:
        return self.of(after(room, ask, gpus)) - self.of(room)


@dataclass(frozen=True)
class Choice:
    node: int
    gpus: tuple[int, ...]


# A policy's score of one option (lower is better); ties go to the lowest node, then GPUs.
Score = Callable[[NodeRoom, Ask, tuple[int, ...]], tuple[float, ...]]


def fgd_points(measure: Measure, room: NodeRoom, ask: Ask, gpus: tuple[int, ...]) -> int:
    """FGD's node score as its authors' simulator gives it (hkust-adsl/kubernetes-scheduler-
    simulator, pkg/simulator/plugin/fgd_score.go): the fall of the node's measure, in GPUs,
    through a sigmoid scaled to the scheduler's 0..100 and truncated to an integer. Options
    whose increases differ by less than about 0.04 GPU score alike, and its scheduler gives
    ties to the node of the smallest name (its fork's selectHost), so FGD packs onto the
    first nodes among near-equal ones; the exact measure with the same tie rule scattered
    work and left 152 GPUs of 2,107 unallocated where this leaves 100 (every third openb
    node, default list)."""
    fall = -measure.increase(room, ask, gpus) / MILLI
    return int(MAX_POINTS / (1.0 + math.exp(-fall)))


def fgd_score(measure: Measure) -> Score:
    """Most points first; within a node the first GPU of the most points (its GPU choice
    scores each GPU a share fits alike and keeps the first best)."""

    def score(room: NodeRoom, ask: Ask, gpus: tuple[int, ...]) -> tuple[float, ...]:
        return (-fgd_points(measure, room, ask, gpus),)

    return score


def toposched_score(measure: Measure) -> Score:
    """FGD's points first; among equal ones, a GPU already shared before a fresh one (a
    workload the measure knows only as small shares would otherwise be spread over whole
    GPUs that later work may need), then the GPU with fewer jobs on it already (they
    time-slice it). Not the node with fewer shared GPUs, as before: spreading shares over
    nodes took whole nodes from multi-GPU pods (77.8% of the GPUs allocated at 80% demand
    where FGD allocates 80.0%, default openb list) and left more GPUs unallocated than FGD."""

    def score(room: NodeRoom, ask: Ask, gpus: tuple[int, ...]) -> tuple[float, ...]:
        fresh = sum(1 for g in gpus if room.left[g] == MILLI)
        on_gpu = sum(room.tenants_on(g) for g in gpus)
        return (-fgd_points(measure, room, ask, gpus), fresh, on_gpu)

    return score


def best_fit_score(room: NodeRoom, ask: Ask, gpus: tuple[int, ...]) -> tuple[float, ...]:
    """The paper simulator's best fit (best_fit_score.go): the CPUs and GPU thousandths left
    after, over its normalisers, half each, as integer points of 100 (the most points, for
    the least left, first); within a node the GPU with the least left that the share fits
    (its 'best' GPU choice, the first of equals)."""
    cpus = 0.0 if room.cpus is None else (room.cpus - ask.cpus) / MAX_SPEC_CPU
    gpu = (sum(room.left) - ask.total_milli) / MAX_SPEC_GPU
    within = sum(room.left[g] for g in gpus)
    return (-int((1.0 - (0.5 * cpus + 0.5 * gpu)) * MAX_POINTS), within)


def gpu_packing_score(room: NodeRoom, ask: Ask, gpus: tuple[int, ...]) -> tuple[float, ...]:
    """The paper simulator's GPU packing (gpu_packing_score.go), its points of 100: a share
    onto GPUs already shared, 100 less a tenth of the percent they have left (at least 50);
    onto free GPUs of a node in use, 50 less how many (at least 33); onto an empty node, 33
    less its GPUs (at least as many as it has); a task without GPUs scores 0 everywhere.
    Within a node, the GPU with the least left that the share fits."""
    within = sum(room.left[g] for g in gpus)
    if ask.gpus == 0:
        return (0, within)
    size = len(room.left)
    free = sum(1 for x in room.left if x == MILLI)
    if free == size:
        return (-max(MAX_POINTS // 3 - free, free), within)
    fresh = sum(1 for g in gpus if room.left[g] == MILLI)
    if fresh:
        return (-max(MAX_POINTS // 2 - fresh, MAX_POINTS // 3), within)
    percent = sum(room.left[g] * 100 // MILLI for g in gpus)
    return (-max(MAX_POINTS - percent // 10, MAX_POINTS // 2), within)


@dataclass
class SharePolicy:
    """A named share policy: `place(rooms, ask)` -> Choice or None."""

    name: str
    measure: Measure | None = None
    rng: random.Random | None = None

    def __post_init__(self) -> None:
        # Each room's best option for an ask: a room changes only when work lands on it,
        # so one placement among many nodes asks the score again of one node alone.
        self._best: dict[tuple[NodeRoom, Ask], tuple[tuple[float, ...], tuple[int, ...]] | None]
        self._best = {}
        self._scorer: Score | None = None

    def best_on(self, room: NodeRoom, ask: Ask) -> tuple[tuple[float, ...], tuple[int, ...]] | None:
        """`ask`'s best option on `room` with its score (lower is better), or None."""
        if self._scorer is None:
            self._scorer = self._score()
        score = self._scorer
        scored = [(score(room, ask, gpus), gpus) for gpus in options(room, ask)]
        return min(scored) if scored else None

    def place(self, rooms: Sequence[NodeRoom], ask: Ask) -> Choice | None:
        if self.name == "random":
            return self._random(rooms, ask)
        memo = self._best
        if len(memo) > 1_000_000:
            memo.clear()
        best: tuple[tuple[float, ...], int, tuple[int, ...]] | None = None
        for room in rooms:
            key = (room, ask)
            if key in memo:
                mine = memo[key]
            else:
                mine = memo[key] = self.best_on(room, ask)
            if mine is not None and (best is None or (mine[0], room.index) < best[:2]):
                best = (mine[0], room.index, mine[1])
        return None if best is None else Choice(best[1], best[2])

    def _score(self) -> Score:
        if self.name == "best-fit":
            return best_fit_score
        if self.name == "gpu-packing":
            return gpu_packing_score
        assert self.measure is not None
        return fgd_score(self.measure) if self.name == "fgd" else toposched_score(self.measure)

    def _random(self, rooms: Sequence[NodeRoom], ask: Ask) -> Choice | None:
        """A feasible node drawn uniformly, then one of its feasible GPU choices."""
        assert self.rng is not None
        feasible = [(room, opts) for room in rooms if (opts := options(room, ask))]
        if not feasible:
            return None
        room, opts = feasible[self.rng.randrange(len(feasible))]
        return Choice(room.index, opts[self.rng.randrange(len(opts))])


# One node's entry in a view of a Board: its best option's score, the node, the GPUs.
_Entry = tuple[tuple[float, ...], int, tuple[int, ...]]


@dataclass
class _View:
    """What a Board knows of one (ask, nodes) pair: each node's best option, a heap of them
    (stale entries are dropped when they surface) and, for `random`, the feasible nodes in
    order; `seen` is how far into the Board's log of changed nodes it is up to date."""

    nodes: frozenset[int]
    seen: int
    best: dict[int, _Entry] = field(default_factory=dict)
    heap: list[_Entry] = field(default_factory=list)
    feasible: list[int] = field(default_factory=list)


class Board:
    """A cluster's rooms kept as work lands on them, placing asks one after another by a share
    policy with the same choices as `SharePolicy.place` over all the rooms: each (ask, nodes)
    pair keeps each node's best option, and after a placement only the node that changed is
    scored again (a node's best option depends on that node alone)."""

    def __init__(self, rooms: Sequence[NodeRoom], policy: SharePolicy) -> None:
        if [r.index for r in rooms] != list(range(len(rooms))):
            raise ValueError("a Board's rooms are indexed 0, 1, ... in order")
        self.rooms = list(rooms)
        self.policy = policy
        self._log: list[int] = []  # the nodes changed, in order
        self._views: dict[tuple[Ask, frozenset[int]], _View] = {}

    def choose(self, ask: Ask, nodes: Iterable[int]) -> Choice | None:
        """Where `ask` goes among `nodes` (indices), or None."""
        allowed = frozenset(nodes)
        view = self._views.get((ask, allowed))
        if view is None:
            view = self._views[(ask, allowed)] = _View(allowed, len(self._log))
            self._rescore(view, ask, sorted(allowed))
        elif view.seen < len(self._log):
            changed = {i for i in self._log[view.seen :] if i in allowed}
            view.seen = len(self._log)
            self._rescore(view, ask, sorted(changed))
        if self.policy.name == "random":
            return self._random(view, ask)
        heap = view.heap
        while heap and view.best.get(heap[0][1]) is not heap[0]:
            heapq.heappop(heap)
        return Choice(heap[0][1], heap[0][2]) if heap else None

    def land(self, node: int, ask: Ask, gpus: tuple[int, ...]) -> None:
        """`ask` now holds `gpus` on `node`."""
        self.rooms[node] = after(self.rooms[node], ask, gpus)
        self._log.append(node)

    def _rescore(self, view: _View, ask: Ask, nodes: Iterable[int]) -> None:
        randomly = self.policy.name == "random"
        for i in nodes:
            room = self.rooms[i]
            if randomly:
                k = bisect.bisect_left(view.feasible, i)
                present = k < len(view.feasible) and view.feasible[k] == i
                if options(room, ask) and not present:
                    view.feasible.insert(k, i)
                elif present and not options(room, ask):
                    del view.feasible[k]
                continue
            mine = self.policy.best_on(room, ask)
            if mine is None:
                view.best.pop(i, None)
                continue
            entry = (mine[0], i, mine[1])
            view.best[i] = entry
            heapq.heappush(view.heap, entry)

    def _random(self, view: _View, ask: Ask) -> Choice | None:
        """As SharePolicy._random: a feasible node drawn uniformly, then one of its options."""
        rng = self.policy.rng
        assert rng is not None
        if not view.feasible:
            return None
        i = view.feasible[rng.randrange(len(view.feasible))]
        opts = options(self.rooms[i], ask)
        return Choice(i, opts[rng.randrange(len(opts))])


SHARE_POLICIES = ("toposched", "fgd", "best-fit", "gpu-packing", "random")
NEEDS_WORKLOAD = ("toposched", "fgd")


def share_policy(
    name: str, workload: Workload | None = None, rng: random.Random | None = None
) -> SharePolicy:
    """The share policy `name`; FGD's measure (`fgd`, `toposched`) needs the target
    `workload`, `random` a seeded `rng`."""
    if name not in SHARE_POLICIES:
        raise ValueError(f"unknown share policy {name!r}; known: {', '.join(SHARE_POLICIES)}")
    if name in NEEDS_WORKLOAD:
        if workload is None:
            raise ValueError(f"share policy {name!r} needs the target workload")
        return SharePolicy(name, measure=Measure(workload))
    if name == "random":
        if rng is None:
            raise ValueError("share policy 'random' needs a seeded random.Random")
        return SharePolicy(name, rng=rng)
    return SharePolicy(name)
