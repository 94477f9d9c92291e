"""The core's books: free and failed GPUs, who holds each GPU, the jobs and queues, the reservation.

Every decision reads these, and only `allocate`, `release_pairs` and the node and queue changes
below write the GPU indexes, so that they stay in step: the owner of each GPU, the jobs on each
node, the nodes of each job, the jobs holding any GPU, each queue's usage, and a stamp per node
bumped whenever its jobs change (what reservations remember per node is good while it is).
Validate mode (core/validate.py) recomputes all of them from the jobs' placements.
"""

from __future__ import annotations

from collections import deque

from toposched.core.dependencies import Dependencies
from toposched.core.errors import SchedulingError
from toposched.core.job import JobSpec
from toposched.core.limits import TimeLimits
from toposched.core.records import JobRecord, QueueRecord, Reservation
from toposched.placement.capacity import Capacity, full_mask
from toposched.placement.gang import Placement
from toposched.placement.mig import Instance, MigGpu
from toposched.placement.sharing import MILLI, NodeRoom, Task
from toposched.placement.tables import to_mask
from toposched.topology.cluster import Cluster, Node
from toposched.topology.mig import COMPUTE_SLICES, MigTable, mig_table
from toposched.topology.resources import Hardware, type_key

MIB = 2**20
NOTES = 100  # cluster-wide notes kept (node added, spread/pack changed)


def gpus_mig_table(hw: Hardware) -> MigTable | None:
    """The MIG table of a node's GPUs (`hw`), if any of them is in MIG mode."""
    return mig_table(hw.gpu_type, hw.gpu_memory) if hw.mig else None


