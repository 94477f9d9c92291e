"""Running the Kubernetes scheduler: watches in threads, one loop that steps the driver, leader
election on a Lease, and the health and metrics endpoints."""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toposched.common.retry import Retry
from toposched.kube.api import ApiError, Gone, KubeApi
from toposched.kube.driver import OTHERS_PATH, QUEUES_SELECTOR, KubeScheduler, LeaseLost
from toposched.kube.objects import GANG_KINDS

log = logging.getLogger("toposched.kube")

Seen = tuple[str, str, Any]  # (kind, event type or RELIST, object or list)
# The label of the pod of the replica that leads: the scheduler's Service selects it, so that
# every read (and scrape) through the Service reaches the one replica that keeps the state.
ROLE = "toposched.io/role"
LEADER = "leader"
ANNOUNCE_EVERY_S = 2.0  # how often a leader whose pod could not be labelled tries again
# A watch or list that failed is opened again until the scheduler stops, 0.5 s to 10 s later.
WATCH_RETRY = Retry(tries=None, first_s=0.5, max_s=10.0)


class Watcher(threading.Thread):
    """List once, then watch from the list's resourceVersion for ever: a stream the server
    closes is opened again from the last version seen (bookmarks keep it fresh); a 410 Gone
    lists again and hands over the whole list."""

    def __init__(
        self,
        api: KubeApi,
        kind: str,
        path: str,
        version: str,
        out: queue.Queue[Seen],
        stop: threading.Event,
        timeout_s: int = 60,
        **query: str,
    ) -> None:
        super().__init__(name=f"watch-{kind}", daemon=True)
        self.api, self.kind, self.path, self.version = api, kind, path, version
        self.out, self.stop, self.timeout_s, self.query = out, stop, timeout_s, query
        self.relists = 0

    def run(self) -> None:
        failures = 0  # in a row: a watch that delivered starts the waits over
        while not self.stop.is_set():
            try:
                for event in self.api.watch(self.path, self.version, self.timeout_s, **self.query):
                    obj = event.get("object") or {}
                    self.version = (obj.get("metadata") or {}).get(
                        "resourceVersion"
                    ) or self.version
                    if event.get("type") != "BOOKMARK":
                        self.out.put((self.kind, str(event.get("type")), obj))
                    if self.stop.is_set():
                        return
                failures = 0
            except Gone:
                if self._relist():
                    failures = 0
                    continue
                failures += 1
                self.stop.wait(WATCH_RETRY.wait(failures))
            except Exception as err:  # the connection: try again, slower each time
                if self.stop.is_set():
                    return
                failures += 1
                wait = WATCH_RETRY.wait(failures)
                log.warning("watch %s: %s; again in %.1f s", self.kind, err, wait)
                self.stop.wait(wait)

    def _relist(self) -> bool:
        """List again and hand the whole list over; False (and logged) if the list failed."""
        try:
            items, self.version = self.api.list(self.path, **self.query)
        except Exception as err:  # the API or the connection: list again after a pause
            log.warning("relist %s: %s", self.kind, err)
            return False
        self.relists += 1
        self.out.put((self.kind, "RELIST", items))
        return True


@dataclass
class Lease:
    """Leader election on a `coordination.k8s.io/v1` Lease: whoever holds an unexpired lease
    leads; the holder renews it, others take it over once it has expired. As client-go does,
    another holder's lease is timed from when this replica saw its record change, on its own
    monotonic clock, so that clocks that disagree between hosts cannot make two leaders."""

    api: KubeApi
    namespace: str
    identity: str
    name: str = "toposched-scheduler"
    duration_s: int = 15
    clock: Callable[[], float] = time.time
    held_until: float = field(default=0.0, init=False)
    _seen: tuple[str, str, float] = field(default=("", "", 0.0), init=False)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases"

    def try_acquire(self) -> bool:
        """Take or renew the lease; False if another holds it or the write lost a race."""
        now = self.clock()
        spec = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.duration_s,
            "renewTime": _micro(now),
        }
        try:
            lease = self.api.request("GET", f"{self.path}/{self.name}")
        except ApiError as err:
            if err.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": {**spec, "acquireTime": _micro(now)},
            }
            return self._write("POST", self.path, body, now)
        current = lease.get("spec") or {}
        holder = str(current.get("holderIdentity") or "")
        record = (holder, str(current.get("renewTime") or ""))
        if record != self._seen[:2]:
            self._seen = (*record, time.monotonic())  # it changed: the holder is alive
        duration = float(current.get("leaseDurationSeconds") or self.duration_s)
        expired = time.monotonic() - self._seen[2] > duration
        if holder not in ("", self.identity) and not expired:
            return False
        if holder != self.identity:
            spec["acquireTime"] = _micro(now)
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + 1
        lease["spec"] = {**current, **spec}
        return self._write("PUT", f"{self.path}/{self.name}", lease, now)

    def _write(self, method: str, path: str, body: dict[str, Any], now: float) -> bool:
        try:
            self.api.request(method, path, body=body)
        except ApiError as err:
            if err.status in (409, 404):
                return False  # someone else wrote first
            raise
        self.held_until = now + self.duration_s
        return True


