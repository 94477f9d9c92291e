"""Write catalog entries as YAML that `Catalog.load` reads back to the same entries."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import yaml

from toposched.perf.specs import FrameworkSpec, GpuSpec, ModelSpec, NetworkProfile, Pattern


def _round(value: float) -> float:
    """Six significant digits: far below the measurements' noise, and readable."""
    return float(f"{value:.6g}")


def _numbers(values: Mapping[str, float]) -> dict[str, float]:
    return {str(k): _round(v) for k, v in values.items()}


def _rounded(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        k: _round(v) if isinstance(v, float) else _rounded(v) if isinstance(v, dict) else v
        for k, v in entry.items()
    }


def model_entry(spec: ModelSpec) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "params_m": spec.params_m,
        "forward_gflops": spec.forward_gflops,
        "sample": spec.sample,
        "precision": spec.precision.value,
        "flops_efficiency": spec.flops_efficiency,
        "backward_fraction": spec.backward_fraction,
        "gradient_bytes": spec.gradient_bytes,
        "interference": spec.interference,
    }
    if spec.throughput:
        entry["throughput"] = _numbers(spec.throughput)
    if spec.fixed_s:
        entry["fixed_s"] = _numbers(spec.fixed_s)
    entry["source"] = spec.source
    return entry


def _finish(entry: dict[str, Any], source: str, **optional: float | None) -> dict[str, Any]:
    """The optional fields that are set, then the source, last as in the shipped files."""
    entry.update({k: v for k, v in optional.items() if v is not None})
    entry["source"] = source
    return entry


def gpu_entry(spec: GpuSpec) -> dict[str, Any]:
    entry: dict[str, Any] = {"speed": spec.speed, "fp32_tflops": spec.fp32_tflops}
    return _finish(entry, spec.source, fp16_tflops=spec.fp16_tflops, memory_gb=spec.memory_gb)


def network_entry(spec: NetworkProfile) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "bandwidth_gbps": {tier.name.lower(): gbps for tier, gbps in spec.bandwidth_gbps.items()},
        "efficiency": spec.efficiency,
        "latency_us": spec.latency_us,
        "contention": spec.contention,
    }
    return _finish(entry, spec.source, flow_gbps=spec.flow_gbps)


def framework_entry(spec: FrameworkSpec) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "pattern": spec.pattern.value,
        "allreduce": spec.allreduce.value,
        "overlap": spec.overlap,
        "exposed_buckets": spec.exposed_buckets,
        "link_efficiency": spec.link_efficiency,
        "compute_scale": spec.compute_scale,
        "fusion_mb": spec.fusion_mb,
        "step_latency_us": spec.step_latency_us,
        "step_overhead_ms": spec.step_overhead_ms,
        "colocation": spec.colocation,
        "bridge_sharing": spec.bridge_sharing,
        "interference": _numbers(spec.interference),
    }
    if spec.pattern is Pattern.PS:
        entry["ps"] = {"placement": spec.ps_placement.value, "shards": spec.ps_shards}
    entry["source"] = spec.source
    return entry


def catalog_yaml(
    *,
    header: str,
    models: Iterable[ModelSpec] = (),
    gpus: Iterable[GpuSpec] = (),
    networks: Iterable[NetworkProfile] = (),
    frameworks: Iterable[FrameworkSpec] = (),
    aliases: Mapping[str, str] | None = None,
) -> str:
    """A catalog file holding complete entries (a later file replaces whole entries)."""
    sections: dict[str, Any] = {
        "models": {m.name: _rounded(model_entry(m)) for m in models},
        "gpus": {g.name: _rounded(gpu_entry(g)) for g in gpus},
        "networks": {n.name: _rounded(network_entry(n)) for n in networks},
        "frameworks": {f.name: _rounded(framework_entry(f)) for f in frameworks},
        "aliases": dict(aliases or {}),
    }
    body = yaml.safe_dump(
        {k: v for k, v in sections.items() if v}, sort_keys=False, width=100, allow_unicode=True
    )
    comment = "".join(f"# {line}\n".replace("# \n", "#\n") for line in header.splitlines())
    return comment + body
