"""The predicted speed of a job's placement, from the performance model: what `submit`, `get`,
`list --wide` and the dashboard show beside the ring, and its share of the best placement's."""

from __future__ import annotations

import threading
from typing import Any

from toposched.perf import Catalog, PerfError, PerfModel
from toposched.topology.cluster import Node

# The model a job that names none is predicted as: a data-parallel CNN of middling size, whose
# speed depends on the ring as most of what the teams train does (docs/server.md).
DEFAULT_MODEL = "resnet50"


class Predictor:
    """Throughput of a placement on this server's node, and of the best placement of as many
    GPUs there, for a job's model (`spec.model`, else DEFAULT_MODEL); answers are memoised."""

    def __init__(self, node: Node, catalog: Catalog | None = None) -> None:
        self.node = node
        self._catalog = catalog
        self._perf: PerfModel | None = None
        self._lock = threading.Lock()  # the model's memo is shared by the request threads
        self._gpu_type: str | None = None

    @property
    def perf(self) -> PerfModel:
        if self._perf is None:  # loaded on first use: a server that is never asked pays nothing
            self._perf = PerfModel(self._catalog)
        return self._perf

    def check_model(self, name: str | None) -> str | None:
        """Why `name` cannot be predicted (not in the catalog), or None."""
        if name is None:
            return None
        try:
            self.perf.catalog.model(name)
        except PerfError as err:
            return err.reason
        return None

    def gpu_type(self) -> str:
        """The catalog's name for the node's GPUs: as found, else what its topology implies."""
        if self._gpu_type is None:
            found = self.node.hardware.gpu_type
            catalog = self.perf.catalog
            self._gpu_type = (
                found
                if found and found.casefold() in catalog.gpus
                else catalog.gpu_for(self.node.topology.name)
            )
        return self._gpu_type

    def of(
        self, spec: dict[str, Any], placement: list[dict[str, Any]] | None
    ) -> dict[str, Any] | None:
        """`predicted` of a job's answer: model, samples/s now and at best, and the share;
        None without GPUs placed (or with a model the catalog has lost since)."""
        gpus = tuple(sorted(g for slot in placement or () for g in slot["gpus"]))
        if not gpus:  # none held, or a job of CPUs alone: no speed to predict
            return None
        model = spec.get("model") or DEFAULT_MODEL
        topology = self.node.topology
        try:
            with self._lock:
                gpu_type = self.gpu_type()
                now = self.perf.estimate(model, gpu_type, [(topology, gpus)])
                best = self.perf.ideal(model, gpu_type, len(gpus), topology)
        except PerfError:
            return None
        return {
            "model": model,
            "samples_per_s": round(now.throughput, 1),
            "best_samples_per_s": round(best.throughput, 1),
            "share": round(now.throughput / best.throughput, 3),
        }
