"""Resolve what a user names: a topology (preset or file) or a cluster (shorthand or file)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from toposched.topology.cluster import Cluster, ClusterError
from toposched.topology.clusterfile import looks_like_shorthand, parse_cluster_yaml, parse_shorthand
from toposched.topology.errors import TopologyError
from toposched.topology.formats import parse_topology_text
from toposched.topology.node import NodeTopology
from toposched.topology.presets import PRESETS, preset


def load_topology(spec: str) -> NodeTopology:
    """A preset name, or a path to a YAML topology or an `nvidia-smi topo -m` capture."""
    path = Path(spec)
    if path.is_file():
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise TopologyError(f"cannot read: {err}", source=spec) from None
        return parse_topology_text(text, source=spec, name=path.stem)
    if spec in PRESETS:
        return preset(spec)
    if path.exists():
        raise TopologyError("not a regular file", source=spec)
    raise TopologyError(
        f"{spec!r} is neither a file nor a preset; known presets: {', '.join(PRESETS)}"
    )


def load_cluster(spec: str, base_dir: str | Path | None = None) -> Cluster:
    """A shorthand such as `64*dgx1-v100/8`, or a YAML cluster file (relative to `base_dir`)."""
    if looks_like_shorthand(spec):
        return parse_shorthand(spec)
    path = Path(spec) if base_dir is None else Path(base_dir) / spec
    if not path.is_file():
        problem = "not a regular file" if path.exists() else "no such cluster file"
        hint = f"1*{spec}" if spec in PRESETS else "64*dgx1-v100/8"
        raise ClusterError(f"{problem} (a shorthand looks like {hint})", source=str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ClusterError(f"cannot read: {err}", source=str(path)) from None
    return parse_cluster_yaml(text, source=str(path), resolve=_topology_files(path.parent))


def _topology_files(base_dir: Path) -> Callable[[str], NodeTopology]:
    """Topology files relative to the cluster file: one object per file, however often named."""
    cache: dict[Path, NodeTopology] = {}

    def resolve(spec: str) -> NodeTopology:
        path = base_dir / spec
        key = path.resolve()
        if key not in cache:
            if not path.is_file():
                raise TopologyError(
                    f"no preset or file named {spec!r} (looked for {path}); "
                    f"known presets: {', '.join(PRESETS)}"
                )
            cache[key] = load_topology(str(path))
        return cache[key]

    return resolve
