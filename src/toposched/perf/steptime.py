"""The performance model as a placer's `StepTime`, and the fastest placement it predicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from toposched.perf.errors import PerfError
from toposched.perf.model import DEFAULT_BATCH, DEFAULT_FRAMEWORK, DEFAULT_NETWORK, PerfModel
from toposched.perf.typespeeds import TypeSpeeds
from toposched.placement.by_model import ModelSpread, Share, StepTime
from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, Placement, place_gang
from toposched.topology.cluster import Node, Tier
from toposched.topology.node import NodeTopology


def step_time(
    perf: PerfModel,
    gpu_type: str,
    *,
    framework: str = DEFAULT_FRAMEWORK,
    network: str = DEFAULT_NETWORK,
    batch: int = DEFAULT_BATCH,
) -> StepTime:
    """Seconds per step of a model on a placement, from `perf`; None for a model its catalog
    does not know (the placer then keeps its own rule)."""
    known: dict[str, bool] = {}

    def predict(model: str, shares: Sequence[Share], tier: Tier) -> float | None:
        ok = known.get(model)
        if ok is None:
            try:
                perf.catalog.model(model)
                ok = True
            except PerfError:
                ok = False
            known[model] = ok
        if not ok:
            return None
        estimate = perf.estimate(
            model, gpu_type, shares, framework=framework, network=network, tier=tier, batch=batch
        )
        return estimate.iteration_s

    return predict


def mixed_step_time(
    perf: PerfModel,
    speeds: TypeSpeeds,
    type_of: Mapping[NodeTopology, str],
    *,
    framework: str = DEFAULT_FRAMEWORK,
    network: str = DEFAULT_NETWORK,
) -> StepTime:
    """A placer's step time where GPU types differ: each prediction uses the slowest catalog
    type among the nodes of the placement's topologies (`type_of`: every node of a topology
    counted at its slowest type, since a step time sees topologies, not nodes). `type_of` may
    grow as nodes join (a Kubernetes cluster); given one type from the start, predictions are
    that type's own step time."""
    per_type: dict[str, StepTime] = {}

    def of_type(gpu_type: str) -> StepTime:
        found = per_type.get(gpu_type)
        if found is None:
            found = step_time(perf, gpu_type, framework=framework, network=network)
            per_type[gpu_type] = found
        return found

    types = set(type_of.values())
    if len(types) == 1:
        return of_type(types.pop())

    def predict(model: str, shares: Sequence[Share], tier: Tier) -> float | None:
        gpu_type = speeds.slowest(model, (type_of[topology] for topology, _ in shares))
        return of_type(gpu_type)(model, shares, tier)

    return predict


def fastest(predict: StepTime, model: str, nodes: Sequence[Node], gpus: int) -> float | None:
    """The shortest predicted step of `gpus` 1-GPU workers on the empty `nodes` of one rack
    (as `PerfModel.ideal` judges), over every shape `ModelSpread` tries (None: the model is
    unknown, or no rack holds the GPUs)."""
    cap = Capacity(nodes)
    place = ModelSpread(place_gang, predict)
    found = place(cap, GangRequest(gpus, 1, Tier.RACK, model=model), {t: 1.0 for t in Tier})
    if not isinstance(found, Placement):
        return None
    shares = [
        (cap.nodes[cap.index[node]].topology, share) for node, share in found.gpus_by_node().items()
    ]
    return predict(model, shares, found.tier)
