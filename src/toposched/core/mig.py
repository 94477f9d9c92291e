"""Where a MIG instance goes: placement/mig.py's choice over the GPUs in MIG mode of the nodes
the job may use, those with its CPUs and memory free."""

from __future__ import annotations

from toposched.core.books import Books
from toposched.core.job import JobSpec
from toposched.placement.gang import Placement, Shortfall, WorkerSlot
from toposched.placement.mig import MigGpu, choose
from toposched.topology.cluster import Tier


class MigPlacer:
    """Places jobs that ask a MIG profile (JobSpec.mig)."""

    def __init__(self, books: Books) -> None:
        self.books = books

    def place(self, spec: JobSpec) -> Placement | Shortfall:
        books = self.books
        cap = books.capacity
        gpus: list[MigGpu] = []
        for i in cap.present_indices():
            if i in books.cordoned or not spec.where.admits(cap.nodes[i], cap.labels[i]):
                continue
            if cap.room(i, spec.fit) == 0:
                continue
            gpus += books.mig_gpus(i)
        choice = choose(gpus, spec.mig)
        if choice is None:
            return Shortfall(f"no GPU in MIG mode has room for a {spec.mig}{spec.fit.asked()}")
        slot = WorkerSlot(cap.nodes[choice.node].name, (choice.gpu,), choice.start)
        return Placement((slot,), None, Tier.NODE)