def _micro(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"


class Runner:
    """The scheduler process: `run()` until `stop` is set."""

    def __init__(
        self,
        scheduler: KubeScheduler,
        *,
        lease: Lease | None = None,
        interval_s: float = 0.2,
        watch_timeout_s: int = 60,
        pod: tuple[str, str] | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.lease = lease
        self.pod = pod  # (namespace, name) of the pod this replica runs in, if it knows it
        self.announced = False  # its pod carries the leader label
        self.interval_s = interval_s
        self.watch_timeout_s = watch_timeout_s
        self.stop = threading.Event()
        self.lock = threading.RLock()  # held while stepping; the read API reads under it
        self.seen: queue.Queue[Seen] = queue.Queue()
        self.watchers: list[Watcher] = []
        self.leading = lease is None
        self.steps = 0
        self.failed = False

    def run(self) -> None:
        self._drop_label()  # a container restarted in the leader's pod leads no more
        if self.lease is not None:
            self._wait_for_lease()
            if self.stop.is_set():
                return
        s = self.scheduler
        if self.lease is not None:
            lease = self.lease
            # A write must go out before the lease could pass to another replica, with a
            # margin for the write itself (renewals come every third of the duration).
            s.fence = lambda: lease.clock() < lease.held_until - lease.duration_s / 4
        with self.lock:
            versions = s.sync()
        api = s.api
        watched: list[tuple[str, str, dict[str, str]]] = [
            ("nodes", "/api/v1/nodes", {}),
            ("pods", s.pods_path(), {"fieldSelector": s.pod_selector()}),
            ("others", OTHERS_PATH, {"fieldSelector": s.others_selector()}),
            ("configmaps", s.config_path(), {"fieldSelector": QUEUES_SELECTOR}),
        ]
        # A kind of PodGroup whose CRD the cluster lacks was listed as "" and is not watched,
        # as ResourceClaims where the cluster does not serve resource.k8s.io/v1.
        watched += [(k.resource, s.groups_path(k), {}) for k in GANG_KINDS if versions[k.resource]]
        if versions.get("resourceclaims"):
            watched.append(("resourceclaims", s.claims_path(), {}))
        self.watchers = [
            Watcher(
                api,
                kind,
                path,
                versions[kind],
                self.seen,
                self.stop,
                self.watch_timeout_s,
                **query,
            )
            for kind, path, query in watched
        ]
        for watcher in self.watchers:
            watcher.start()
        announce_at = time.monotonic()  # label the pod at once, then until it could be
        renew_at = time.monotonic()  # renew at once: sync may have taken a while
        while not self.stop.is_set():
            try:
                batch = self._wait()
                with self.lock:
                    self._apply(batch)
                    s.step()
            except LeaseLost as err:
                log.error("%s; stopping", err)
                self.stop.set()
                return
            except Exception:
                # Crash-only: the copies and the core may no longer agree with the cluster. A
                # restart rebuilds both from the API server (`sync`) before binding anything.
                log.exception("scheduling step failed; stopping (a restart rebuilds the state)")
                self.failed = True
                self.stop.set()
                return
            self.steps += 1
            if self.lease is not None and time.monotonic() >= renew_at:
                renew_at = time.monotonic() + self.lease.duration_s / 3
                try:
                    renewed = self.lease.try_acquire()
                except ApiError as err:
                    log.warning("renewing the lease: %s", err)
                    renewed = True  # the fence stops writes once it has run out
                if not renewed:
                    # Crash-only: another replica leads now; this one must bind nothing more.
                    log.error("lost the lease %s; stopping", self.lease.name)
                    self.stop.set()
            if not self.announced and time.monotonic() >= announce_at:
                announce_at = time.monotonic() + ANNOUNCE_EVERY_S
                self._announce()
        if self.announced:
            self._drop_label()

    def _announce(self) -> None:
        """Once this replica leads and has synced: label its pod the leader's (the Service
        selects it), and take the label off any other pod that still has it (a leader that
        died without taking it off)."""
        if self.pod is None:
            return
        namespace, name = self.pod
        try:
            others, _ = self.scheduler.api.list(
                f"/api/v1/namespaces/{namespace}/pods", labelSelector=f"{ROLE}={LEADER}"
            )
            for other in others:
                if other["metadata"]["name"] != name:
                    self._label(namespace, other["metadata"]["name"], None)
            self._label(namespace, name, LEADER)
        except ApiError as err:
            log.warning(
                "labelling pod %s/%s the leader's: %s; again at the next renewal",
                namespace,
                name,
                err,
            )
            return
        self.announced = True
        log.info("pod %s/%s labelled %s=%s", namespace, name, ROLE, LEADER)

    def _drop_label(self) -> None:
        """Take the leader label off this replica's pod (best effort: it may be gone)."""
        if self.pod is None:
            return
        try:
            self._label(*self.pod, None)
        except ApiError as err:
            if err.status != 404:
                log.warning("taking the leader label off pod %s/%s: %s", *self.pod, err)
        self.announced = False

    def _label(self, namespace: str, name: str, value: str | None) -> None:
        self.scheduler.api.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{name}",
            body={"metadata": {"labels": {ROLE: value}}},
            content_type="application/merge-patch+json",
        )

    def _wait_for_lease(self) -> None:
        assert self.lease is not None
        while not self.stop.is_set():
            try:
                if self.lease.try_acquire():
                    self.leading = True
                    log.info("leading as %s", self.lease.identity)
                    return
            except ApiError as err:
                log.warning("lease: %s", err)
            self.stop.wait(min(2.0, self.lease.duration_s / 3))

    def _wait(self) -> list[Seen]:
        """What the watches saw, waiting at most one interval for the first of it."""
        try:
            batch = [self.seen.get(timeout=self.interval_s)]
        except queue.Empty:
            return []
        while True:
            try:
                batch.append(self.seen.get_nowait())
            except queue.Empty:
                return batch

    def _apply(self, batch: list[Seen]) -> None:
        for kind, what, obj in batch:
            try:
                if what == "RELIST":
                    self.scheduler.relisted(kind, obj)
                else:
                    self.scheduler.observe(kind, what, obj)
            except Exception:  # one object it cannot read must not hide the others
                log.exception("could not take a %s %s event", kind, what)