class Books:
    """One cluster's state, as of `now` (the time of the event being handled)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.network_gbps = cluster.network_gbps
        self.capacity = Capacity(cluster.nodes, cluster.all_levels, bool(cluster.levels))
        self.labels: dict[str, dict[str, str]] = {n.name: dict(n.labels) for n in cluster.nodes}
        self.unhealthy: dict[int, int] = {}  # failed GPUs of present nodes that have any
        self.cordoned: set[int] = set()  # nodes that take no new work; none of their GPUs is free
        # Nodes whose labels, hardware or taints changed after they joined: the jobs there may
        # have started under the old ones, and one may now hold more CPUs or memory than left.
        self.changed: set[int] = set()
        self.owner: dict[tuple[int, int], str] = {}
        # The same by node, by job, and the jobs holding any GPU: what reclaim and
        # reservations walk, instead of every GPU.
        self.node_jobs: dict[int, dict[str, int]] = {}
        self.job_nodes: dict[str, dict[int, int]] = {}
        self.holders: dict[str, JobRecord] = {}
        self.node_stamp: dict[int, int] = {}
        self.jobs: dict[str, JobRecord] = {}
        self.queues: dict[str, QueueRecord] = {}
        self.elastic: dict[str, JobRecord] = {}  # elastic jobs not yet ended: growth's list
        self.held_waiting: dict[str, int] = {}  # GPUs of partial gangs, by waiting job
        # Jobs without GPUs hold CPUs and memory alone: their workers by node (a lost node
        # stops them as it stops the jobs holding its GPUs).
        self.cpu_only: dict[int, dict[str, int]] = {}
        # Shared GPUs: each one's jobs with their (thousandths, MiB). A shared GPU is not free
        # (Capacity.free), so whole-GPU placers never see it; the jobs holding shares are kept
        # here, not in `owner`, `node_jobs`, `job_nodes` or `holders`.
        self.shares: dict[tuple[int, int], dict[str, tuple[int, int]]] = {}
        self.sharers: dict[str, JobRecord] = {}
        # GPUs in MIG mode (Hardware.mig): never free, so neither whole-GPU placers nor share
        # policies see them. Each one's MIG instances, by job: (profile, memory-slice start).
        self.mig: dict[tuple[int, int], dict[str, Instance]] = {}
        self.mig_holders: dict[str, JobRecord] = {}
        self.mig_nodes: dict[int, int] = {}  # present nodes with GPUs in MIG mode: their masks
        # Each kind of worker submitted, counted: the target workload of FGD's measure.
        self.tasks: dict[Task, int] = {}
        self.deps = Dependencies()  # the waiting jobs that run after others
        self.limits = TimeLimits()  # when running jobs reach their time limits
        self.finished: deque[str] = deque()  # ended jobs, oldest first (forgotten in turn)
        self.reservation: Reservation | None = None
        self.now = 0.0
        # Bumped whenever GPUs are freed, the cluster or a guarantee changes, or a job starts
        # that another could preempt: reclaim does not search again for a request that found
        # no victims until then (core/reclaim.py).
        self.epoch = 0
        # Bumped whenever GPUs are freed or the cluster changes (not when a job starts): a
        # migration plan found for nothing is not looked for again until then.
        self.freed = 0
        self.seq = 0
        # The lowest and highest priority ever submitted to each queue.
        self.lowest_priority: dict[str, int] = {}
        self.highest_priority: dict[str, int] = {}
        self.notes: deque[tuple[float, str]] = deque(maxlen=NOTES)
        for i in self.capacity.present_indices():
            self._set_aside_mig(i)

    # ------------------------------------------------------------------ look-ups

    def job(self, name: str) -> JobRecord:
        rec = self.jobs.get(name)
        if rec is None:
            raise SchedulingError(f"no job named {name!r}")
        return rec

    def node_index(self, name: str) -> int:
        i = self.capacity.index.get(name)
        if i is None or not self.capacity.present[i]:
            raise SchedulingError(f"no node named {name!r} in the cluster")
        return i

    def healthy_gpus(self) -> int:
        """Healthy GPUs that whole-GPU work may have (not in MIG mode)."""
        # `unhealthy` holds only nodes with a failed GPU, and only present ones.
        bad = sum(mask.bit_count() for mask in self.unhealthy.values())
        for i, mig in self.mig_nodes.items():
            bad += (mig & ~self.unhealthy.get(i, 0)).bit_count()
        return self.capacity.total_gpus - bad

    def guarantees(self) -> bool:
        """Some queue has a guaranteed share (and so may reclaim what others borrow)."""
        return any(q.guaranteed for q in self.queues.values())

    def one_priority(self) -> bool:
        """Every job ever submitted has had the same priority."""
        lows, highs = self.lowest_priority.values(), self.highest_priority.values()
        return not lows or min(lows) == max(highs)

    def starts_make_victims(self, rec: JobRecord) -> bool:
        """Whether `rec` taking GPUs may give a waiting job someone to preempt (besides by
        being demoted, which `Demotions` tells): a queue lends beyond a guarantee, or a job
        of its queue outranks it."""
        if self.guarantees():
            return True
        return self.highest_priority.get(rec.spec.queue, rec.spec.priority) > rec.spec.priority

    def note(self, text: str) -> None:
        self.notes.append((self.now, text))

    # ------------------------------------------------------------------ jobs and queues

    def register(self, spec: JobSpec, submitted: float, restarts: int) -> JobRecord:
        if spec.name in self.jobs:
            raise SchedulingError(f"a job named {spec.name!r} already exists")
        self.seq += 1
        rec = JobRecord(spec, self.seq, submitted, waiting_since=submitted, restarts=restarts)
        self.jobs[spec.name] = rec
        if spec.queue not in self.queues:
            self.configure_queue(spec.queue, 0)
        queue = spec.queue
        self.lowest_priority[queue] = min(
            self.lowest_priority.get(queue, spec.priority), spec.priority
        )
        self.highest_priority[queue] = max(
            self.highest_priority.get(queue, spec.priority), spec.priority
        )
        if spec.elastic is not None:
            self.elastic[spec.name] = rec
        if spec.mig:
            return rec  # not work of FGD's measure: it never takes a share of a GPU
        task = Task(
            spec.gpus_per_worker, spec.share_milli if spec.gpus_per_worker else 0, spec.cpus
        )
        self.tasks[task] = self.tasks.get(task, 0) + spec.workers
        return rec

    def retire(self, rec: JobRecord, keep: int) -> None:
        """Ended jobs stay answerable for a while; beyond `keep` the oldest are forgotten
        (drivers keep them)."""
        self.elastic.pop(rec.name, None)
        self.finished.append(rec.name)
        while len(self.finished) > keep:
            self.jobs.pop(self.finished.popleft(), None)

    def forget(self, name: str) -> None:
        """Drop ended job `name` now (its driver deleted it), so that a new job may take its
        name; nothing if it is not held."""
        rec = self.jobs.get(name)
        if rec is None:
            return
        if not rec.state.terminal:
            raise SchedulingError(
                f"job {name!r} is {rec.state.value}: only an ended job can be forgotten"
            )
        del self.jobs[name]
        # Out of the retirement line too, or its turn there would drop a new job of that name.
        if name in self.finished:
            self.finished.remove(name)

    def configure_queue(self, name: str, guaranteed: int) -> None:
        if not name:
            raise SchedulingError("a queue needs a name")
        if isinstance(guaranteed, bool) or not isinstance(guaranteed, int) or guaranteed < 0:
            raise SchedulingError(f"queue {name!r}: guaranteed GPUs must be >= 0, got {guaranteed}")
        queue = self.queues.setdefault(name, QueueRecord(name))
        queue.guaranteed = guaranteed
        queue.version += 1
        if self.reservation is not None and not self.reservation.awaiting:
            self.reservation = None  # new shares may allow a reclaim: plan afresh

    # ------------------------------------------------------------------ GPUs

    def allocate(self, rec: JobRecord, placement: Placement) -> None:
        if rec.spec.cpu_only:
            self._hold_cpu_only(rec, placement, 1)
            return
        if rec.spec.shared:
            self._share(rec, placement)
            return
        if rec.spec.mig:
            self._carve(rec, placement)
            return
        for node, gpus in placement.gpus_by_node().items():
            i = self.capacity.index[node]
            mask = to_mask(gpus)
            self.capacity.take(i, mask)
            for gpu in gpus:
                self.owner[(i, gpu)] = rec.name
            on_node = self.node_jobs.setdefault(i, {})
            before = on_node.get(rec.name, 0)
            on_node[rec.name] = before | mask
            self.job_nodes.setdefault(rec.name, {})[i] = on_node[rec.name]
            self._hold(i, rec.spec, before, on_node[rec.name])
            self.touch(i)
        self.holders[rec.name] = rec
        queue = self.queues[rec.spec.queue]
        queue.used += placement.gpus
        queue.version += 1
        if self.starts_make_victims(rec):
            self.epoch += 1

    def release_pairs(self, rec: JobRecord, pairs: set[tuple[str, int]]) -> None:
        for node, gpu in pairs:
            i = self.capacity.index[node]
            del self.owner[(i, gpu)]
            on_node = self.node_jobs[i]
            left = on_node[rec.name] & ~(1 << gpu)
            self._hold(i, rec.spec, on_node[rec.name], left)
            nodes = self.job_nodes[rec.name]
            if left:
                on_node[rec.name] = nodes[i] = left
            else:
                del on_node[rec.name], nodes[i]
                if not nodes:
                    del self.job_nodes[rec.name]
            usable = self.capacity.present[i] and i not in self.cordoned
            if usable and not self.unhealthy.get(i, 0) >> gpu & 1:
                self.capacity.give(i, 1 << gpu)
            self.touch(i)
        queue = self.queues[rec.spec.queue]
        queue.used -= len(pairs)
        queue.version += 1
        self.epoch += 1
        self.freed += 1

    def _hold(self, i: int, spec: JobSpec, before: int, after: int) -> None:
        """A job's GPUs on node i went from mask `before` to `after`: its CPUs and memory there
        follow its whole workers (GPUs // GPUs per worker)."""
        if not (spec.cpus or spec.memory):
            return
        g = spec.gpus_per_worker
        workers = after.bit_count() // g - before.bit_count() // g
        if workers:
            self.capacity.hold(i, workers * spec.cpus, workers * spec.memory)

    def _hold_cpu_only(self, rec: JobRecord, placement: Placement, sign: int) -> None:
        """A job without GPUs takes (`sign` 1) or gives back (-1) its workers' CPUs and
        memory on each node of `placement`."""
        spec = rec.spec
        counts: dict[int, int] = {}
        for slot in placement.workers:
            i = self.capacity.index[slot.node]
            counts[i] = counts.get(i, 0) + 1
        for i, workers in counts.items():
            self.capacity.hold(i, sign * workers * spec.cpus, sign * workers * spec.memory)
            on_node = self.cpu_only.setdefault(i, {})
            left = on_node.get(rec.name, 0) + sign * workers
            if left:
                on_node[rec.name] = left
            else:
                del on_node[rec.name]
                if not on_node:
                    del self.cpu_only[i]
            self.touch(i)

    def _share(self, rec: JobRecord, placement: Placement) -> None:
        """`rec` takes its share of the one GPU of `placement` (taken from the free GPUs if it
        is the first share there)."""
        spec = rec.spec
        ((node, gpu),) = placement.pairs()
        i = self.capacity.index[node]
        on_gpu = self.shares.setdefault((i, gpu), {})
        if not on_gpu:
            self.capacity.take(i, 1 << gpu)
        on_gpu[rec.name] = (spec.gpu_milli, spec.gpu_share_mib)
        if spec.cpus or spec.memory:
            self.capacity.hold(i, spec.cpus, spec.memory)
        self.sharers[rec.name] = rec
        self.touch(i)
        queue = self.queues[spec.queue]
        queue.used_milli += spec.gpu_milli
        queue.version += 1
        if self.starts_make_victims(rec):
            self.epoch += 1

    def _unshare(self, rec: JobRecord) -> None:
        """`rec` gives its share back; a GPU nobody shares any more is free again (unless it
        failed or its node is cordoned or gone)."""
        spec = rec.spec
        for placement in rec.held():
            ((node, gpu),) = placement.pairs()
            i = self.capacity.index[node]
            on_gpu = self.shares[(i, gpu)]
            del on_gpu[rec.name]
            if not on_gpu:
                del self.shares[(i, gpu)]
                usable = self.capacity.present[i] and i not in self.cordoned
                if usable and not self.unhealthy.get(i, 0) >> gpu & 1:
                    self.capacity.give(i, 1 << gpu)
            if spec.cpus or spec.memory:
                self.capacity.hold(i, -spec.cpus, -spec.memory)
            self.touch(i)
            queue = self.queues[spec.queue]
            queue.used_milli -= spec.gpu_milli
            queue.version += 1
        self.sharers.pop(rec.name, None)
        self.epoch += 1
        self.freed += 1

    def _carve(self, rec: JobRecord, placement: Placement) -> None:
        """`rec` takes its MIG instance: the one GPU of `placement`, at its slot's start."""
        spec = rec.spec
        ((slot),) = placement.workers
        ((gpu),) = slot.gpus
        assert slot.instance is not None, "a MIG instance is placed with its start"
        i = self.capacity.index[slot.node]
        self.mig.setdefault((i, gpu), {})[rec.name] = (spec.mig, slot.instance)
        if spec.cpus or spec.memory:
            self.capacity.hold(i, spec.cpus, spec.memory)
        self.mig_holders[rec.name] = rec
        self.touch(i)
        queue = self.queues[spec.queue]
        queue.used_milli += self.mig_milli(i, spec.mig)
        queue.version += 1
        if self.starts_make_victims(rec):
            self.epoch += 1

    def _uncarve(self, rec: JobRecord) -> None:
        """`rec` gives its MIG instance back; the GPU stays in MIG mode, never free."""
        spec = rec.spec
        for placement in rec.held():
            ((node, gpu),) = placement.pairs()
            i = self.capacity.index[node]
            on_gpu = self.mig[(i, gpu)]
            del on_gpu[rec.name]
            if not on_gpu:
                del self.mig[(i, gpu)]
            if spec.cpus or spec.memory:
                self.capacity.hold(i, -spec.cpus, -spec.memory)
            self.touch(i)
            queue = self.queues[spec.queue]
            queue.used_milli -= self.mig_milli(i, spec.mig)
            queue.version += 1
        self.mig_holders.pop(rec.name, None)
        self.epoch += 1
        self.freed += 1

    def mig_table(self, i: int) -> MigTable | None:
        """The MIG table of node `i`'s GPUs, if any of them is in MIG mode."""
        return gpus_mig_table(self.capacity.nodes[i].hardware)

    def mig_milli(self, i: int, profile: str) -> int:
        """What an instance of `profile` on node `i` counts in its queue's thousandths: its
        compute slices' part of the GPU."""
        table = self.mig_table(i)
        found = table.profile(profile) if table is not None else None
        return 0 if found is None else found.compute * MILLI // COMPUTE_SLICES

    def mig_gpus(self, i: int) -> list[MigGpu]:
        """Node `i`'s GPUs in MIG mode that may take an instance now (healthy, the node not
        cordoned), with the instances on each."""
        if i in self.cordoned:
            return []
        bad = self.unhealthy.get(i, 0)
        gpus = (self.mig_gpu(i, g) for g in self.capacity.nodes[i].hardware.mig)
        return [g for g in gpus if g is not None and not bad >> g.gpu & 1]

    def mig_gpu(self, i: int, gpu: int) -> MigGpu | None:
        """GPU `gpu` of node `i` with its instances, if it is in MIG mode."""
        table = self.mig_table(i)
        if table is None or gpu not in self.capacity.nodes[i].hardware.mig:
            return None
        return MigGpu(i, gpu, table, tuple(sorted(self.mig.get((i, gpu), {}).values())))

    def _check_mig_comeback(self, i: int, node: Node) -> None:
        """A node that comes back while jobs still hold its GPUs keeps what they hold: the
        GPUs with instances in MIG mode of the same table, the others not in MIG mode."""
        hw = node.hardware
        same_table = gpus_mig_table(hw) == self.mig_table(i)
        for (n, g), on_gpu in self.mig.items():
            if n == i and on_gpu and (g not in hw.mig or not same_table):
                raise SchedulingError(
                    f"node {node.name!r}: GPU {g} comes back not in MIG mode as it was, while "
                    f"{', '.join(sorted(on_gpu))} still hold(s) MIG instances there"
                )
        held = self.shared_mask(i)
        for mask in self.node_jobs.get(i, {}).values():
            held |= mask
        if held & hw.mig_mask:
            raise SchedulingError(
                f"node {node.name!r}: comes back with GPUs in MIG mode that jobs still hold "
                "whole or share"
            )

    def _set_aside_mig(self, i: int) -> None:
        """Node `i` (just added, all its GPUs free) keeps its GPUs in MIG mode out of the
        free ones and counts them unusable for whole GPUs."""
        mig = self.capacity.nodes[i].hardware.mig_mask
        if mig:
            self.capacity.take(i, mig & self.capacity.free[i])
            self._mirror_unusable(i)
            self.mig_nodes[i] = mig

    def shared_mask(self, i: int) -> int:
        """Node `i`'s GPUs that jobs hold shares of."""
        mask = 0
        for g in range(self.capacity.nodes[i].size):
            if (i, g) in self.shares:
                mask |= 1 << g
        return mask

    def room_for_shares(self, i: int) -> NodeRoom:
        """Node `i` as the share policies see it: each GPU's thousandths and MiB left (none
        of a failed GPU, one held whole, or any of a cordoned node)."""
        cap = self.capacity
        node = cap.nodes[i]
        mib = node.hardware.gpu_memory // MIB
        bad = self.unhealthy.get(i, 0) | node.hardware.mig_mask  # MIG GPUs are never shared
        # A shared GPU reserved for the blocked head (its sharers stopped for it) takes no new
        # sharer, or the head would wait behind each new one in turn.
        res = self.reservation
        bad |= res.gpus.get(i, 0) if res is not None else 0
        cordoned = i in self.cordoned
        left, memory_left, tenants = [], [], []
        for g in range(node.size):
            on_gpu = self.shares.get((i, g))
            if cordoned or bad >> g & 1 or (i, g) in self.owner:
                left.append(0)
                memory_left.append(0)
            elif on_gpu:
                left.append(MILLI - sum(m for m, _ in on_gpu.values()))
                memory_left.append(max(mib - sum(x for _, x in on_gpu.values()), 0))
            else:
                left.append(MILLI)
                memory_left.append(mib)
            tenants.append(len(on_gpu) if on_gpu else 0)
        return NodeRoom(
            i,
            type_key(node.hardware.gpu_type),
            tuple(left),
            tuple(memory_left),
            cap.free_cpus(i),
            cap.free_memory(i),
            tuple(tenants),
        )

    def release_held(self, rec: JobRecord) -> None:
        """Every GPU `rec` holds goes back (its placement, a move's target, a partial gang)."""
        if self.reservation is not None:
            self.reservation.awaiting.discard(rec.name)
        if rec.spec.shared:
            self._unshare(rec)
            rec.placement = rec.target = rec.resume = None
            return
        if rec.spec.mig:
            self._uncarve(rec)
            rec.placement = rec.target = rec.resume = None
            return
        if rec.spec.cpu_only:
            for placement in rec.held():
                self._hold_cpu_only(rec, placement, -1)
        self.release_pairs(rec, {pair for p in rec.held() for pair in p.pairs()})
        self.holders.pop(rec.name, None)
        rec.placement = rec.target = rec.resume = None
        rec.partial = []
        self.held_waiting.pop(rec.name, None)

    def touch(self, i: int) -> None:
        self.node_stamp[i] = self.node_stamp.get(i, 0) + 1

    def touch_nodes_of(self, rec: JobRecord) -> None:
        """`rec` changed state or start time: its nodes' jobs end at other times."""
        for placement in rec.held():
            for slot in placement.workers:
                self.touch(self.capacity.index[slot.node])

    # ------------------------------------------------------------------ nodes

    def add_node(self, node: Node) -> None:
        i = self.capacity.index.get(node.name)
        if i is not None and self.capacity.present[i]:
            raise SchedulingError(f"node {node.name!r} is already in the cluster")
        if i is not None:
            self._check_mig_comeback(i, node)
        i = self.capacity.add_node(node)
        self.touch(i)
        self.cordoned.discard(i)
        self.labels[node.name] = dict(node.labels)
        self.set_unhealthy(i, 0)
        held = self.shared_mask(i)
        for mask in self.node_jobs.get(i, {}).values():  # jobs that kept GPUs of a lost node
            held |= mask
        if held:
            self.capacity.take(i, held)
        self._set_aside_mig(i)

    def remove_node(self, i: int) -> None:
        """Forget a node whose jobs have let go of it."""
        self.capacity.remove_node(i)
        self.mig_nodes.pop(i, None)
        self.touch(i)
        self.cordoned.discard(i)
        self.set_unhealthy(i, 0)
        if self.reservation is not None and i in self.reservation.gpus:
            self.reservation = None

    def set_unhealthy(self, i: int, mask: int) -> None:
        """Node `i`'s failed GPUs are `mask`."""
        if mask:
            self.unhealthy[i] = mask
        else:
            self.unhealthy.pop(i, None)
        self._mirror_unusable(i)

    def _mirror_unusable(self, i: int) -> None:
        """What the placers read of failed GPUs and cordons (Capacity.unusable)."""
        node = self.capacity.nodes[i]
        every = full_mask(node.size)
        out = self.unhealthy.get(i, 0) | node.hardware.mig_mask
        self.capacity.set_unusable(i, every if i in self.cordoned else out)

    def change_node(self, node: Node) -> None:
        """New labels, hardware or taints for a present node of the same wiring."""
        i = self.node_index(node.name)
        old = self.capacity.nodes[i]
        if node.topology != old.topology:
            raise SchedulingError(
                f"node {node.name!r}: its GPUs or their wiring changed; remove and add it again"
            )
        if node.hardware.mig != old.hardware.mig or self.mig_table(i) != gpus_mig_table(
            node.hardware
        ):
            raise SchedulingError(
                f"node {node.name!r}: its GPUs in MIG mode or their MIG table changed; remove "
                "and add it again"
            )
        self.capacity.replace_node(i, node)
        if dict(node.labels) != self.labels[node.name]:
            self.labels[node.name] = dict(node.labels)
            self.capacity.set_labels(i, node.labels)
        self.changed.add(i)
        self.touch(i)

    def cordon(self, i: int, on: bool) -> None:
        """No GPU of node `i` is free while it is cordoned; uncordoned, those neither held nor
        failed are free again."""
        if on and i not in self.cordoned:
            self.cordoned.add(i)
            self.capacity.take(i, self.capacity.free[i])
        elif not on and i in self.cordoned:
            self.cordoned.discard(i)
            held = self.shared_mask(i) | self.capacity.nodes[i].hardware.mig_mask
            for mask in self.node_jobs.get(i, {}).values():
                held |= mask
            size = self.capacity.nodes[i].size
            self.capacity.give(i, ((1 << size) - 1) & ~held & ~self.unhealthy.get(i, 0))
        self._mirror_unusable(i)
        self.touch(i)
        if on and self.reservation is not None and i in self.reservation.gpus:
            self.reservation = None  # its GPUs will not free up there

    def holders_on(self, i: int) -> list[str]:
        """The jobs holding GPUs or shares of GPUs of node `i`, or workers there without
        GPUs, by name."""
        sharing = {name for (n, _), on_gpu in self.shares.items() if n == i for name in on_gpu}
        sharing |= {name for (n, _), on_gpu in self.mig.items() if n == i for name in on_gpu}
        return sorted({*self.node_jobs.get(i, {}), *self.cpu_only.get(i, {}), *sharing})

    def sharers_of(self, i: int, gpu: int) -> list[str]:
        """The jobs holding shares or MIG instances of GPU `gpu` of node `i`, by name."""
        return sorted({*self.shares.get((i, gpu), {}), *self.mig.get((i, gpu), {})})
