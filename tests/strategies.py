"""Hypothesis strategies shared by the property tests: random node topologies and busy sets."""

from __future__ import annotations

from hypothesis import strategies as st

from toposched.topology.links import PCIE_CODES
from toposched.topology.node import NodeTopology

LINK_CODES = (*PCIE_CODES, "NV1", "NV2", "NV4", "NV6", "NV12", "NV18")


@st.composite
def link_codes(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(LINK_CODES))


@st.composite
def topologies(draw: st.DrawFn, min_gpus: int = 1, max_gpus: int = 8) -> NodeTopology:
    """A random symmetric node topology with optional NUMA nodes and CPU lists."""
    n = draw(st.integers(min_gpus, max_gpus))
    codes = [["X"] * n for _ in range(n)]
    for i in range(n):
        for j in range(i + 1, n):
            codes[i][j] = codes[j][i] = draw(link_codes())
    numa: list[int | None] = []
    affinity: list[str | None] = []
    if draw(st.booleans()):
        numa = [draw(st.integers(0, 3)) for _ in range(n)]
        affinity = [f"{16 * v}-{16 * v + 15}" if v is not None else None for v in numa]
    return NodeTopology.from_codes(codes, numa=numa, cpu_affinity=affinity, name="random")


@st.composite
def busy_sets(draw: st.DrawFn, topology: NodeTopology) -> frozenset[int]:
    return frozenset(draw(st.sets(st.integers(0, topology.size - 1))))
