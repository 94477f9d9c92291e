"""Validate mode: the invariants the core's books must keep after every event."""

from __future__ import annotations

from toposched.core.books import MIB, Books
from toposched.core.demotion import Demotions
from toposched.core.errors import InvariantViolation
from toposched.core.job import JobState
from toposched.core.ordering import Waiting
from toposched.core.records import JobRecord
from toposched.placement.capacity import full_mask
from toposched.placement.mig import Instance
from toposched.topology.cluster import tier_of
from toposched.topology.mig import COMPUTE_SLICES

__all__ = ["InvariantViolation", "check"]


def check_gang(s: Books, rec: JobRecord) -> None:
    if rec.placement is None:
        raise InvariantViolation(f"{rec.name} is {rec.state.value} with no placement")
    spec = rec.spec
    workers = rec.placement.workers
    if not spec.min_workers <= len(workers) <= spec.max_workers or any(
        len(w.gpus) != spec.gpus_per_worker for w in workers
    ):
        raise InvariantViolation(f"{rec.name}: gang is not whole: {rec.placement}")
    nodes = (s.capacity.nodes[s.capacity.index[w.node]] for w in workers)
    if tier_of(nodes) > (spec.locality.accept or spec.locality.prefer).tier:
        raise InvariantViolation(f"{rec.name}: placed wider than its locality allows")
    _check_where(s, rec)


def _check_where(s: Books, rec: JobRecord) -> None:
    """On nodes the job admits, all of one GPU type unless it accepts mixed ones (nodes changed
    since they joined are left out: the job may have started under their old labels)."""
    cap, spec = s.capacity, rec.spec
    types = set()
    for placement in rec.held():
        for w in placement.workers:
            i = cap.index[w.node]
            if i in s.changed:
                continue
            if not spec.where.admits(cap.nodes[i], cap.labels[i]):
                raise InvariantViolation(f"{rec.name} runs on {w.node}, which it rules out")
            if not spec.cpu_only:  # no GPU, so no GPU type to keep to
                types.add(cap.type_key(i))
    if len(types) > 1 and not spec.mixed_types:
        raise InvariantViolation(f"{rec.name} runs on GPU types {sorted(types)} at once")


def check(s: Books, waiting: Waiting, demotions: Demotions, gang: bool) -> None:
    """Raise InvariantViolation unless the books agree (on after every event in tests)."""
    owner = _check_jobs(s, gang)
    _check_indexes(s, owner, demotions)
    _check_shares(s, owner)
    _check_mig(s, owner)
    _check_free(s, owner)
    _check_resources(s)
    _check_waiting(s, waiting)
    _check_dependencies(s, waiting)


def _check_jobs(s: Books, gang: bool) -> dict[tuple[int, int], str]:
    """Each job holds what its state allows, whole gangs only, and no GPU twice; returns the
    owner of each GPU as the jobs tell it."""
    owner: dict[tuple[int, int], str] = {}
    used: dict[str, int] = {q: 0 for q in s.queues}
    for rec in s.jobs.values():
        held = rec.held()
        spec = rec.spec
        if rec.state is JobState.PENDING and not gang and rec.partial:
            if len(rec.partial) >= spec.min_workers or rec.placement or rec.target:
                raise InvariantViolation(f"{rec.name} waits while holding a whole gang")
        elif rec.state is JobState.PENDING or rec.state.terminal:
            if held:
                raise InvariantViolation(f"{rec.name} is {rec.state.value} but holds GPUs")
            continue
        else:
            check_gang(s, rec)
        if spec.part_of_gpu:
            continue  # its GPU is shared or carved, not owned (_check_shares, _check_mig)
        for placement in held:
            for node, gpu in placement.pairs():
                slot = (s.capacity.index[node], gpu)
                if slot in owner:
                    raise InvariantViolation(
                        f"GPU {gpu} of {node} held by {owner[slot]} and {rec.name}"
                    )
                owner[slot] = rec.name
            used[spec.queue] = used.get(spec.queue, 0) + placement.gpus
    for q, queue in s.queues.items():
        if queue.used != used.get(q, 0):
            raise InvariantViolation(f"queue {q}: usage {queue.used} != {used.get(q, 0)}")
    return owner


