"""The topology of one node: its GPUs, the link between every pair, and where each GPU hangs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property

from toposched.topology.errors import TopologyError
from toposched.topology.links import DEFAULT_BANDWIDTH, BandwidthTable, Link, Path, parse_link

MAX_GPUS = 64


def _components(n: int, joined: Sequence[Sequence[bool]]) -> tuple[int, ...]:
    """Label the connected components of a symmetric relation, numbered by first member."""
    label = [-1] * n
    next_label = 0
    for start in range(n):
        if label[start] >= 0:
            continue
        stack = [start]
        label[start] = next_label
        while stack:
            i = stack.pop()
            for j in range(n):
                if label[j] < 0 and joined[i][j]:
                    label[j] = next_label
                    stack.append(j)
        next_label += 1
    return tuple(label)


@dataclass(frozen=True, eq=True)
class NodeTopology:
    """An immutable, hashable node topology; identical nodes share one object.

    `links[i][j]` is the Link between GPU i and GPU j (None on the diagonal). `numa[i]` is the
    NUMA node (CPU socket) of GPU i and `switch[i]` the PCIe switch it hangs under, None where
    unknown. `cpu_affinity[i]` is nvidia-smi's CPU list, kept verbatim for display.
    The name is a label only: two topologies wired the same way are equal.
    """

    links: tuple[tuple[Link | None, ...], ...]
    numa: tuple[int | None, ...] = ()
    switch: tuple[int | None, ...] = ()
    cpu_affinity: tuple[str | None, ...] = ()
    bandwidth: BandwidthTable = DEFAULT_BANDWIDTH
    name: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        n = len(self.links)
        if n < 1:
            raise TopologyError("a node needs at least one GPU")
        if n > MAX_GPUS:
            raise TopologyError(f"a node has at most {MAX_GPUS} GPUs, got {n}")
        for i, row in enumerate(self.links):
            if len(row) != n:
                raise TopologyError(
                    f"link matrix row for GPU{i} has {len(row)} entries, expected {n}"
                )
            if row[i] is not None:
                raise TopologyError(
                    f"GPU{i} has a link to itself ({row[i]}); the diagonal must be X"
                )
            for j, link in enumerate(row):
                if j != i and link is None:
                    raise TopologyError(f"no link given between GPU{i} and GPU{j}")
        for i in range(n):
            for j in range(i + 1, n):
                if self.links[i][j] != self.links[j][i]:
                    raise TopologyError(
                        f"link matrix is not symmetric: GPU{i}->GPU{j} is {self.links[i][j]} "
                        f"but GPU{j}->GPU{i} is {self.links[j][i]}"
                    )
        for attr in ("numa", "switch", "cpu_affinity"):
            values = getattr(self, attr)
            if not values:
                object.__setattr__(self, attr, (None,) * n)
            elif len(values) != n:
                raise TopologyError(f"{attr} has {len(values)} entries for {n} GPUs")

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((self.links, self.numa, self.switch, self.cpu_affinity, self.bandwidth))

    @classmethod
    def from_codes(
        cls,
        codes: Sequence[Sequence[str]],
        *,
        numa: Sequence[int | None] = (),
        switch: Sequence[int | None] = (),
        cpu_affinity: Sequence[str | None] = (),
        bandwidth: BandwidthTable = DEFAULT_BANDWIDTH,
        name: str = "",
    ) -> NodeTopology:
        """Build from a matrix of nvidia-smi codes, `X` on the diagonal."""
        rows: list[tuple[Link | None, ...]] = []
        for i, row in enumerate(codes):
            parsed: list[Link | None] = []
            for j, code in enumerate(row):
                if code.strip().upper() == "X":
                    if i != j:
                        raise TopologyError(f"X (self) given between GPU{i} and GPU{j}")
                    parsed.append(None)
                else:
                    try:
                        parsed.append(parse_link(code))
                    except TopologyError as err:
                        raise TopologyError(f"GPU{i}->GPU{j}: {err.reason}") from None
            rows.append(tuple(parsed))
        return cls(
            links=tuple(rows),
            numa=tuple(numa),
            switch=tuple(switch),
            cpu_affinity=tuple(cpu_affinity),
            bandwidth=bandwidth,
            name=name,
        )

    @property
    def size(self) -> int:
        return len(self.links)

    def link(self, i: int, j: int) -> Link | None:
        return self.links[i][j]

    def codes(self) -> list[list[str]]:
        """The matrix as nvidia-smi codes with `X` on the diagonal."""
        return [[("X" if link is None else link.code) for link in row] for row in self.links]

    @cached_property
    def bandwidth_matrix(self) -> tuple[tuple[float, ...], ...]:
        """GB/s between every pair (0.0 on the diagonal)."""
        return tuple(
            tuple(0.0 if link is None else self.bandwidth.of(link) for link in row)
            for row in self.links
        )

    @cached_property
    def sockets(self) -> tuple[int, ...]:
        """Socket of each GPU: the NUMA node where known, else the groups not joined by SYS."""
        if all(v is not None for v in self.numa):
            return tuple(v for v in self.numa if v is not None)
        n = self.size
        joined = [
            [i != j and self.links[i][j] != Link(Path.SYS) for j in range(n)] for i in range(n)
        ]
        return _components(n, joined)

    @cached_property
    def switches(self) -> tuple[int, ...]:
        """PCIe switch of each GPU: as given where known, else the groups joined by PIX."""
        if all(v is not None for v in self.switch):
            return tuple(v for v in self.switch if v is not None)
        n = self.size
        joined = [
            [i != j and self.links[i][j] == Link(Path.PIX) for j in range(n)] for i in range(n)
        ]
        return _components(n, joined)

    def renamed(self, name: str) -> NodeTopology:
        return NodeTopology(
            links=self.links,
            numa=self.numa,
            switch=self.switch,
            cpu_affinity=self.cpu_affinity,
            bandwidth=self.bandwidth,
            name=name,
        )
