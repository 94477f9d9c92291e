"""The Kubernetes driver: what the API server holds, turned into core events, and the core's
decisions carried out as bindings, evictions, Events and pod conditions.

One loop (`step`) takes what the watches saw, brings its copies of nodes, pods and PodGroups up
to date, then reconciles them with the core: nodes come and go, gangs whose pods all exist are
submitted, bound gangs whose pods have all ended finish, and waiting gangs get the core's reason
on their pods. A gang is bound only whole. Before its pods are bound, the whole plan is written
on its PodGroup (annotation `toposched.io/placement`), so that a scheduler that dies halfway is
followed by one that restores the gang from the plan and binds the rest: no GPU is booked twice
and no gang is left half bound.

`KubeScheduler` here holds the loop and the gangs, and composes the parts, each its own module:
`cache.py` (the copies the watches keep), `nodes.py` (nodes into the core), `binder.py` (every
write to the API server: binds, evictions, conditions, Events), `restore.py` (gangs given back
after a restart) and `gangs.py` (the Gang record and the keys that name gangs).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from toposched.common.driver import Driver
from toposched.common.durations import duration_text
from toposched.core import (
    Action,
    Event,
    IdleAction,
    JobCancelled,
    JobFinished,
    JobIdle,
    JobState,
    JobStopped,
    JobSubmitted,
    Placement,
    QueueConfigured,
    Scheduler,
    SchedulerPolicy,
    StartJob,
    StopJob,
    Tick,
    Transition,
    WorkerFailed,
)
from toposched.kube.api import KubeApi
from toposched.kube.binder import PLAN, Binder, LeaseLost, Warnings
from toposched.kube.cache import OTHERS_PATH, QUEUES_SELECTOR, ClusterCache, queues_from
from toposched.kube.gangs import Gang, Key, gang_key, group_key, kind_of, shown
from toposched.kube.gangspec import encode_idle, gang_spec, min_member
from toposched.kube.nodes import CoreNodes
from toposched.kube.objects import UPSTREAM, GangKind, Obj, ObjectError, Pod
from toposched.kube.restore import Restorer
from toposched.kube.usage import Usage
from toposched.perf.model import DEFAULT_FRAMEWORK, DEFAULT_NETWORK, PerfModel
from toposched.perf.registry import Catalog
from toposched.perf.steptime import mixed_step_time
from toposched.perf.typespeeds import TypeSpeeds
from toposched.topology.cluster import Cluster, Node

REASON_EVERY_S = 10.0  # how often a waiting gang's pods may be told a new reason
# How long a gang whose pods were found not to fit a node at bind time is kept off that node.
# Read at each use: tests shorten it.
REFUSED_S = 60.0


class KubeScheduler(Driver):
    """Drives one core with one Kubernetes cluster. `sync()` once, then `step()` in a loop."""

    def __init__(
        self,
        api: KubeApi,
        policy: SchedulerPolicy,
        *,
        scheduler_name: str = "toposched",
        namespace: str | None = None,
        rack_label: str = "toposched.io/rack",
        config_namespace: str = "toposched-system",
        clock: Callable[[], float] = time.time,
        gpu_names: Iterable[str] | None = None,
        perf: PerfModel | None = None,
        framework: str = DEFAULT_FRAMEWORK,
        network: str = DEFAULT_NETWORK,
    ) -> None:
        perf = perf if perf is not None else PerfModel()
        self.api = api
        self.clock = clock
        warnings = Warnings(api, clock)
        self.cache = ClusterCache(
            api,
            scheduler_name=scheduler_name,
            namespace=namespace,
            config_namespace=config_namespace,
            warn=warnings.warn,
            configure=self._configure,
        )
        names = (
            gpu_names if gpu_names is not None else (g.name for g in Catalog.load().gpus.values())
        )
        self.nodes = CoreNodes(
            self.cache.usage,
            warnings.warn,
            rack_label=rack_label,
            gpu_names=names,
            type_speed=TypeSpeeds(perf),
        )
        step = mixed_step_time(
            perf, self.nodes.type_speed, self.nodes.type_of, framework=framework, network=network
        )
        core = Scheduler(Cluster(()), policy, step_time=step, type_speed=self.nodes.type_speed)
        super().__init__(core)
        self.binder = Binder(api, self.cache, self.nodes, warnings, clock=clock, post=self.post)
        self.restorer = Restorer(self, self.cache, self.nodes, self.binder)
        self.shares: dict[str, int] = {}  # guaranteed GPUs per queue, as the core was told
        self.gangs: dict[str, Gang] = {}
        self.by_key: dict[Key, str] = {}
        self.refused: dict[Key, dict[str, float]] = {}  # gang: nodes it did not fit, when
        self._gated: dict[Key, list[Pod]] = {}  # unbound pods with scheduling gates, by gang
        self._serial = 0
        self._gathered: list[Event] = []  # jobs' events for the core's next batch

    # ------------------------------------------------------------------ the parts' knobs

    @property
    def usage(self) -> Usage:
        """What pods use of each node (the cache's)."""
        return self.cache.usage

    @property
    def told(self) -> dict[str, Node]:
        """What the core was last told of each node."""
        return self.nodes.told

    @property
    def cordoned(self) -> set[str]:
        """Nodes in the core that take no new work."""
        return self.nodes.cordoned

    @property
    def fence(self) -> Callable[[], bool]:
        """Whether writes may go out now (a leader checks that its lease still holds)."""
        return self.binder.fence

    @fence.setter
    def fence(self, fence: Callable[[], bool]) -> None:
        self.binder.fence = fence

    # ------------------------------------------------------------------ observing

    def pods_path(self) -> str:
        return self.cache.pods_path()

    def pod_selector(self) -> str:
        return self.cache.pod_selector()

    def others_selector(self) -> str:
        return self.cache.others_selector()

    def groups_path(self, kind: GangKind) -> str:
        return self.cache.groups_path(kind)

    def config_path(self) -> str:
        return self.cache.config_path()

    def claims_path(self) -> str:
        return self.cache.claims_path()

    def sync(self) -> dict[str, str]:
        """List everything, rebuild the core from bound pods (before anything is bound), and
        reconcile. Returns the resourceVersion of each list, where watches start."""
        versions = self.cache.load()
        self._sync_nodes()
        self.restorer.restore_bound()
        self.binder.flush()
        self.reconcile()
        return versions

    def observe(self, kind: str, event_type: str, obj: Obj) -> None:
        """One watch event (or a listed object) into the copies."""
        self.cache.observe(kind, event_type, obj)

    def relisted(self, kind: str, objects: list[Obj]) -> None:
        """A watch came back with a fresh list (after 410 Gone): objects it lacks are gone."""
        self.cache.relisted(kind, objects)

    def _configure(self, shares: dict[str, int]) -> None:
        """The core told each queue's guaranteed share that changed (the cache read them from
        the queues ConfigMap)."""
        now = self.clock()
        for name in sorted(set(self.shares) | set(shares)):
            gpus = shares.get(name, 0)
            if self.shares.get(name, 0) != gpus:
                self.feed(QueueConfigured(now, name, gpus))
        self.shares = shares

    # ------------------------------------------------------------------ reconciling

    def step(self) -> None:
        """Reconcile and let time pass in the core (reservations, locality deadlines)."""
        self.reconcile(Tick(self.clock()))

    def reconcile(self, *also: Event) -> None:
        """Bring the core up to what the watches saw. The jobs' events (ended, gone, new) go
        to the core as one batch, with `also`: one scheduling cycle for all of them, not one
        each (on a burst of 10,000 pods, most of the scheduler's time otherwise)."""
        self._sync_nodes()
        self.binder.queue_groups()
        self._gathered = []
        self._sync_bound()
        self._sync_waiting()
        events, self._gathered = [*self._gathered, *also], []
        self.feed_batch(events)
        self._sync_reasons()

    def _sync_nodes(self) -> None:
        """Each node event fed before the next is worked out (see CoreNodes.sync)."""
        taken = self.cache.taken_by_others() if self.cache.claims else {}
        for event in self.nodes.sync(self.cache.nodes, self.view, self.clock(), taken):
            self.feed(event)

    def _sync_bound(self) -> None:
        """Bound gangs whose pods ended finish; stopping ones whose pods are gone stop."""
        now = self.clock()
        for job, gang in list(self.gangs.items()):
            if not self.view.knows(job):
                self._forget(job)
                continue
            state = self.view.state(job)
            if state is JobState.PENDING:
                self.cache.unbook(gang)  # requeued: it holds nothing until placed again
            pods = [self.cache.mine(gang, k) for k in gang.workers]
            alive = [p for p in pods if p is not None and not p[1].done]
            if state is JobState.STOPPING:
                self.binder.evict(gang)
                holding = [self.cache.mine(gang, k) for k in gang.bound]
                if not [p for p in holding if p is not None and not p[1].done]:
                    self.binder.evicting.pop(job, None)
                    self._gathered.append(JobStopped(now, job))
            elif state is JobState.RUNNING:
                self._idle(job, gang, [p for p in alive if p is not None], now)
                # A worker that failed, or was deleted (or made again): the gang stops whole.
                failed = [i for i, p in enumerate(pods) if p is None or p[1].phase == "Failed"]
                if failed and alive and not gang.failed:
                    gang.failed = True
                    why = "its pod failed or was deleted"
                    self._gathered.append(WorkerFailed(now, job, failed[0], why))
                elif not alive:
                    ok = all(p is not None and p[1].phase == "Succeeded" for p in pods)
                    why = "all pods succeeded" if ok else "its pods ended or were deleted"
                    self._gathered.append(JobFinished(now, job, ok, why))
            if state.terminal:
                self._forget(job)

    def _idle(self, job: str, gang: Gang, alive: list[tuple[Obj, Pod]], now: float) -> None:
        """A gang whose every running pod the node agents found idle under its rule: stopped
        by eviction (the rule says stop) or told (notify), with a Warning Event saying why."""
        spec = self.view.job(job).spec
        rule = spec.idle if spec is not None else None
        idle = bool(alive) and all(pod.idle_since is not None for _, pod in alive)
        if rule is None or not idle:
            gang.idle_told = False
            return
        if gang.idle_told:
            return
        gang.idle_told = True
        since = max(pod.idle_since or 0.0 for _, pod in alive)
        why = (
            f"its GPUs stayed below {rule.below_pct:g}% busy for {duration_text(rule.after_s)} "
            f"(idle since {time.strftime('%H:%M:%S', time.gmtime(since))} UTC; idle action "
            f"{rule.action.value})"
        )
        self.binder.warn_pods([pod for _, pod in alive], "GPUsIdle", why)
        if rule.action is IdleAction.STOP:
            self._gathered.append(JobIdle(now, job, why))

    def _sync_waiting(self) -> None:
        """Submit gangs whose pods all exist and may be scheduled (no scheduling gate left);
        cancel waiting gangs whose pods went away."""
        now = self.clock()
        waiting: dict[Key, list[Pod]] = {}
        self._gated = {}
        for _, found in self.cache.pods.values():
            if found.node is None and not found.done and not found.deleting:
                if not found.claims_made:
                    why = "its ResourceClaims are not all made yet (the resource claim controller)"
                    self.binder.warn_pods([found], "WaitingForResourceClaim", why)
                    continue
                key, pod = self.cache.gang_of(found)
                into = self._gated if pod.gates else waiting
                into.setdefault(key, []).append(pod)
        for job, gang in list(self.gangs.items()):
            if self.view.state(job) is not JobState.PENDING:
                continue
            present = {p.key for p in waiting.get(gang.key, []) if gang.uids.get(p.key) == p.uid}
            # A gang kept off nodes where it did not fit is submitted again once that lapses.
            if not set(gang.workers) <= present or gang.excluded != self._excluded(gang.key, now):
                self._gathered.append(JobCancelled(now, job))
                self._forget(job)
        for key in set(self.refused) - set(waiting):
            del self.refused[key]  # bound, or its pods are gone
        for key, pods in sorted(waiting.items(), key=lambda kv: self._created(kv[1])):
            if key not in self.by_key:
                self._submit(key, sorted(pods, key=lambda p: p.name))

    def _submit(self, key: Key, pods: list[Pod]) -> None:
        now = self.clock()
        gpu_pods = [p for p in pods if p.gpus]
        extra = [p.key for p in pods if not p.gpus]
        group = pods[0].group
        obj = self.cache.groups.get(key)
        if group and obj is None:
            what = f"{pods[0].group_kind.title} {key[0]}/{group}"
            self.binder.warn_pods(pods, "WaitingForPodGroup", f"no {what} yet")
            return
        need = 1
        if obj is not None:
            try:
                need = min_member(obj)
            except ObjectError as err:
                self.binder.warn(obj, "InvalidPodGroup", str(err))
                self.binder.warn_pods(pods, "InvalidPodGroup", str(err))
                return
        # Every member counts toward minMember, as coscheduling counts them: an MPI job's
        # launcher (no GPU) and its workers are one gang, bound together.
        if len(pods) < need:
            gated = self._gated.get(key, [])
            why = f"gang {shown(key)}: {len(pods)} of {need} pods"
            if gated:
                gates = sorted({g for p in gated for g in p.gates})
                why += f" ({len(gated)} more gated by {', '.join(gates)})"
            self.binder.warn_pods(pods, "WaitingForPods", why)
            return
        if not gpu_pods:
            self.binder.bind_without_gpus(pods)
            return
        job = self.new_job(key)
        workers = gpu_pods  # all of them: a pod beyond minMember would never bind later
        excluded = self._excluded(key, now)
        others = [p for p in pods if not p.gpus]
        try:
            spec = gang_spec(job, workers, len(workers), obj, extra=others, excluded=excluded)
        except ObjectError as err:
            self.binder.warn_pods(pods, "InvalidGang", str(err))
            return
        never = self.core.never_fits(spec)
        if never:
            self.binder.warn_pods(pods, "Unschedulable", never)
            if obj is not None and kind_of(key) is UPSTREAM:
                self.binder.tell_group(key, never)
            return
        gang = Gang(job, key, [p.key for p in workers], extra, group=obj is not None)
        gang.idle = encode_idle(spec.idle)
        gang.excluded = excluded
        gang.uids = {p.key: p.uid for p in pods}
        self.gangs[job] = gang
        self.by_key[key] = job
        self._gathered.append(JobSubmitted(now, spec))

    def new_job(self, key: Key) -> str:
        """A new core job's name for gang `key`: never one a job had before."""
        self._serial += 1
        return f"{shown(key)}#{self._serial}"

    def _excluded(self, key: Key, now: float) -> frozenset[str]:
        """The nodes gang `key` is kept off: those its pods did not fit at bind time, lately."""
        refused = self.refused.get(key)
        if refused is None:
            return frozenset()
        for node in [n for n, when in refused.items() if now - when >= REFUSED_S]:
            del refused[node]
        if not refused:
            del self.refused[key]
        return frozenset(refused)

    def _sync_reasons(self) -> None:
        """Each waiting gang's pods say why they wait: a PodScheduled=False condition and an
        Event, written when the core's reason changes."""
        now = self.clock()
        # A busy queue changes every reason often: each gang's is written at most this often.
        due = [
            job
            for job, gang in self.gangs.items()
            if now - gang.written >= REASON_EVERY_S and self.view.state(job) is JobState.PENDING
        ]
        changed: list[tuple[Gang, str]] = []
        for job, reason in self.view.reasons(due).items():
            gang = self.gangs[job]
            if reason == gang.reason:
                continue
            gang.reason, gang.written = reason, now
            changed.append((gang, reason))
        self.binder.say_why(changed, now)

    def _created(self, pods: list[Pod]) -> tuple[str, str]:
        """Gangs in the order their first pod was created (then by name)."""
        stamps = [
            str(((self.cache.pods[p.key][0].get("metadata") or {}).get("creationTimestamp")) or "")
            for p in pods
        ]
        return (min(stamps), pods[0].name)

    def _forget(self, job: str) -> None:
        gang = self.gangs.pop(job, None)
        self.binder.evicting.pop(job, None)
        if gang is not None:
            self.cache.unbook(gang)
        if gang is not None and self.by_key.get(gang.key) == job:
            del self.by_key[gang.key]

    # ------------------------------------------------------------------ carrying out

    def on_transition(
        self, t: Transition, start: StartJob | None, stop: StopJob | None, now: float
    ) -> None:
        gang = self.gangs.get(t.job)
        if gang is None:
            return
        if start is not None:
            self._bind(gang, start.placement, now)
        elif stop is not None:
            self.binder.stop(gang)

    def _bind(self, gang: Gang, placement: Placement, now: float) -> None:
        """Bind the whole gang (the binder writes its plan on the PodGroup first, then binds
        each pod). A gang whose pods would not fit where the core put them (resources the core
        does not count, or its pods without GPUs, next to what the core placed in the same
        cycle) is not bound: it is cancelled and submitted again, kept off that node for
        REFUSED_S."""
        self.cache.unbook(gang)
        misfit = self.binder.misfit(gang, placement)
        if misfit is None:
            self.binder.bind(gang, placement, now)
            return
        node, why = misfit
        self.refused.setdefault(gang.key, {})[node] = now
        message = f"{why}; its gang is kept off {node} for {REFUSED_S:.0f} s"
        for key in [*gang.workers, *gang.extra]:
            found = self.cache.pods.get(key)
            if found is not None:
                self.binder.warn(found[0], "FailedScheduling", message)
        self.post(JobCancelled(now, gang.job))

    def carry_out(self, actions: Iterable[Action], now: float) -> None:
        super().carry_out(actions, now)
        self.binder.flush()


# What other modules import from here, whichever part defines it.
__all__ = [
    "OTHERS_PATH",
    "PLAN",
    "QUEUES_SELECTOR",
    "Gang",
    "KubeScheduler",
    "LeaseLost",
    "gang_key",
    "group_key",
    "kind_of",
    "queues_from",
]