def _check_indexes(s: Books, owner: dict[tuple[int, int], str], demotions: Demotions) -> None:
    """The owner map, the jobs by node and the nodes by job, the holders and the demoted jobs
    by node agree with the GPUs the jobs hold."""
    if owner != s.owner:
        raise InvariantViolation("the GPU owner map disagrees with the jobs' placements")
    by_node: dict[int, dict[str, int]] = {}
    for (i, gpu), name in owner.items():
        on_node = by_node.setdefault(i, {})
        on_node[name] = on_node.get(name, 0) | 1 << gpu
    if by_node != {i: jobs for i, jobs in s.node_jobs.items() if jobs}:
        raise InvariantViolation("the jobs by node disagree with the GPU owner map")
    by_job: dict[str, dict[int, int]] = {}
    for i, jobs in by_node.items():
        for name, mask in jobs.items():
            by_job.setdefault(name, {})[i] = mask
    if by_job != s.job_nodes:
        raise InvariantViolation("the nodes by job disagree with the GPU owner map")
    if set(s.holders) != set(owner.values()) or any(
        s.jobs.get(name) is not rec for name, rec in s.holders.items()
    ):
        raise InvariantViolation("the jobs holding GPUs disagree with the GPU owner map")
    demoted: dict[int, dict[str, int]] = {}
    for name in demotions.demoted:
        for i, mask in s.job_nodes[name].items():
            demoted.setdefault(i, {})[name] = mask
    kept = {i: {name: v[0] for name, v in jobs.items()} for i, jobs in demotions.on_node.items()}
    if kept != demoted:
        raise InvariantViolation("the demoted jobs by node disagree with their GPUs")
    for name, rec in demotions.tracked().items():
        if s.jobs.get(name) is not rec or rec.state is not JobState.RUNNING:
            raise InvariantViolation(f"{name} is timed for demotion but is not running")
        if not rec.spec.checkpointable or name not in s.holders:
            raise InvariantViolation(f"{name} is timed for demotion but cannot be preempted")


def _check_resources(s: Books) -> None:
    """Each node's CPUs and memory held are those of the whole workers on it, and no node
    holds more than it has (unless it shrank under running jobs: `Books.changed`)."""
    cap = s.capacity
    cpus = [0] * len(cap.nodes)
    memory = [0] * len(cap.nodes)
    for i, jobs in s.node_jobs.items():
        for name, mask in jobs.items():
            spec = s.jobs[name].spec
            workers = mask.bit_count() // spec.gpus_per_worker
            cpus[i] += workers * spec.cpus
            memory[i] += workers * spec.memory
    for rec in (*s.sharers.values(), *s.mig_holders.values()):
        for placement in rec.held():
            for slot in placement.workers:
                i = cap.index[slot.node]
                cpus[i] += rec.spec.cpus
                memory[i] += rec.spec.memory
    cpu_only: dict[int, dict[str, int]] = {}
    for rec in s.jobs.values():
        if not rec.spec.cpu_only:
            continue
        for placement in rec.held():
            for slot in placement.workers:
                i = cap.index[slot.node]
                on_node = cpu_only.setdefault(i, {})
                on_node[rec.name] = on_node.get(rec.name, 0) + 1
                cpus[i] += rec.spec.cpus
                memory[i] += rec.spec.memory
    if cpu_only != s.cpu_only:
        raise InvariantViolation("the workers without GPUs by node disagree with the jobs")
    if cpus != cap.used_cpus or memory != cap.used_memory:
        raise InvariantViolation("the CPUs or memory held disagree with the jobs on the nodes")
    for i in cap.present_indices():
        hw = cap.nodes[i].hardware
        over = (hw.cpus is not None and cpus[i] > hw.cpus) or (
            hw.memory is not None and memory[i] > hw.memory
        )
        if over and i not in s.changed:
            raise InvariantViolation(f"node {cap.nodes[i].name}: CPUs or memory over-committed")


