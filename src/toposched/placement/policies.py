"""The registry of named placement policies: one module each, one line here.

A policy picks k GPUs in one node (`toposched place`, through `node`); the scheduler names the
same entry for its node and GPU choice, through `gang` (a whole gang on a cluster) or `worker`
(one worker at a time, for policies without gang admission). A policy that cannot do one of
these leaves it None, and a scheduler policy that asks for it is refused when it is built.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from toposched.placement import gang, index_order, pair_score, random_pick, topology_aware
from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, Placement, Shortfall, WorkerSlot
from toposched.placement.random_pick import Room
from toposched.placement.request import NodePlacement, NodeRequest, PlacementError
from toposched.topology.cluster import Eligibility, Tier
from toposched.topology.resources import WorkerFit


class NodePolicy(Protocol):
    def place(self, request: NodeRequest) -> NodePlacement: ...


class GangPlacer(Protocol):
    """A whole gang on the free GPUs of `cap`, minus `exclude` (node index -> GPU mask)."""

    def __call__(
        self,
        cap: Capacity,
        request: GangRequest,
        network: Mapping[Tier, float],
        exclude: Mapping[int, int] | None = None,
    ) -> Placement | Shortfall: ...


WorkerPicker = Callable[
    [Capacity, int, Eligibility, WorkerFit, random.Random, Room], WorkerSlot | None
]


@dataclass(frozen=True)
class PlacementPolicy:
    name: str
    summary: str
    node: Callable[..., NodePolicy]
    gang: GangPlacer | None = None
    worker: WorkerPicker | None = None


def _registry(*policies: PlacementPolicy) -> dict[str, PlacementPolicy]:
    return {p.name: p for p in policies}


POLICIES: dict[str, PlacementPolicy] = _registry(
    PlacementPolicy(
        "topology",
        "exact best ring, then keep rings for later, then pair bandwidth; across nodes fewest "
        "nodes, lowest tier, best ring, best fit",
        topology_aware.TopologyAware,
        gang=gang.place_gang,
    ),
    PlacementPolicy(
        "index-order",
        "lowest free GPU indices; across nodes first fit in node order",
        index_order.IndexOrder,
        gang=index_order.first_fit,
    ),
    PlacementPolicy(
        "random",
        "uniform random free GPUs (seeded); one worker at a time on a random node with room",
        random_pick.RandomPick,
        worker=random_pick.random_worker,
    ),
    PlacementPolicy(
        "pair-score",
        "go-gpuallocator best effort: best partition by pair scores",
        pair_score.PairScore,
    ),
)


def placement_policy(name: str) -> PlacementPolicy:
    """The registered policy `name`; an unknown name lists the known ones."""
    info = POLICIES.get(name)
    if info is None:
        raise PlacementError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}")
    return info


def make_policy(name: str, params: Mapping[str, Any] | None = None) -> NodePolicy:
    """Build the policy `name` with `params`; unknown names or parameters list the valid ones."""
    info = placement_policy(name)
    params = dict(params or {})
    known = {f.name: f for f in fields(info.node) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(params) - set(known))
    if unknown:
        valid = ", ".join(known) or "none"
        raise PlacementError(f"policy {name!r} has no parameter {unknown[0]!r}; valid: {valid}")
    for key, value in params.items():
        expected = known[key].type
        if expected in ("int", int) and (isinstance(value, bool) or not isinstance(value, int)):
            raise PlacementError(
                f"policy {name!r} parameter {key!r} must be an integer, got {value!r}"
            )
    if "keep_sizes" in params:
        sizes = params["keep_sizes"]
        if not isinstance(sizes, list | tuple) or not all(
            isinstance(s, int) and not isinstance(s, bool) and s >= 2 for s in sizes
        ):
            raise PlacementError(f"keep_sizes must be a list of integers >= 2, got {sizes!r}")
        params["keep_sizes"] = tuple(sizes)
    return info.node(**params)
