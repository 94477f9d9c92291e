"""The catalog: the shipped YAML files plus users' own, merged, with lookups that explain misses."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from types import MappingProxyType
from typing import Any, TypeVar

from toposched.perf.errors import CatalogError, PerfError
from toposched.perf.loading import CatalogData, Origin, parse_catalog
from toposched.perf.specs import (
    REFERENCE_GPU,
    FrameworkSpec,
    GpuSpec,
    ModelSpec,
    NetworkProfile,
    Precision,
)

BUILTIN_FILES = ("gpus.yaml", "models.yaml", "networks.yaml", "frameworks.yaml")

T = TypeVar("T")

# Cloud instance families whose names do not mention their GPU type (AWS's naming).
INSTANCE_GPUS = {"g4dn": "T4", "p3": "V100", "p3dn": "V100", "p4d": "A100", "p5": "H100"}


def _key(name: str) -> str:
    """Names match whatever their case: `VGG16`, `vgg16`; `v100`, `V100`."""
    return name.strip().casefold()


def builtin_texts() -> list[tuple[str, str]]:
    """(source, text) of each catalog file shipped inside the package."""
    root = resources.files("toposched.perf").joinpath("catalog")
    return [
        (f"toposched/perf/catalog/{name}", root.joinpath(name).read_text(encoding="utf-8"))
        for name in BUILTIN_FILES
    ]


@dataclass(frozen=True)
class Catalog:
    """Models, GPU types, network profiles, frameworks and model aliases, keyed by folded name.

    Build it with `Catalog.load()`; later files replace earlier entries of the same name.
    """

    models: Mapping[str, ModelSpec]
    gpus: Mapping[str, GpuSpec]
    networks: Mapping[str, NetworkProfile]
    frameworks: Mapping[str, FrameworkSpec]
    aliases: Mapping[str, str]

    @classmethod
    def load(
        cls,
        extra: Iterable[tuple[str, str]] = (),
        *,
        aliases: Mapping[str, str] | None = None,
        builtin: bool = True,
    ) -> Catalog:
        """The shipped catalog, extended by `extra` (source name, YAML text) pairs, in order.

        `aliases` maps further names (a trace's model names, say) to catalog models.
        Reading a user's file is the caller's business: this package does no other I/O.
        """
        texts = [*(builtin_texts() if builtin else []), *extra]
        merged = CatalogData()
        for source, text in texts:
            part = parse_catalog(text, source=source)
            for section in ("models", "gpus", "networks", "frameworks", "aliases"):
                target: dict[str, object] = getattr(merged, section)
                for name, value in getattr(part, section).items():
                    target[_key(name)] = value
                    merged.origins[(section, _key(name))] = part.origins[(section, name)]
        for alias, model in (aliases or {}).items():
            merged.aliases[_key(alias)] = model
            merged.origins[("aliases", _key(alias))] = ("aliases given by the caller", None)
        _check(merged)
        return cls(
            models=MappingProxyType(merged.models),
            gpus=MappingProxyType(merged.gpus),
            networks=MappingProxyType(merged.networks),
            frameworks=MappingProxyType(merged.frameworks),
            aliases=MappingProxyType({a: _key(m) for a, m in merged.aliases.items()}),
        )

    def model(self, name: str) -> ModelSpec:
        key = _key(name)
        spec = self.models.get(self.aliases.get(key, key))
        if spec is None:
            known = ", ".join(sorted(m.name for m in self.models.values()))
            raise PerfError(
                f"unknown model {name!r}; known models: {known} "
                "(map other names to one of these with an alias)",
                field="model",
            )
        return spec

    def gpu(self, name: str) -> GpuSpec:
        return _lookup(self.gpus, name, "GPU type", "gpu_type", lambda g: g.name)

    def network(self, name: str) -> NetworkProfile:
        return _lookup(self.networks, name, "network profile", "network", lambda n: n.name)

    def framework(self, name: str) -> FrameworkSpec:
        return _lookup(self.frameworks, name, "framework", "framework", lambda f: f.name)

    def gpu_for(self, topology_name: str) -> str:
        """The GPU type a topology's name mentions (`dgx1-v100` -> V100) or its cloud instance
        family implies (`g4dn-12xlarge` -> T4), else the reference."""
        tokens = [token.casefold() for token in re.split(r"[^0-9A-Za-z]+", topology_name)]
        for key, gpu in self.gpus.items():
            if key in tokens:
                return gpu.name
        for token in tokens:
            implied = INSTANCE_GPUS.get(token)
            if implied is not None and _key(implied) in self.gpus:
                return self.gpus[_key(implied)].name
        return REFERENCE_GPU

    def with_network(self, profile: NetworkProfile) -> Catalog:
        """This catalog plus (or with a replaced) network profile, e.g. one made from a cluster."""
        networks = {**self.networks, _key(profile.name): profile}
        return replace(self, networks=MappingProxyType(networks))

    def with_entries(
        self,
        *,
        models: Iterable[ModelSpec] = (),
        gpus: Iterable[GpuSpec] = (),
        networks: Iterable[NetworkProfile] = (),
        frameworks: Iterable[FrameworkSpec] = (),
    ) -> Catalog:
        """This catalog with entries added or replaced by name (a fit's results, say)."""

        def merged(table: Mapping[str, T], new: Iterable[T], name: Callable[[T], str]) -> Any:
            return MappingProxyType({**table, **{_key(name(v)): v for v in new}})

        return replace(
            self,
            models=merged(self.models, models, lambda m: m.name),
            gpus=merged(self.gpus, gpus, lambda g: g.name),
            networks=merged(self.networks, networks, lambda n: n.name),
            frameworks=merged(self.frameworks, frameworks, lambda f: f.name),
        )

    def throughput(self, model: ModelSpec, gpu: GpuSpec) -> float:
        """Single-GPU samples/s of `model` on `gpu` at the catalog's reference batch (64).

        Measured where the catalog has it; else scaled by relative speed from a GPU type that
        was measured (the reference V100 first); else from FLOPs on the reference GPU, or for
        a mixed-precision model on a GPU type with an fp16 peak, from FLOPs on that GPU.
        """
        scaled = self._scaled(model.throughput, model, gpu, inverse=False)
        if scaled is not None:
            return scaled
        # A training step is about three forward passes of work (forward, two for backward).
        per_sample_tflop = 3.0 * model.forward_gflops / 1e3
        if model.precision is Precision.MIXED and gpu.fp16_tflops is not None:
            return gpu.fp16_tflops * model.flops_efficiency / per_sample_tflop
        ref = self.gpus[_key(REFERENCE_GPU)]
        reference = ref.fp32_tflops * model.flops_efficiency / per_sample_tflop
        return reference * gpu.speed / ref.speed

    def fixed_s(self, model: ModelSpec, gpu: GpuSpec) -> float:
        """Seconds of a 1-GPU step that do not grow with the batch; 0 where none was measured.

        A GPU type without a measurement takes another's, scaled by their relative speed.
        """
        scaled = self._scaled(model.fixed_s, model, gpu, inverse=True)
        return 0.0 if scaled is None else scaled

    def _scaled(
        self, measured: Mapping[str, float], model: ModelSpec, gpu: GpuSpec, *, inverse: bool
    ) -> float | None:
        """A per-GPU-type measurement of `model` for `gpu`: its own, else one scaled by speed."""
        table = {_key(g): v for g, v in measured.items()}
        own = table.get(_key(gpu.name))
        if own is not None:
            return own
        for gpu_key in (_key(REFERENCE_GPU), *table):
            if gpu_key in table:
                ratio = _speed(gpu, model) / _speed(self.gpus[gpu_key], model)
                return table[gpu_key] / ratio if inverse else table[gpu_key] * ratio
        return None


def _speed(gpu: GpuSpec, model: ModelSpec) -> float:
    """Relative speed for scaling measurements: the fp16 peak for mixed precision where known."""
    if model.precision is Precision.MIXED and gpu.fp16_tflops is not None:
        return gpu.fp16_tflops / gpu.fp32_tflops * gpu.speed
    return gpu.speed


def _lookup(
    table: Mapping[str, T], name: str, what: str, field: str, label: Callable[[T], str]
) -> T:
    spec = table.get(_key(name))
    if spec is None:
        names = ", ".join(sorted(label(v) for v in table.values()))
        raise PerfError(f"unknown {what} {name!r}; known: {names}", field=field)
    return spec


def _check(data: CatalogData) -> None:
    """Cross-file checks: references resolve, the reference GPU exists."""

    def fail(message: str, origin: Origin, field: str) -> CatalogError:
        return CatalogError(message, source=origin[0], line=origin[1], field=field)

    if _key(REFERENCE_GPU) not in data.gpus:
        raise CatalogError(f"the catalog must define the reference GPU type {REFERENCE_GPU}")
    reference = data.gpus[_key(REFERENCE_GPU)]
    if reference.speed != 1.0:
        origin = data.origins[("gpus", _key(REFERENCE_GPU))]
        raise fail(
            f"the reference GPU's speed must be 1, got {reference.speed:g}",
            origin,
            f"gpus.{reference.name}.speed",
        )
    for key, model in data.models.items():
        for gpu in model.throughput:
            if _key(gpu) not in data.gpus:
                known = ", ".join(sorted(g.name for g in data.gpus.values()))
                raise fail(
                    f"unknown GPU type {gpu!r}; known: {known}",
                    data.origins[("models", key)],
                    f"models.{model.name}.throughput.{gpu}",
                )
    for alias, target in data.aliases.items():
        if _key(target) not in data.models:
            raise fail(
                f"alias {alias!r} names no model: {target!r}",
                data.origins[("aliases", alias)],
                f"aliases.{alias}",
            )
        if alias in data.models and alias != _key(target):
            raise fail(
                f"alias {alias!r} would hide the model of that name",
                data.origins[("aliases", alias)],
                f"aliases.{alias}",
            )
