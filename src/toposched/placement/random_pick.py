"""The `random` policy: uniform random free GPUs from a seeded generator, one node's worth or one
worker at a time (a baseline: kube-scheduler without topology or gang plugins)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from toposched.placement.capacity import Capacity
from toposched.placement.gang import WorkerSlot
from toposched.placement.request import NodePlacement, NodeRequest
from toposched.placement.ring import placed
from toposched.placement.tables import from_mask
from toposched.topology.cluster import Eligibility
from toposched.topology.resources import WorkerFit

Room = dict[tuple[int, Eligibility, WorkerFit], list[int]]


@dataclass
class RandomPick:
    """The `random` policy: a uniform draw among free GPUs from a seeded generator."""

    seed: int = 0
    rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def place(self, request: NodeRequest) -> NodePlacement:
        return placed(request.topology, tuple(self.rng.sample(request.free, request.gpus)))


def random_worker(
    cap: Capacity, g: int, where: Eligibility, fit: WorkerFit, rng: random.Random, room: Room
) -> WorkerSlot | None:
    """`g` random free GPUs of a random node that has them, that `where` admits and whose CPUs
    and memory hold a worker of `fit`; `room` caches, per `g`, eligibility and fit, the nodes that
    had the GPUs (a caller binding many workers in one pass keeps it between calls)."""
    nodes = room.get((g, where, fit))
    if nodes is None:
        ruled_out = cap.ruled_out(where)
        nodes = room[(g, where, fit)] = [
            i for i in cap.present_indices() if cap.free[i].bit_count() >= g and i not in ruled_out
        ]
    while nodes:
        k = rng.randrange(len(nodes))
        i = nodes[k]
        if cap.free[i].bit_count() < g or cap.room(i, fit) == 0:  # filled since the list was made
            nodes[k] = nodes[-1]
            nodes.pop()
            continue
        gpus = rng.sample(from_mask(cap.free[i]), g)
        return WorkerSlot(cap.nodes[i].name, tuple(sorted(gpus)))
    return None
