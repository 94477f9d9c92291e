"""How fast a model runs on each GPU type, as the performance catalog says: the `type_speed` a
driver hands the scheduler core for its choice among GPU types."""

from __future__ import annotations

from collections.abc import Iterable

from toposched.perf.errors import PerfError
from toposched.perf.model import PerfModel
from toposched.perf.specs import REFERENCE_GPU
from toposched.topology.cluster import Node
from toposched.topology.resources import type_key


class TypeSpeeds:
    """The catalog's name for a node's GPU type, and a model's throughput on a type relative to
    the reference GPU (V100): `speeds(model, gpu_type)` is the `type_speed` the scheduler
    weighs GPU types by.

    A node's type is its `hardware.gpu_type` if the catalog has it, else the longest catalog
    name it starts with (`V100M32` -> V100), else the type its topology's name implies
    (`dgx1-v100` -> V100, `catalog.gpu_for`): so types the catalog does not know (openb's
    G2, G3 and A10, PAI's MISC) run as the reference GPU."""

    def __init__(self, perf: PerfModel) -> None:
        self.perf = perf
        self._names = sorted(perf.catalog.gpus, key=len, reverse=True)
        self._catalog: dict[tuple[str, str], str] = {}
        self._speed: dict[tuple[str | None, str], float] = {}

    def catalog_type(self, gpu_type: str, topology_name: str = "") -> str:
        """The catalog's GPU type for a node's `hardware.gpu_type` (and its topology's name)."""
        key = (gpu_type, topology_name)
        found = self._catalog.get(key)
        if found is None:
            folded = type_key(gpu_type)
            match = next((n for n in self._names if folded and folded.startswith(n)), None)
            if match is not None:
                found = self.perf.catalog.gpus[match].name
            else:
                found = self.perf.catalog.gpu_for(topology_name)
            self._catalog[key] = found
        return found

    def of_node(self, node: Node) -> str:
        return self.catalog_type(node.hardware.gpu_type, node.topology.name)

    def __call__(self, model: str | None, gpu_type: str) -> float:
        """Throughput of `model` on one GPU of `gpu_type` (a node's type or a catalog name)
        over that on the reference GPU; a model the catalog does not know goes by the types'
        own relative speeds."""
        key = (model, gpu_type)
        found = self._speed.get(key)
        if found is None:
            catalog = self.perf.catalog
            gpu = catalog.gpu(self.catalog_type(gpu_type))
            try:
                spec = None if model is None else catalog.model(model)
            except PerfError:
                spec = None
            if spec is None:
                found = gpu.speed / catalog.gpu(REFERENCE_GPU).speed
            else:
                found = catalog.throughput(spec, gpu) / catalog.throughput(
                    spec, catalog.gpu(REFERENCE_GPU)
                )
            self._speed[key] = found
        return found

    def slowest(self, model: str | None, types: Iterable[str]) -> str:
        """The type `model` runs slowest on: a gang over several types goes at its pace."""
        return min(sorted(set(types)), key=lambda t: self(model, t))
