"""The registry of named node-placement policies, each with typed parameters."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Protocol

from toposched.placement.baselines import IndexOrder, PairScore, RandomPick
from toposched.placement.request import NodePlacement, NodeRequest, PlacementError
from toposched.placement.topology_aware import TopologyAware


class NodePolicy(Protocol):
    def place(self, request: NodeRequest) -> NodePlacement: ...


@dataclass(frozen=True)
class PolicyInfo:
    name: str
    summary: str
    factory: Callable[..., NodePolicy]


POLICIES: dict[str, PolicyInfo] = {
    "topology": PolicyInfo(
        "topology", "exact best ring, then keep rings for later, then pair bandwidth", TopologyAware
    ),
    "index-order": PolicyInfo("index-order", "lowest free GPU indices", IndexOrder),
    "random": PolicyInfo("random", "uniform random free GPUs (seeded)", RandomPick),
    "pair-score": PolicyInfo(
        "pair-score", "go-gpuallocator best effort: best partition by pair scores", PairScore
    ),
}


def make_policy(name: str, params: Mapping[str, Any] | None = None) -> NodePolicy:
    """Build the policy `name` with `params`; unknown names or parameters list the valid ones."""
    info = POLICIES.get(name)
    if info is None:
        raise PlacementError(f"unknown policy {name!r}; known policies: {', '.join(POLICIES)}")
    params = dict(params or {})
    known = {f.name: f for f in fields(info.factory) if f.init}  # type: ignore[arg-type]
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
    return info.factory(**params)
