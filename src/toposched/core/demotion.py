"""Least attained service: which running jobs have had enough service to be demoted, and when
they may be stopped for it (not while a stop rule protects them: core/stoprule.py)."""

from __future__ import annotations

import heapq
import math

from toposched.core.records import JobRecord
from toposched.core.stoprule import StopRule


class Demotions:
    """Running checkpointable jobs (not being stopped) by when they reach the threshold.

    A job's demotion time is fixed while it runs on one placement (its GPUs times the time it
    runs), so it is computed when it starts; so is the end of its protection after stops
    (`StopRule.protected_until`). It becomes a victim at the later of the two, kept in a heap;
    `due(now)` moves the jobs whose time has come into `demoted`, where reclaim looks for
    victims without walking every job. A job protected for good is timed for demotion (its
    rank when it waits again) but never becomes a victim.
    """

    def __init__(
        self,
        threshold_gpu_s: float | None,
        job_nodes: dict[str, dict[int, int]],
        rule: StopRule | None = None,
    ) -> None:
        """`job_nodes`: the scheduler's GPUs of each job by node (read, never changed);
        `rule`: what protects a job that was stopped before (None: nothing)."""
        self.threshold = threshold_gpu_s
        self.job_nodes = job_nodes
        self.rule = rule
        self.demoted: dict[str, JobRecord] = {}
        # The demoted jobs by node, with their GPUs there and their costs (reclaim's
        # VictimsByNode), kept as jobs are demoted and stop rather than gathered at every search.
        self.on_node: dict[int, dict[str, tuple[int, tuple[int, int, int]]]] = {}
        # Each demoted job's cost as a victim (core/reclaim.py): it can checkpoint (0), its
        # priority, its GPUs; fixed while it runs on one placement.
        self._costs: dict[str, tuple[int, int, int]] = {}
        self._nodes: dict[str, tuple[int, ...]] = {}  # each demoted job's nodes
        self._at: dict[str, float] = {}  # when each tracked job becomes a victim
        self._demote_at: dict[str, float] = {}  # when each tracked job is demoted
        self._heap: list[tuple[float, int, str]] = []
        self._jobs: dict[str, JobRecord] = {}

    def started(self, rec: JobRecord, now: float) -> None:
        """`rec` runs on a new placement from `now`."""
        self.stopped(rec)
        if self.threshold is None or rec.placement is None or not rec.spec.checkpointable:
            return
        if not rec.placement.gpus or rec.spec.part_of_gpu:
            # A job without GPUs has no GPU service, and a share or a MIG instance is never
            # preempted (it frees no whole GPU): none is demoted.
            return
        left = self.threshold - (rec.service(now) - rec.forgiven)
        demote_at = now + max(0.0, left) / rec.placement.gpus
        self._demote_at[rec.name] = demote_at
        self._jobs[rec.name] = rec
        at = demote_at
        if self.rule is not None:
            at = max(at, self.rule.protected_until(rec, now))
        if math.isinf(at):
            return
        self._at[rec.name] = at
        heapq.heappush(self._heap, (at, rec.seq, rec.name))

    def stopped(self, rec: JobRecord) -> None:
        """`rec` is being stopped, or holds no GPUs any more (entries left in the heap are
        skipped as stale)."""
        self._at.pop(rec.name, None)
        self._demote_at.pop(rec.name, None)
        self._jobs.pop(rec.name, None)
        if self.demoted.pop(rec.name, None) is not None:
            for i in self._nodes.pop(rec.name):
                jobs = self.on_node[i]
                del jobs[rec.name]
                if not jobs:
                    del self.on_node[i]
        self._costs.pop(rec.name, None)

    def due(self, now: float) -> dict[str, JobRecord]:
        """The running jobs demoted by `now`."""
        heap = self._heap
        while heap and heap[0][0] <= now:
            at, _, name = heapq.heappop(heap)
            if self._at.get(name) == at:
                del self._at[name]
                rec = self.demoted[name] = self._jobs.pop(name)
                assert rec.placement is not None
                cost = (0, rec.spec.priority, rec.placement.gpus)
                nodes = self.job_nodes[name]
                self._costs[name] = cost
                self._nodes[name] = tuple(nodes)
                for i, mask in nodes.items():
                    self.on_node.setdefault(i, {})[name] = (mask, cost)
        return self.demoted

    def victims(self, now: float) -> dict[str, tuple[int, int, int]]:
        """The running jobs demoted by `now`, with their costs as victims (not to be changed)."""
        self.due(now)
        return self._costs

    def next_at(self) -> float:
        """When the next running job is demoted (inf: none will be)."""
        heap = self._heap
        while heap and self._at.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else math.inf

    def tracked(self) -> dict[str, JobRecord]:
        """Every job tracked, demoted or not (validate mode checks them)."""
        return {**self._jobs, **self.demoted}

    def is_demoted(self, name: str, now: float) -> bool | None:
        """Whether a tracked running job is demoted by `now`; None if it is not tracked."""
        if name in self.demoted:
            return True
        at = self._demote_at.get(name)
        return None if at is None else at <= now
