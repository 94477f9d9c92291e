"""The performance model as a placer's `StepTime`, and the fastest placement it predicts."""

from __future__ import annotations

from collections.abc import Sequence

from toposched.perf.errors import PerfError
from toposched.perf.model import DEFAULT_BATCH, DEFAULT_FRAMEWORK, DEFAULT_NETWORK, PerfModel
from toposched.placement.by_model import ModelSpread, Share, StepTime
from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, Placement, place_gang
from toposched.topology.cluster import Node, Tier


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
