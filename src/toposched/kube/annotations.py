"""What toposched writes on Kubernetes objects: a node's GPU topology, and a pod's GPUs.

The node annotation `toposched.io/topology` holds a node's GPU topology as JSON, versioned, in
the model of `toposched topology parse --json` (the node agent writes it):

    {"version": 1, "gpus": 2, "links": [["X", "NV2"], ["NV2", "X"]],
     "numa": [0, 0], "cpu_affinity": ["0-63", "0-63"], "switch": [0, 0],
     "unhealthy": [], "stale": false}

`links[i][j]` is the nvidia-smi code between GPU i and j (`NV<n>`, `PIX`, `PXB`, `PHB`, `NODE`,
`SYS`, `X` on the diagonal); `numa`, `cpu_affinity`, `switch` are optional per-GPU lists (null
where unknown); `unhealthy` lists GPUs the agent found failed; `stale: true` says the agent could
not read the topology lately (the scheduler then treats the node as unknown). A reader refuses
a version it does not know. The scheduler writes the GPUs it chose for a pod in the Binding's
annotation `toposched.io/gpus` ("0,1,2,3"), which the API server copies onto the pod.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from toposched.topology.errors import TopologyError
from toposched.topology.node import NodeTopology

TOPOLOGY = "toposched.io/topology"
GPUS = "toposched.io/gpus"
VERSION = 1
# Nodes opt in to topology-aware GPU choice with either label (the seeds use ACK's).
OPT_IN_LABELS = ("toposched.io/gpu-schedule", "ack.node.gpu.schedule")


class AnnotationError(ValueError):
    """An annotation that cannot be read; the message says which field and why."""


@dataclass(frozen=True)
class NodeGpus:
    """What a node's topology annotation says."""

    topology: NodeTopology
    unhealthy: frozenset[int]
    stale: bool


def encode_topology(
    topology: NodeTopology, unhealthy: Sequence[int] = (), stale: bool = False
) -> str:
    return json.dumps(
        {
            "version": VERSION,
            "gpus": topology.size,
            "links": topology.codes(),
            "numa": list(topology.numa),
            "cpu_affinity": list(topology.cpu_affinity),
            "switch": list(topology.switch),
            "unhealthy": sorted(unhealthy),
            "stale": stale,
        },
        separators=(",", ":"),
    )


def decode_topology(text: str, name: str = "") -> NodeGpus:
    """The topology in a node's annotation; AnnotationError says what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise AnnotationError(f"{TOPOLOGY} is not JSON: {err.msg} at char {err.pos}") from None
    if not isinstance(data, dict):
        raise AnnotationError(f"{TOPOLOGY} must be a JSON object")
    version = data.get("version")
    if version != VERSION:
        raise AnnotationError(f"{TOPOLOGY}: version {version!r} unknown (this reads {VERSION})")
    links: Any = data.get("links")
    if not _matrix_of_strings(links):
        raise AnnotationError(f"{TOPOLOGY}: links must be a list of lists of link codes")
    gpus = data.get("gpus", len(links))
    if gpus != len(links):
        raise AnnotationError(f"{TOPOLOGY}: gpus is {gpus!r} but links has {len(links)} rows")
    try:
        topology = NodeTopology.from_codes(
            links,
            numa=_per_gpu(data, "numa", int, gpus),
            switch=_per_gpu(data, "switch", int, gpus),
            cpu_affinity=_per_gpu(data, "cpu_affinity", str, gpus),
            name=name,
        )
    except TopologyError as err:
        raise AnnotationError(f"{TOPOLOGY}: {err}") from None
    unhealthy = data.get("unhealthy", [])
    if not isinstance(unhealthy, list) or not all(
        isinstance(g, int) and not isinstance(g, bool) and 0 <= g < gpus for g in unhealthy
    ):
        raise AnnotationError(f"{TOPOLOGY}: unhealthy must list GPU indices 0..{gpus - 1}")
    stale = data.get("stale", False)
    if not isinstance(stale, bool):
        raise AnnotationError(f"{TOPOLOGY}: stale must be true or false")
    return NodeGpus(topology, frozenset(unhealthy), stale)


def _matrix_of_strings(value: Any) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(row, list) and all(isinstance(c, str) for c in row) for row in value)
    )


def _per_gpu(data: Mapping[str, Any], key: str, kind: type, gpus: int) -> list[Any]:
    values = data.get(key)
    if values is None:
        return []
    if not isinstance(values, list) or len(values) != gpus:
        raise AnnotationError(f"{TOPOLOGY}: {key} must list one value per GPU ({gpus})")
    for v in values:
        if v is not None and (not isinstance(v, kind) or isinstance(v, bool)):
            raise AnnotationError(f"{TOPOLOGY}: {key} holds {v!r}, not a {kind.__name__}")
    return values


def encode_gpus(gpus: Sequence[int]) -> str:
    return ",".join(str(g) for g in sorted(gpus))


def decode_gpus(text: str) -> tuple[int, ...]:
    """The GPUs in a pod's `toposched.io/gpus` annotation."""
    try:
        gpus = tuple(sorted(int(part) for part in text.split(",") if part.strip()))
    except ValueError:
        raise AnnotationError(f"{GPUS} must list GPU indices like 0,1,2; got {text!r}") from None
    if not gpus or len(set(gpus)) != len(gpus) or gpus[0] < 0:
        raise AnnotationError(f"{GPUS} must list distinct GPU indices; got {text!r}")
    return gpus


def opted_in(labels: Mapping[str, str]) -> bool:
    """A node whose labels ask for topology-aware GPU choice."""
    return any(labels.get(key) == "topology" for key in OPT_IN_LABELS)
