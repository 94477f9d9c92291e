"""One GPU type per gang: a placer tried on each acceptable type, and the type chosen by a rule
the scheduler gives (docs/placement.md, "GPU types")."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import lru_cache

from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, Placement, Shortfall
from toposched.placement.policies import GangPlacer
from toposched.topology.cluster import Eligibility, Tier

# (the capacity, the request, the best placement on each GPU type that has one) -> the type.
TypeChooser = Callable[[Capacity, GangRequest, Mapping[str, Placement]], str]


def placement_key(cap: Capacity, placement: Placement) -> tuple[float, ...]:
    """The placement objective across types: lowest tier, fewest nodes, best ring."""
    nodes = len(placement.gpus_by_node())
    ring = placement.bandwidth_gbps
    return (placement.tier, nodes, -(ring if ring is not None else float("inf")))


def first_in_node_order(cap: Capacity, request: GangRequest, found: Mapping[str, Placement]) -> str:
    """Type-blind: the type whose placement starts on the lowest-numbered node."""
    return min(found, key=lambda t: (min(cap.index[s.node] for s in found[t].workers), t))


def one_type_each(cap: Capacity, request: GangRequest) -> list[str]:
    """The GPU types a gang is tried on one at a time: each type it accepts, where it runs on
    one type and the cluster has two or more of those (else none: it is taken as it is)."""
    if request.mixed_types or len(cap.gpu_types) < 2:
        return []
    fit = request.where.fit
    types = sorted(t for t in cap.gpu_types if fit.accepts_key(t))
    return types if len(types) > 1 else []


@dataclass
class OneType:
    """`place` on each GPU type the request accepts, alone, and the type `choose` picks; a
    request that accepts mixed types, or a cluster of one type, goes to `place` as it is."""

    place: GangPlacer
    choose: TypeChooser

    def __call__(
        self,
        cap: Capacity,
        request: GangRequest,
        network: Mapping[Tier, float],
        exclude: Mapping[int, int] | None = None,
    ) -> Placement | Shortfall:
        types = one_type_each(cap, request)
        if not types:
            return self.place(cap, request, network, exclude)
        found: dict[str, Placement] = {}
        short: dict[str, Shortfall] = {}
        for gpu_type in types:
            alone = replace(request, where=narrowed(request.where, gpu_type))
            result = self.place(cap, alone, network, exclude)
            if isinstance(result, Placement):
                found[gpu_type] = result
            else:
                short[gpu_type] = result
        if not found:
            each = "; ".join(f"on {cap.type_name(t)} nodes, {s.reason}" for t, s in short.items())
            return Shortfall(f"a gang of one GPU type (mixed_types is off): {each}")
        return found[self.choose(cap, request, found)]


@lru_cache(maxsize=4096)
def narrowed(where: Eligibility, gpu_type: str) -> Eligibility:
    """`where` on GPU type `gpu_type` alone: one object per pair, since the placers' caches
    are keyed by it and finding the same object is cheaper than comparing an equal one."""
    return replace(where, gpu_types=(gpu_type,))
