"""Parse catalog YAML into specs; every error names the file, the line and the field."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from toposched.perf.errors import CatalogError
from toposched.perf.specs import (
    Allreduce,
    FrameworkSpec,
    GpuSpec,
    Level,
    ModelSpec,
    NetworkProfile,
    Pattern,
    Precision,
    PsPlacement,
)
from toposched.topology.cluster import Tier

SECTIONS = ("models", "gpus", "networks", "frameworks", "aliases")
TIERS = {"rack": Tier.RACK, "pod": Tier.POD, "cluster": Tier.CLUSTER}

Origin = tuple[str, int | None]


@dataclass
class CatalogData:
    """What one file defines, with the origin (file, line) of every entry."""

    models: dict[str, ModelSpec] = field(default_factory=dict)
    gpus: dict[str, GpuSpec] = field(default_factory=dict)
    networks: dict[str, NetworkProfile] = field(default_factory=dict)
    frameworks: dict[str, FrameworkSpec] = field(default_factory=dict)
    aliases: dict[str, str] = field(default_factory=dict)
    origins: dict[tuple[str, str], Origin] = field(default_factory=dict)


def _key_lines(node: yaml.Node, prefix: tuple[str, ...], out: dict[tuple[str, ...], int]) -> None:
    """Record the line of every mapping key, by its path from the root."""
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode):
                path = (*prefix, str(key.value))
                out[path] = key.start_mark.line + 1
                _key_lines(value, path, out)


class _Entry:
    """One catalog entry being read: typed getters that fail with file, line and field."""

    def __init__(
        self, data: Any, path: tuple[str, ...], source: str, lines: dict[tuple[str, ...], int]
    ):
        self.path = path
        self.source = source
        self.lines = lines
        if not isinstance(data, dict):
            raise self.error("must be a mapping of fields")
        self.data: dict[str, Any] = data

    def line(self, *sub: str) -> int | None:
        path = (*self.path, *sub)
        while path and path not in self.lines:
            path = path[:-1]
        return self.lines.get(path)

    def error(self, message: str, *sub: str) -> CatalogError:
        return CatalogError(
            message, source=self.source, line=self.line(*sub), field=".".join((*self.path, *sub))
        )

    def _at(self, *sub: str) -> Callable[[str], CatalogError]:
        def error(message: str) -> CatalogError:
            return self.error(message, *sub)

        return error

    def check_keys(self, allowed: tuple[str, ...]) -> None:
        for key in self.data:
            if key not in allowed:
                raise self.error(
                    f"unknown field {key!r}; valid fields: {', '.join(allowed)}", str(key)
                )

    def number(
        self,
        key: str,
        *,
        default: float | None = None,
        low: float = 0.0,
        high: float | None = None,
        low_inclusive: bool = False,
    ) -> float:
        if key not in self.data:
            if default is None:
                raise self.error(f"missing required field {key!r}")
            return default
        return _number(self.data[key], self._at(key), low, high, low_inclusive)

    def text(self, key: str, default: str = "") -> str:
        value = self.data.get(key, default)
        if not isinstance(value, str):
            raise self.error(f"must be text, got {value!r}", key)
        return value

    def choice(self, key: str, choices: tuple[str, ...], default: str | None = None) -> str:
        value = self.data.get(key, default)
        if value is None:
            raise self.error(f"missing required field {key!r}; one of {', '.join(choices)}")
        if value not in choices:
            raise self.error(f"must be one of {', '.join(choices)}, got {value!r}", key)
        return str(value)

    def numbers(self, key: str, allowed: tuple[str, ...] | None = None) -> dict[str, float]:
        value = self.data.get(key, {})
        if not isinstance(value, dict):
            raise self.error("must be a mapping of names to numbers", key)
        out: dict[str, float] = {}
        for name, number in value.items():
            if allowed is not None and name not in allowed:
                raise self.error(
                    f"unknown key {name!r}; valid keys: {', '.join(allowed)}", key, str(name)
                )
            out[str(name)] = _number(number, self._at(key, str(name)), 0.0, None, True)
        return out


def _number(
    value: Any,
    error: Callable[[str], CatalogError],
    low: float,
    high: float | None,
    low_inclusive: bool,
) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise error(f"must be a number, got {value!r}")
    ok_low = value >= low if low_inclusive else value > low
    if not ok_low or (high is not None and value > high):
        bound = f"{'>=' if low_inclusive else '>'} {low:g}"
        if high is not None:
            bound += f" and <= {high:g}"
        raise error(f"must be {bound}, got {value!r}")
    return float(value)


MODEL_FIELDS = (
    "params_m",
    "forward_gflops",
    "throughput",
    "sample",
    "flops_efficiency",
    "backward_fraction",
    "gradient_bytes",
    "interference",
    "precision",
    "fixed_s",
    "aliases",
    "source",
    "description",
)
GPU_FIELDS = ("speed", "fp32_tflops", "fp16_tflops", "memory_gb", "source", "description")
NETWORK_FIELDS = (
    "bandwidth_gbps",
    "efficiency",
    "latency_us",
    "flow_gbps",
    "contention",
    "source",
    "description",
)
FRAMEWORK_FIELDS = (
    "pattern",
    "overlap",
    "link_efficiency",
    "compute_scale",
    "fusion_mb",
    "step_latency_us",
    "interference",
    "ps",
    "allreduce",
    "exposed_buckets",
    "step_overhead_ms",
    "colocation",
    "bridge_sharing",
    "source",
    "description",
)


def _model(entry: _Entry, name: str) -> tuple[ModelSpec, list[str]]:
    entry.check_keys(MODEL_FIELDS)
    aliases = entry.data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and a for a in aliases):
        raise entry.error("must be a list of names", "aliases")
    throughput = entry.numbers("throughput")
    for gpu, value in throughput.items():
        if value <= 0:
            raise entry.error(f"must be > 0, got {value:g}", "throughput", gpu)
    precision = Precision(entry.choice("precision", tuple(p.value for p in Precision), "fp32"))
    spec = ModelSpec(
        name=name,
        params_m=entry.number("params_m"),
        forward_gflops=entry.number("forward_gflops"),
        throughput=throughput,
        sample=entry.text("sample", "sample"),
        flops_efficiency=entry.number("flops_efficiency", default=0.35, high=1.0),
        backward_fraction=entry.number("backward_fraction", default=2.0 / 3.0, high=1.0),
        gradient_bytes=entry.number("gradient_bytes", default=4.0),
        interference=entry.number("interference", default=1.0, low_inclusive=True),
        precision=precision,
        fixed_s=entry.numbers("fixed_s"),
        source=entry.text("source"),
    )
    return spec, aliases


def _gpu(entry: _Entry, name: str) -> GpuSpec:
    entry.check_keys(GPU_FIELDS)
    memory = entry.number("memory_gb") if "memory_gb" in entry.data else None
    fp16 = entry.number("fp16_tflops") if "fp16_tflops" in entry.data else None
    return GpuSpec(
        name=name,
        speed=entry.number("speed"),
        fp32_tflops=entry.number("fp32_tflops"),
        memory_gb=memory,
        fp16_tflops=fp16,
        source=entry.text("source"),
    )


def _network(entry: _Entry, name: str) -> NetworkProfile:
    entry.check_keys(NETWORK_FIELDS)
    raw = entry.data.get("bandwidth_gbps")
    if raw is None:
        raise entry.error("missing required field 'bandwidth_gbps' (GB/s, or rack/pod/cluster)")
    if isinstance(raw, dict):
        given = entry.numbers("bandwidth_gbps", tuple(TIERS))
        if "rack" not in given:
            raise entry.error(
                "needs at least 'rack' (pod and cluster default to it)", "bandwidth_gbps"
            )
        for tier, value in given.items():
            if value <= 0:
                raise entry.error(f"must be > 0, got {value:g}", "bandwidth_gbps", tier)
        rack = given["rack"]
        pod = given.get("pod", rack)
        bandwidth = {Tier.RACK: rack, Tier.POD: pod, Tier.CLUSTER: given.get("cluster", pod)}
    else:
        value = entry.number("bandwidth_gbps")
        bandwidth = dict.fromkeys((Tier.RACK, Tier.POD, Tier.CLUSTER), value)
    return NetworkProfile(
        name=name,
        bandwidth_gbps=bandwidth,
        efficiency=entry.number("efficiency", default=1.0, high=1.0),
        latency_us=entry.number("latency_us", default=0.0, low_inclusive=True),
        flow_gbps=entry.number("flow_gbps") if "flow_gbps" in entry.data else None,
        contention=entry.number("contention", default=0.0, low_inclusive=True),
        source=entry.text("source"),
    )


def _framework(entry: _Entry, name: str) -> FrameworkSpec:
    entry.check_keys(FRAMEWORK_FIELDS)
    pattern = Pattern(entry.choice("pattern", tuple(p.value for p in Pattern)))
    placement, shards = PsPlacement.DEDICATED, 1
    if "ps" in entry.data:
        if pattern is not Pattern.PS:
            raise entry.error("only a framework with pattern 'ps' takes parameter servers", "ps")
        ps = _Entry(entry.data["ps"], (*entry.path, "ps"), entry.source, entry.lines)
        ps.check_keys(("placement", "shards"))
        placement = PsPlacement(
            ps.choice("placement", tuple(p.value for p in PsPlacement), "dedicated")
        )
        raw_shards = ps.data.get("shards", 1)
        if isinstance(raw_shards, bool) or not isinstance(raw_shards, int) or raw_shards < 1:
            raise ps.error(f"must be a whole number >= 1, got {raw_shards!r}", "shards")
        shards = raw_shards
    return FrameworkSpec(
        name=name,
        pattern=pattern,
        overlap=entry.number("overlap", low_inclusive=True, high=1.0),
        link_efficiency=entry.number("link_efficiency", high=1.0),
        compute_scale=entry.number("compute_scale", default=1.0),
        fusion_mb=entry.number("fusion_mb", default=64.0),
        step_latency_us=entry.number("step_latency_us", default=10.0, low_inclusive=True),
        interference=entry.numbers("interference", tuple(level.value for level in Level)),
        ps_placement=placement,
        ps_shards=shards,
        allreduce=Allreduce(entry.choice("allreduce", tuple(a.value for a in Allreduce), "ring")),
        exposed_buckets=entry.number("exposed_buckets", default=0.0, low_inclusive=True),
        step_overhead_ms=entry.number("step_overhead_ms", default=0.0, low_inclusive=True),
        colocation=entry.number("colocation", default=0.0, low_inclusive=True),
        bridge_sharing=entry.number("bridge_sharing", default=0.0, low_inclusive=True, high=1.0),
        source=entry.text("source"),
    )


def _load_yaml(text: str) -> tuple[yaml.Node | None, Any]:
    """One pass over `text`: the node tree (for line numbers) and the data built from it."""
    loader = yaml.SafeLoader(text)
    try:
        root = loader.get_single_node()
        return root, (None if root is None else loader.construct_document(root))
    finally:
        loader.dispose()


def parse_catalog(text: str, *, source: str) -> CatalogData:
    """Read one catalog file (any of its sections); nothing is checked across files here."""
    try:
        root, data = _load_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise CatalogError(
            f"not valid YAML: {getattr(err, 'problem', None) or err}",
            source=source,
            line=None if mark is None else mark.line + 1,
        ) from None
    if root is None or data is None:
        return CatalogData()
    if not isinstance(data, dict):
        raise CatalogError(
            f"a catalog file is a mapping with any of: {', '.join(SECTIONS)}", source=source
        )
    lines: dict[tuple[str, ...], int] = {}
    _key_lines(root, (), lines)
    out = CatalogData()
    for section, entries in data.items():
        if section not in SECTIONS:
            raise CatalogError(
                f"unknown section {section!r}; valid sections: {', '.join(SECTIONS)}",
                source=source,
                line=lines.get((str(section),)),
            )
        if not isinstance(entries, dict):
            raise CatalogError(
                "must be a mapping of names to entries",
                source=source,
                line=lines.get((section,)),
                field=section,
            )
        for name, body in entries.items():
            if not isinstance(name, str) or not name.strip():
                raise CatalogError(
                    f"entry names must be non-empty text, got {name!r}",
                    source=source,
                    line=lines.get((section,)),
                    field=section,
                )
            _read_entry(out, section, name, body, source, lines)
    return out


def _read_entry(
    out: CatalogData,
    section: str,
    name: str,
    body: Any,
    source: str,
    lines: dict[tuple[str, ...], int],
) -> None:
    path = (section, name)
    origin = (source, lines.get(path))
    if section == "aliases":
        if not isinstance(body, str) or not body:
            raise CatalogError(
                f"an alias maps a name to a model name, got {body!r}",
                source=source,
                line=lines.get(path),
                field=".".join(path),
            )
        out.aliases[name] = body
        out.origins[(section, name)] = origin
        return
    entry = _Entry(body, path, source, lines)
    readers: Mapping[str, Callable[[], None]] = {
        "gpus": lambda: out.gpus.__setitem__(name, _gpu(entry, name)),
        "networks": lambda: out.networks.__setitem__(name, _network(entry, name)),
        "frameworks": lambda: out.frameworks.__setitem__(name, _framework(entry, name)),
    }
    if section == "models":
        spec, aliases = _model(entry, name)
        out.models[name] = spec
        for alias in aliases:
            out.aliases[alias] = name
            out.origins[("aliases", alias)] = (source, entry.line("aliases"))
    else:
        readers[section]()
    out.origins[(section, name)] = origin
