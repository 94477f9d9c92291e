"""The catalog: the shipped YAML files plus users' own, merged, with lookups that explain misses."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from importlib import resources
from types import MappingProxyType
from typing import TypeVar

from toposched.perf.errors import CatalogError, PerfError
from toposched.perf.loading import CatalogData, Origin, parse_catalog
from toposched.perf.specs import (
    REFERENCE_GPU,
    FrameworkSpec,
    GpuSpec,
    ModelSpec,
    NetworkProfile,
)

BUILTIN_FILES = ("gpus.yaml", "models.yaml", "networks.yaml", "frameworks.yaml")

T = TypeVar("T")


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
        """The GPU type a topology's name mentions (`dgx1-v100` -> V100), else the reference."""
        tokens = {token.casefold() for token in re.split(r"[^0-9A-Za-z]+", topology_name)}
        for key, gpu in self.gpus.items():
            if key in tokens:
                return gpu.name
        return REFERENCE_GPU

    def with_network(self, profile: NetworkProfile) -> Catalog:
        """This catalog plus (or with a replaced) network profile, e.g. one made from a cluster."""
        networks = {**self.networks, _key(profile.name): profile}
        return replace(self, networks=MappingProxyType(networks))

    def throughput(self, model: ModelSpec, gpu: GpuSpec) -> float:
        """Single-GPU samples/s of `model` on `gpu` at the catalog's reference batch (64).

        Measured where the catalog has it; else scaled by relative speed from a GPU type that
        was measured (the reference V100 first); else from FLOPs on the reference GPU.
        """
        measured = {_key(g): v for g, v in model.throughput.items()}
        own = measured.get(_key(gpu.name))
        if own is not None:
            return own
        ref_key = _key(REFERENCE_GPU)
        for gpu_key in (ref_key, *measured):
            if gpu_key in measured:
                base = self.gpus[gpu_key]
                return measured[gpu_key] * gpu.speed / base.speed
        ref = self.gpus[ref_key]
        # A training step is about three forward passes of work (forward, two for backward).
        per_sample_tflop = 3.0 * model.forward_gflops / 1e3
        reference = ref.fp32_tflops * model.flops_efficiency / per_sample_tflop
        return reference * gpu.speed / ref.speed


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
