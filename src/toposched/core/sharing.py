"""Where a share of one GPU goes: the policy's share placer over the nodes the job may use,
against the workload submitted so far."""

from __future__ import annotations

import random

from toposched.core.books import Books
from toposched.core.job import JobSpec
from toposched.placement.gang import Placement, Shortfall, WorkerSlot
from toposched.placement.sharing import NEEDS_WORKLOAD, Ask, SharePolicy, Workload, share_policy
from toposched.topology.cluster import Tier

REFRESH = 1.05  # the target workload is counted again once 5% more workers were submitted


class SharePlacer:
    """Places jobs that ask part of one GPU by share policy `name`. FGD's measure is taken
    against the kinds of workers submitted so far (Books.tasks), counted again as they grow
    by 5%: counting on every submission would drop the measure's memo at every share."""

    def __init__(self, books: Books, name: str, rng: random.Random) -> None:
        self.books = books
        self.name = name
        self.rng = rng
        self.counted = 0
        self.policy: SharePolicy | None = None

    def _current(self) -> SharePolicy:
        total = sum(self.books.tasks.values())
        if self.policy is None or (self.name in NEEDS_WORKLOAD and total >= self.counted * REFRESH):
            workload = Workload.typical(self.books.tasks) if total else None
            self.policy = share_policy(self.name, workload, self.rng)
            self.counted = total
        return self.policy

    def place(self, spec: JobSpec) -> Placement | Shortfall:
        books = self.books
        cap = books.capacity
        ask = Ask(1, spec.gpu_milli, spec.gpu_share_mib, spec.cpus, spec.memory)
        rooms = [
            books.room_for_shares(i)
            for i in cap.present_indices()
            if i not in books.cordoned and spec.where.admits(cap.nodes[i], cap.labels[i])
        ]
        if not rooms:
            return Shortfall("no node it may use for a share of a GPU")
        choice = self._current().place(rooms, ask)
        if choice is None:
            return Shortfall(f"no GPU has {describe_share(spec)} left{spec.fit.asked()}")
        node = cap.nodes[choice.node].name
        return Placement((WorkerSlot(node, choice.gpus),), None, Tier.NODE)


def describe_share(spec: JobSpec) -> str:
    """`0.25 of a GPU`, `0.25 of a GPU and 4096 MiB of its memory`, `4096 MiB of GPU memory`."""
    parts = []
    if spec.gpu_milli:
        parts.append(f"{spec.gpu_milli / 1000:g} of a GPU")
    if spec.gpu_share_mib:
        parts.append(f"{spec.gpu_share_mib} MiB of {'its' if spec.gpu_milli else 'GPU'} memory")
    return " and ".join(parts)
