"""The binder: every write to the API server made on the core's behalf.

A gang is bound whole: its plan goes on its PodGroup first (annotation `toposched.io/placement`),
then each pod is bound, several at once on the binder's connections. Writes go out only while
this replica holds the lease (`fence`), and are tried again after answers that say nothing
about the object. The binder also evicts the pods of stopping gangs, sets the phase and the
conditions of PodGroups, and writes why pods wait (pod conditions and Warning Events).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from toposched.common.retry import Retry
from toposched.core import Event, Placement, WorkerFailed, WorkerSlot
from toposched.kube.annotations import GPUS, decode_gpus, encode_gpus
from toposched.kube.api import ApiError, KubeApi
from toposched.kube.cache import ClusterCache
from toposched.kube.claims import allocation, requested, status_path
from toposched.kube.gangs import Gang, Key, kind_of, name_of
from toposched.kube.gangspec import gang_selector
from toposched.kube.nodes import CoreNodes
from toposched.kube.objects import IDLE, UPSTREAM, GangKind, Obj, ObjectError, Pod, key_of
from toposched.topology.cluster import EVERY_NODE, Eligibility

_T = TypeVar("_T")
_R = TypeVar("_R")

log = logging.getLogger("toposched.kube")

PLAN = "toposched.io/placement"  # on a PodGroup: {"job": ..., "pods": {pod: [node, [gpus]]}}
BIND_CONNECTIONS = 8  # binds sent at once
# Answers to a write that say nothing about the object (throttled by API Priority and
# Fairness, a server or load balancer error, no answer at all): the write is tried again.
RETRIED = frozenset({0, 429, 500, 502, 503, 504})
# Six tries, 0.25 to 4 s apart unless the server asks for longer (at most 10 s): a bind held
# up past that is failed, so that the core may place the gang again.
WRITE_RETRY = Retry(tries=6, first_s=0.25, max_s=10.0)
Bind = tuple[str, tuple[str, str], str, dict[str, str]]  # (what, pod, node, annotations)


class LeaseLost(RuntimeError):
    """This replica no longer holds the lease: it must not write anything more."""


class Warnings:
    """Warning Events on objects, each posted once per distinct message."""

    def __init__(self, api: KubeApi, clock: Callable[[], float]) -> None:
        self.api = api
        self.clock = clock
        self.warned: dict[tuple[str, str, str], str] = {}  # the last warning per object

    def warn(self, obj: Obj, reason: str, message: str) -> None:
        """A Warning Event on `obj`, once per distinct message."""
        ns, name = key_of(obj)
        # apiVersion too: PodGroups of two kinds may share a name.
        key = (f"{obj.get('apiVersion', 'v1')}/{obj.get('kind', 'Pod')}", ns, name)
        if self.warned.get(key) == message:
            return
        self.warned[key] = message
        log.info("%s %s/%s: %s", reason, *key_of(obj), message)
        try:
            self.api.event(obj, reason, message, "Warning", _stamp(self.clock()))
        except ApiError as err:
            log.info("could not post an Event: %s", err)


class Binder:
    """Carries the core's decisions out on the API server: binds, evictions, conditions."""

    def __init__(
        self,
        api: KubeApi,
        cache: ClusterCache,
        nodes: CoreNodes,
        warnings: Warnings,
        *,
        clock: Callable[[], float],
        post: Callable[[Event], None],
    ) -> None:
        self.api = api
        self.cache = cache
        self.nodes = nodes
        self.warn = warnings.warn
        self.clock = clock
        self.post = post  # an event for the core that carrying out produced (a failed bind)
        # Whether writes may go out now (a leader checks that its lease still holds).
        self.fence: Callable[[], bool] = lambda: True
        self.retry = WRITE_RETRY
        self.sleep: Callable[[float], None] = time.sleep
        self.evicting: dict[str, set[Key]] = {}  # pods still to evict, per stopping job
        self._told: dict[Key, str] = {}  # the last reason on each Kubernetes PodGroup
        self._binds: list[tuple[Gang, list[Bind], float]] = []
        self._pool = ThreadPoolExecutor(BIND_CONNECTIONS, thread_name_prefix="bind")

    # ------------------------------------------------------------------ binding

    def misfit(self, gang: Gang, placement: Placement) -> tuple[str, str] | None:
        """(node, why) where the gang's pods, with what is on that node already, would ask
        more of a resource than it has allocatable, as kube-scheduler's NodeResourcesFit
        checks; None if they fit. GPUs are the core's, and CPUs or memory are not checked on a
        node that lists none allocatable."""
        asks: dict[str, dict[str, int]] = {}
        pairs = [*zip(gang.workers, placement.workers, strict=True)]
        pairs += [(key, placement.workers[0]) for key in gang.extra]
        for key, slot in pairs:
            found = self.cache.pods.get(key)
            for resource, amount in (found[1].requests if found else {}).items():
                into = asks.setdefault(slot.node, {})
                into[resource] = into.get(resource, 0) + amount
        for node, wanted in sorted(asks.items()):
            why = self.nodes.short(node, wanted)
            if why:
                return node, why
        return None

    def bind(self, gang: Gang, placement: Placement, now: float) -> None:
        """Bind the whole gang where the core put it: book its pods there, write its plan on
        the PodGroup first, then queue each pod's bind (`flush` sends them)."""
        self.cache.book(gang, placement.workers)
        plan = {
            key[1]: [slot.node, list(slot.gpus)]
            for key, slot in zip(gang.workers, placement.workers, strict=True)
        }
        kind = kind_of(gang.key)
        if gang.group and kind is not None:
            body = {
                "metadata": {"annotations": {PLAN: json.dumps({"job": gang.job, "pods": plan})}}
            }
            path = _group_path(kind, gang.key)
            try:
                self._write(
                    lambda: self.api.request(
                        "PATCH", path, body=body, content_type="application/merge-patch+json"
                    )
                )
            except ApiError as err:
                self.post(WorkerFailed(now, gang.job, 0, f"could not record its plan: {err}"))
                return
        self.queue(gang, placement.workers, now)

    def queue(self, gang: Gang, slots: Iterable[WorkerSlot], now: float) -> None:
        """Queue the binds of a gang's pods not bound yet; `flush` sends them."""
        slots = list(slots)
        binds: list[Bind] = []
        for i, (key, slot) in enumerate(zip(gang.workers, slots, strict=True)):
            found = self.cache.pods.get(key)
            if found is not None and found[1].node is not None:
                gang.bound.add(key)
                continue  # bound before a restart, by the plan
            annotations = {GPUS: encode_gpus(slot.gpus)}
            if gang.idle:
                annotations[IDLE] = gang.idle  # for the node agent, which watches its GPUs
            binds.append((f"pod {key[1]} (worker {i})", key, slot.node, annotations))
        binds.extend((f"pod {key[1]}", key, slots[0].node, {}) for key in gang.extra)
        self._binds.append((gang, binds, now))

    def flush(self) -> None:
        """Send every queued bind at once, on several connections (each costs a round trip to
        the API server), then stop whole any gang one of whose binds failed: pods cannot be
        unbound, so its bound pods are evicted and the pods its operator makes again wait as a
        new gang."""
        queued, self._binds = self._binds, []
        calls = [(gang, bind) for gang, binds, _ in queued for bind in binds]
        if not calls:
            return
        answers = self._on_connections(lambda c: self._bind_one(c[0], *c[1][1:]), calls)
        failed: dict[str, list[str]] = {}
        for (gang, (what, *_)), why in zip(calls, answers, strict=True):
            if why:
                failed.setdefault(gang.job, []).append(f"{what}: {why}")
        for gang, _, now in queued:
            if gang.job in failed:
                why = "bind failed: " + "; ".join(failed[gang.job])
                self.post(WorkerFailed(now, gang.job, 0, why))
            elif gang.group and kind_of(gang.key) is UPSTREAM and not gang.scheduled:
                gang.scheduled = True
                try:
                    self._group_condition(gang.key, True, "Scheduled", "", _stamp(now))
                except ApiError as err:
                    log.info("%s/%s: could not say it is bound: %s", *gang.key, err)

    def _bind_one(self, gang: Gang, key: Key, node: str, annotations: dict[str, str]) -> str:
        """Bind one pod of `gang` (`_write`: tried again where that helps); returns why it
        failed, or "" once it is bound as asked. A 409 may be our own bind, carried out though
        its answer was lost (or sent by a predecessor that died with it in flight): the pod is
        read back, and counts as bound if it is where the plan put it."""
        uid = gang.uids.get(key, "")
        found = self.cache.pods.get(key)
        if found is not None and found[1].claims and GPUS in annotations:
            refused = self._allocate_claims(found[1], node, decode_gpus(annotations[GPUS]))
            if refused:
                return refused
        try:
            self._write(lambda: self.api.bind(key[0], key[1], node, annotations, uid=uid))
        except ApiError as err:
            if err.status == 409 and self._bound_as(key, node, annotations):
                gang.bound.add(key)
                return ""
            if err.status == 0:  # no answer: the bind may yet land, so it counts as bound
                gang.bound.add(key)
            return str(err)
        gang.bound.add(key)
        return ""

    def _allocate_claims(self, pod: Pod, node: str, gpus: tuple[int, ...]) -> str:
        """Write each of the pod's ResourceClaims its share of `gpus` (its requests in order)
        and reserve it for the pod, before the pod is bound (the kubelet admits a pod only
        with its claims allocated and reserved for it); returns why one failed, or ""."""
        left = list(gpus)
        for name in pod.claims:
            claim = self.cache.claims.get((pod.namespace, name))
            if claim is None:
                return f"ResourceClaim {pod.namespace}/{name} is gone"
            count = sum(n for _, n in requested(claim))
            status = {
                "allocation": allocation(claim, node, left[:count]),
                "reservedFor": [{"resource": "pods", "name": pod.name, "uid": pod.uid}],
            }
            left = left[count:]
            try:
                self._write(partial(self._patch_status, status_path(pod.namespace, name), status))
            except ApiError as err:
                return f"allocating ResourceClaim {pod.namespace}/{name}: {err}"
        return ""

    def _patch_status(self, path: str, status: Mapping[str, object]) -> None:
        body = {"status": status}
        self.api.request("PATCH", path, body=body, content_type="application/merge-patch+json")

    def _bound_as(self, key: Key, node: str, annotations: dict[str, str]) -> bool:
        try:
            obj = self.api.request("GET", f"/api/v1/namespaces/{key[0]}/pods/{key[1]}")
        except ApiError:
            return False
        have = (obj.get("metadata") or {}).get("annotations") or {}
        return bool((obj.get("spec") or {}).get("nodeName") == node) and all(
            have.get(k) == v for k, v in annotations.items()
        )

    def bind_without_gpus(self, pods: list[Pod]) -> None:
        """A pod without GPUs, alone: of the nodes that take new work and that it accepts, the
        one with the fewest of our pods."""
        load: dict[str, int] = {n: 0 for n in self.nodes.known if n not in self.nodes.cordoned}
        for _, p in self.cache.pods.values():
            if p.node in load and not p.done:
                load[p.node] += 1
        if not load:
            self.warn_pods(pods, "NoNodes", "no node is ready for toposched")
            return
        for pod in pods:
            try:
                selector = gang_selector(f"pod {pod.namespace}/{pod.name}", [pod], EVERY_NODE)
            except ObjectError as err:
                self.warn_pods([pod], "InvalidPod", str(err))
                continue
            where = Eligibility(selector, tolerations=pod.tolerations)
            fits = [n for n in load if self.nodes.accepts(pod, where, n)]
            if not fits:
                why = "no node that takes new work has room for it, its labels and tolerations"
                self.warn_pods([pod], "FailedScheduling", why)
                continue
            node = min(fits, key=lambda n: (load[n], n))
            try:  # fenced and tried again as every bind is
                self._write(partial(self.api.bind, pod.namespace, pod.name, node, {}))
                load[node] += 1
                self.cache.placed[pod.key] = node  # until it is seen bound: others may not fit now
                self.cache.account(pod.key)
            except ApiError as err:
                log.info("binding %s/%s: %s", pod.namespace, pod.name, err)

    # ------------------------------------------------------------------ writing safely

    def _on_connections(self, call: Callable[[_T], _R], items: list[_T]) -> list[_R]:
        """`call` on each item, at most BIND_CONNECTIONS at once on the pool's threads; the
        answers in order. As the pool's map, but one task per thread rather than one per item:
        each task takes the next item until none is left, so that a burst of thousands of binds
        costs a handful of futures, not one each (and as many wake-ups of this thread). If a
        call raises, no new one starts, and the first item's error in order is raised once the
        calls under way have ended."""
        answers: list[Any] = [None] * len(items)
        errors: dict[int, BaseException] = {}
        lock = threading.Lock()
        following = iter(range(len(items)))

        def work() -> None:
            while True:
                with lock:
                    i = None if errors else next(following, None)
                if i is None:
                    return
                try:
                    answers[i] = call(items[i])
                except BaseException as err:  # raised in the caller's thread, below
                    with lock:
                        errors[i] = err
                    return

        tasks = [self._pool.submit(work) for _ in range(min(BIND_CONNECTIONS, len(items)))]
        for task in tasks:
            task.result()
        if errors:
            raise errors[min(errors)]
        return answers

    def _write(self, call: Callable[[], object]) -> None:
        """Make a write (`call`) while the lease holds, tried again after an answer that says
        nothing about the object (RETRIED: 429 from API Priority and Fairness, a 5xx, no
        answer at all), as `retry` says. The last ApiError is raised."""
        attempt = 0
        while True:
            attempt += 1
            self._fenced()
            try:
                call()
                return
            except ApiError as err:
                if err.status not in RETRIED or not self.retry.more(attempt):
                    raise
                wait = self.retry.wait(attempt, err.retry_after)
                log.info("%s; again in %.1f s", err, wait)
                self.sleep(wait)

    def _fenced(self) -> None:
        """Writes go out only while this replica may make them (it holds the lease)."""
        if not self.fence():
            raise LeaseLost("the lease ran out: another replica may be scheduling")

    # ------------------------------------------------------------------ evicting

    def stop(self, gang: Gang) -> None:
        """Evict every pod of `gang`, whose job is stopping: those that cannot be evicted now
        are tried again at each `evict`."""
        self.evicting[gang.job] = set(gang.workers) | set(gang.extra)
        self.evict(gang)

    def evict(self, gang: Gang) -> None:
        """Evict the gang's bound pods left to evict (those this scheduler bound, or seen
        bound)."""
        left = self.evicting.get(gang.job)
        if not left:
            return
        for key in sorted(left):
            found = self.cache.mine(gang, key)
            bound = key in gang.bound or (found is not None and found[1].node is not None)
            if found is None or found[1].done or not bound:
                left.discard(key)
                continue
            self._fenced()
            try:
                self.api.evict(key[0], key[1])
                left.discard(key)
            except ApiError as err:
                if err.status == 404:
                    left.discard(key)
                elif err.status == 429:
                    self.warn(found[0], "EvictionBlocked", f"a PodDisruptionBudget: {err.message}")
                else:
                    log.warning("evicting %s/%s: %s", *key, err)

    def try_evict(self, pod: Pod) -> None:
        try:
            self.api.evict(pod.namespace, pod.name)
        except ApiError as err:
            log.warning("evicting %s/%s: %s", pod.namespace, pod.name, err)

    # ------------------------------------------------------------------ telling

    def queue_groups(self) -> None:
        """Set the queued phase on new PodGroups whose job operator waits for it before it
        makes the pods (Volcano's Inqueue, which its own scheduler would set). Nothing is held
        for them: their gangs are placed once their pods exist, as any other."""
        unqueued, self.cache.unqueued = self.cache.unqueued, set()
        for key in sorted(unqueued):
            group, kind = self.cache.groups.get(key), kind_of(key)
            if group is None or kind is None:
                continue  # deleted meanwhile
            self._fenced()
            path = _group_path(kind, key)
            if self.cache.status_paths.get(kind, False):
                path += "/status"
            try:
                self.api.request(
                    "PATCH",
                    path,
                    body={"status": {"phase": kind.queued_phase}},
                    content_type="application/merge-patch+json",
                )
            except ApiError as err:  # tried again when the PodGroup changes
                why = f"could not set status.phase {kind.queued_phase}: {err}"
                self.warn(group, "PodGroupNotQueued", why)

    def say_why(self, waiting: list[tuple[Gang, str]], now: float) -> None:
        """The pods of each of these waiting gangs say its new reason: a PodScheduled=False
        condition and an Event (and a Kubernetes PodGroup its condition, once per reason)."""
        writes: list[tuple[Key, Obj | None, str]] = []
        for gang, reason in waiting:
            if gang.group and kind_of(gang.key) is UPSTREAM and self._told.get(gang.key) != reason:
                self._told[gang.key] = reason
                writes.append((gang.key, None, reason))  # its PodGroup's condition
            for key in gang.workers:
                found = self.cache.pods.get(key)
                if found is not None:
                    writes.append((key, found[0], reason))
        if not writes:
            return
        stamp = _stamp(now)

        def say(write: tuple[Key, Obj | None, str]) -> None:
            key, obj, reason = write
            try:
                if obj is None:
                    self._group_condition(key, False, "Unschedulable", reason, stamp)
                    return
                self.api.set_scheduled_condition(key[0], key[1], "Unschedulable", reason, stamp)
                self.api.event(obj, "FailedScheduling", reason, "Warning", stamp)
            except ApiError as err:
                log.info("%s/%s: could not say why it waits: %s", *key, err)

        # On the binds' connections, several at once: on a burst, thousands of pods wait, and
        # two round trips each, one after the other, held up the loop for seconds.
        self._on_connections(say, writes)

    def tell_group(self, key: Key, reason: str) -> None:
        """A Kubernetes PodGroup's condition says why its gang cannot be placed (once per
        reason)."""
        if self._told.get(key) == reason:
            return
        self._told[key] = reason
        try:
            self._group_condition(key, False, "Unschedulable", reason, _stamp(self.clock()))
        except ApiError as err:
            log.info("%s/%s: could not say why it waits: %s", *key, err)

    def _group_condition(
        self, key: Key, scheduled: bool, reason: str, message: str, stamp: str
    ) -> None:
        """A Kubernetes PodGroup's PodGroupInitiallyScheduled condition, as kube-scheduler
        writes it: True once its gang is bound, False (Unschedulable) with why it waits."""
        kind = kind_of(key)
        assert kind is not None
        condition = {
            "type": "PodGroupInitiallyScheduled",
            "status": "True" if scheduled else "False",
            "reason": reason,
            "message": message[:32768],
            "lastTransitionTime": stamp,
        }
        self._fenced()
        self.api.request(
            "PATCH",
            f"{_group_path(kind, key)}/status",
            body={"status": {"conditions": [condition]}},
            content_type="application/strategic-merge-patch+json",
        )

    def warn_pods(self, pods: list[Pod], reason: str, message: str) -> None:
        for pod in pods:
            found = self.cache.pods.get(pod.key)
            if found is not None:
                self.warn(found[0], reason, message)


def _group_path(kind: GangKind, key: Key) -> str:
    """The path of the PodGroup of `kind` that gang `key` stands for."""
    return f"{kind.prefix}/namespaces/{key[0]}/podgroups/{name_of(key)}"


def _stamp(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
