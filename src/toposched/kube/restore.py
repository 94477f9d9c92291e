"""Restore after a restart: the gangs that hold GPUs given back to a new core before any bind.

A gang's bound pods say where they run (their GPU annotation). A gang whose scheduler died
halfway through binding it has its whole plan on its PodGroup: it is restored from the plan and
the rest of its pods are bound, so that no GPU is booked twice and no gang is left half bound.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Callable
from typing import Protocol

from toposched.core import (
    JobSpec,
    Placement,
    SchedulingError,
    StopKind,
    WorkerSlot,
)
from toposched.kube.binder import PLAN, Binder
from toposched.kube.cache import ClusterCache
from toposched.kube.gangs import Gang, Key
from toposched.kube.gangspec import gang_spec, min_member
from toposched.kube.nodes import CoreNodes
from toposched.kube.objects import Obj, ObjectError, Pod
from toposched.topology.cluster import tier_of

log = logging.getLogger("toposched.kube")


class Restoring(Protocol):
    """What restoring needs of the driver: its gang records, job names and the core."""

    gangs: dict[str, Gang]
    by_key: dict[Key, str]
    clock: Callable[[], float]

    def new_job(self, key: Key) -> str: ...

    def restore(  # Driver.restore: a gang's job given back to the core
        self,
        now: float,
        spec: JobSpec,
        submitted: float,
        placement: Placement,
        restarts: int,
        stopping: StopKind | None,
    ) -> None: ...


class Restorer:
    """Gives a new core back every gang that holds GPUs, from the cache's pods and PodGroups."""

    def __init__(
        self, driver: Restoring, cache: ClusterCache, nodes: CoreNodes, binder: Binder
    ) -> None:
        self.driver = driver
        self.cache = cache
        self.nodes = nodes
        self.binder = binder

    def restore_bound(self) -> None:
        """Give the core back every gang that holds GPUs: bound pods (their annotation), and the
        rest of a gang whose plan was written before its scheduler died."""
        now = self.driver.clock()
        bound: dict[Key, list[Pod]] = {}
        for _, found in self.cache.pods.values():
            if found.node is not None and found.bound_gpus is not None and not found.done:
                key, pod = self.cache.gang_of(found)
                bound.setdefault(key, []).append(pod)
        for key, pods in sorted(bound.items()):
            self._restore_gang(key, pods, now)
        # Workers taken as the core's to count (sync) whose gang was not given back.
        kept = {k for gang in self.driver.gangs.values() if gang.placed for k in gang.workers}
        for key in self.cache.held - kept:
            self.cache.held.discard(key)
            self.cache.account(key)

    def _restore_gang(self, key: Key, pods: list[Pod], now: float) -> None:
        """One gang: from its plan (binding the rest), else from its bound pods. A gang with
        fewer live pods than its PodGroup asks is given back as stopping, and its pods are
        evicted: a smaller gang is never kept running."""
        planned = self._plan_of(key, pods)
        workers = planned if planned is not None else sorted(pods, key=lambda p: p.name)
        group = self.cache.groups.get(key)
        need = len(workers)
        if planned is None and group is not None:
            with contextlib.suppress(ObjectError):  # a bad minMember: its own Event says so
                need = min_member(group)
        broken = len(workers) < need
        job = self.driver.new_job(key)
        try:
            slots = [
                WorkerSlot(p.node, p.bound_gpus or ())
                if p.node
                else WorkerSlot(*self._planned_slot(key, p.name))
                for p in workers
            ]
            nodes = (self.nodes.node(s.node) for s in slots)
            placement = Placement(tuple(slots), None, tier_of(nodes))
            counted = self._give_back(key, job, workers, group, placement, broken, now)
        except (ObjectError, SchedulingError, KeyError, ValueError, TypeError) as err:
            log.warning("gang %s/%s cannot be restored (%s): its pods are evicted", *key, err)
            for p in pods:
                self.binder.try_evict(p)
            return
        gang = Gang(job, key, [p.key for p in workers], group=group is not None)
        gang.bound = {p.key for p in workers if p.node is not None}
        gang.uids = {p.key: p.uid for p in workers}
        self.driver.gangs[job], self.driver.by_key[key] = gang, job
        self.cache.book(gang, slots, counted)
        if broken:
            self.binder.evicting[job] = set(gang.bound)
        elif planned is not None:
            self.binder.queue(gang, slots, now)

    def _give_back(
        self,
        key: Key,
        job: str,
        workers: list[Pod],
        group: Obj | None,
        placement: Placement,
        broken: bool,
        now: float,
    ) -> bool:
        """Restore one gang's job in the core; whether the core counts its CPUs and memory.
        Kubernetes ignores what a running pod asks of its node (IgnoredDuringExecution): a gang
        its nodes no longer suit (a new taint or label, less room) is given back as it runs,
        asking nothing of them, and its pods' requests are then taken off its nodes instead."""
        kind = StopKind.FAILURE if broken else None
        spec = gang_spec(job, workers, len(workers), group)
        try:
            self.driver.restore(now, spec, now, placement, 0, kind)
        except SchedulingError as err:
            log.info("gang %s/%s given back asking nothing of its nodes: %s", *key, err)
            spec = gang_spec(job, workers, len(workers), group, filters=False)
            self.driver.restore(now, spec, now, placement, 0, kind)
            return False
        return True

    def _plan_of(self, key: Key, bound: list[Pod]) -> list[Pod] | None:
        """The workers of the plan on the gang's PodGroup, if it names these bound pods."""
        group = self.cache.groups.get(key)
        text = ((group or {}).get("metadata") or {}).get("annotations", {}).get(PLAN)
        if not text:
            return None
        try:
            names = list(json.loads(text)["pods"])
        except (ValueError, KeyError, TypeError):
            return None
        pods = [self.cache.pods.get((key[0], n)) for n in names]
        if any(p is None or p[1].done for p in pods) or not {b.name for b in bound} <= set(names):
            return None
        return [p[1] for p in pods if p is not None]

    def _planned_slot(self, key: Key, pod: str) -> tuple[str, tuple[int, ...]]:
        group = self.cache.groups[key]
        node, gpus = json.loads(group["metadata"]["annotations"][PLAN])["pods"][pod]
        return str(node), tuple(int(g) for g in gpus)