def _check_shares(s: Books, owner: dict[tuple[int, int], str]) -> None:
    """The shares of each GPU are those the running jobs that ask shares hold: no GPU over
    1000 thousandths or over its memory, none both shared and held whole, each queue's
    thousandths the sum of its jobs' shares."""
    shares: dict[tuple[int, int], dict[str, tuple[int, int]]] = {}
    sharers: dict[str, JobRecord] = {}
    milli: dict[str, int] = {}
    for rec in s.jobs.values():
        if not rec.spec.shared or not rec.held():
            continue
        spec = rec.spec
        sharers[rec.name] = rec
        for placement in rec.held():
            for node, gpu in placement.pairs():
                slot = (s.capacity.index[node], gpu)
                shares.setdefault(slot, {})[rec.name] = (spec.gpu_milli, spec.gpu_share_mib)
                milli[spec.queue] = milli.get(spec.queue, 0) + spec.gpu_milli
    if shares != s.shares:
        raise InvariantViolation("the shares of GPUs disagree with the jobs that hold them")
    if set(sharers) != set(s.sharers) or any(s.sharers[n] is not r for n, r in sharers.items()):
        raise InvariantViolation("the jobs holding shares disagree with their placements")
    for (i, gpu), on_gpu in shares.items():
        held_on = s.capacity.nodes[i]
        if (i, gpu) in owner:
            raise InvariantViolation(
                f"GPU {gpu} of {held_on.name} is held whole by {owner[(i, gpu)]} and shared"
            )
        used = sum(m for m, _ in on_gpu.values())
        mib = sum(x for _, x in on_gpu.values())
        if used > 1000:
            raise InvariantViolation(f"GPU {gpu} of {held_on.name}: {used} thousandths shared")
        if mib and mib * MIB > held_on.hardware.gpu_memory:
            raise InvariantViolation(f"GPU {gpu} of {held_on.name}: {mib} MiB shared, too many")
    for rec in s.mig_holders.values():
        for placement in rec.held():
            for node, _ in placement.pairs():
                i = s.capacity.index[node]
                milli[rec.spec.queue] = milli.get(rec.spec.queue, 0) + s.mig_milli(i, rec.spec.mig)
    for q, queue in s.queues.items():
        if queue.used_milli != milli.get(q, 0):
            raise InvariantViolation(
                f"queue {q}: shares {queue.used_milli} thousandths != {milli.get(q, 0)}"
            )


def _check_mig(s: Books, owner: dict[tuple[int, int], str]) -> None:
    """The MIG instances of each GPU are those the running jobs that ask a profile hold, each
    on a GPU in MIG mode that is neither held whole nor shared, at a start its profile may
    take; no two hold one memory slice, and no GPU has more of a profile than it allows or
    more compute slices than it has."""
    carved: dict[tuple[int, int], dict[str, Instance]] = {}
    holders: dict[str, JobRecord] = {}
    for rec in s.jobs.values():
        if not rec.spec.mig or not rec.held():
            continue
        holders[rec.name] = rec
        for placement in rec.held():
            for slot in placement.workers:
                for gpu in slot.gpus:
                    at = (s.capacity.index[slot.node], gpu)
                    if slot.instance is None:
                        raise InvariantViolation(f"{rec.name}: a MIG instance without its start")
                    carved.setdefault(at, {})[rec.name] = (rec.spec.mig, slot.instance)
    if carved != s.mig:
        raise InvariantViolation("the MIG instances disagree with the jobs that hold them")
    if set(holders) != set(s.mig_holders) or any(
        s.mig_holders[n] is not r for n, r in holders.items()
    ):
        raise InvariantViolation("the jobs holding MIG instances disagree with their placements")
    for (i, gpu), on_gpu in carved.items():
        node = s.capacity.nodes[i]
        table = s.mig_table(i)
        if table is None or gpu not in node.hardware.mig:
            raise InvariantViolation(f"GPU {gpu} of {node.name} has MIG instances, not in MIG mode")
        if (i, gpu) in owner or (i, gpu) in s.shares:
            raise InvariantViolation(f"GPU {gpu} of {node.name} is in MIG mode and held otherwise")
        held = compute = 0
        counts: dict[str, int] = {}
        for name, (profile_name, start) in on_gpu.items():
            profile = table.profile(profile_name)
            if profile is None or start not in profile.starts:
                raise InvariantViolation(
                    f"{name}: {profile_name} at slice {start} is no placement of {table.model}"
                )
            span = ((1 << profile.slices) - 1) << start
            if held & span:
                raise InvariantViolation(f"GPU {gpu} of {node.name}: MIG instances overlap")
            held |= span
            compute += profile.compute
            counts[profile_name] = counts.get(profile_name, 0) + 1
            if counts[profile_name] > profile.most:
                raise InvariantViolation(f"GPU {gpu} of {node.name}: too many {profile_name}")
        if compute > COMPUTE_SLICES:
            raise InvariantViolation(f"GPU {gpu} of {node.name}: {compute} compute slices held")


def _check_free(s: Books, owner: dict[tuple[int, int], str]) -> None:
    """Each node's free GPUs are those neither held, failed nor in MIG mode; the GPUs the
    placers count out are the failed ones and those in MIG mode, or all of a cordoned
    node's."""
    total = 0
    for i in s.capacity.present_indices():
        size = s.capacity.nodes[i].size
        mig = s.capacity.nodes[i].hardware.mig_mask
        out = full_mask(size) if i in s.cordoned else s.unhealthy.get(i, 0) | mig
        if s.capacity.unusable[i] != out:
            raise InvariantViolation(
                f"node {s.capacity.nodes[i].name}: unusable GPUs disagree with failures,"
                " cordon and MIG mode"
            )
        held_mask = 0
        for gpu in range(size):
            if (i, gpu) in owner or (i, gpu) in s.shares:
                held_mask |= 1 << gpu
        expected = full_mask(size) & ~held_mask & ~s.unhealthy.get(i, 0) & ~mig
        if i in s.cordoned:
            expected = 0
        if s.capacity.free[i] != expected:
            raise InvariantViolation(f"node {s.capacity.nodes[i].name}: free GPUs disagree")
        total += expected.bit_count()
    if total != s.capacity.total_free:
        raise InvariantViolation("the free-GPU total disagrees with the nodes")
    mig_nodes = {
        i: s.capacity.nodes[i].hardware.mig_mask
        for i in s.capacity.present_indices()
        if s.capacity.nodes[i].hardware.mig
    }
    if mig_nodes != s.mig_nodes:
        raise InvariantViolation("the nodes with GPUs in MIG mode disagree with the nodes")
    by_type: dict[str, int] = {}
    for i in s.capacity.present_indices():
        key = s.capacity.type_key(i)
        by_type[key] = by_type.get(key, 0) + s.capacity.free[i].bit_count()
    counted = {key: n for key, n in s.capacity.free_by_type.items() if n}
    if {key: n for key, n in by_type.items() if n} != counted:
        raise InvariantViolation("the free GPUs by type disagree with the nodes")


def _check_waiting(s: Books, waiting: Waiting) -> None:
    """Waiting jobs are filed where they belong, in the order's key; partial holds and the
    reservation agree with the jobs."""
    lists = waiting.lists
    for key, entries in lists.lists.items():
        for entry in entries:
            name = entry[-1]
            rec = s.jobs[name]
            if rec.state is not JobState.PENDING:
                raise InvariantViolation(f"{name} is queued in {key[0]} but not pending")
            level = lists.level.get(name)
            if level is None or entry[:-1] != waiting.order.job_key(rec, level):
                raise InvariantViolation(f"{name} is filed at the wrong level or key")
            if lists.filed.get(name) != key or rec.spec.queue != key[0]:
                raise InvariantViolation(f"{name} is filed under the wrong queue or shape")
        if entries != sorted(entries):
            raise InvariantViolation(f"the list {key} is out of order")
    partial = {
        name: len(rec.partial) * rec.spec.gpus_per_worker
        for name, rec in s.jobs.items()
        if rec.partial
    }
    if partial != s.held_waiting:
        raise InvariantViolation("the GPUs held by partial gangs disagree with the jobs")
    if s.reservation is not None:
        holder = s.jobs.get(s.reservation.job)
        if holder is None or holder.state is not JobState.PENDING:
            raise InvariantViolation("a reservation is held for a job that is not pending")


def _check_dependencies(s: Books, waiting: Waiting) -> None:
    """A pending job is filed in a waiting list or waits for jobs it runs after, never both;
    those are live jobs of its `after`, and each job's waiters are those waiting for it."""
    deps = s.deps
    waiters: dict[str, dict[str, None]] = {}
    for name, unmet in deps.unmet.items():
        rec = s.jobs.get(name)
        if rec is None or rec.state is not JobState.PENDING or name in waiting.lists.filed:
            raise InvariantViolation(f"{name} waits for jobs it runs after but is not held so")
        if not unmet or any(d not in rec.spec.after for d in unmet):
            raise InvariantViolation(f"{name} waits for {unmet}, not jobs of its after")
        for dep in unmet:
            other = s.jobs.get(dep.job)
            if other is None or other.state.terminal:
                raise InvariantViolation(f"{name} waits for {dep.job}, which is not live")
            waiters.setdefault(dep.job, {})[name] = None
    if {k: set(v) for k, v in waiters.items()} != {k: set(v) for k, v in deps.waiters.items()}:
        raise InvariantViolation("each job's waiters disagree with what the waiting jobs wait for")
    for rec in s.jobs.values():
        filed = rec.name in waiting.lists.filed or deps.blocked(rec.name)
        if rec.state is JobState.PENDING and not filed:
            raise InvariantViolation(f"{rec.name} is pending but neither filed nor waiting")
