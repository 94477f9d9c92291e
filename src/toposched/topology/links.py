"""Link kinds between two GPUs in nvidia-smi's vocabulary, and their default bandwidths."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum

from toposched.topology.errors import TopologyError


class Path(IntEnum):
    """The PCIe/NVLink path class, best first (the order is the objective's order)."""

    NV = 0
    PIX = 1
    PXB = 2
    PHB = 3
    NODE = 4
    SYS = 5


PCIE_CODES = ("PIX", "PXB", "PHB", "NODE", "SYS")
_NV_RE = re.compile(r"NV(\d{1,4})")  # no GPU has thousands of links; int() of a huge one fails


@dataclass(frozen=True, order=True)
class Link:
    """One GPU-to-GPU connection: a path class, and for NVLink the number of bonded links."""

    path: Path
    nvlinks: int = 0

    def __post_init__(self) -> None:
        if self.path is Path.NV and self.nvlinks < 1:
            raise TopologyError(f"an NVLink connection needs at least one link, got {self.nvlinks}")
        if self.path is not Path.NV and self.nvlinks != 0:
            raise TopologyError(f"{self.path.name} is not NVLink and carries no NVLink count")

    @property
    def code(self) -> str:
        """The nvidia-smi code: `NV4`, `PIX`, ..."""
        return f"NV{self.nvlinks}" if self.path is Path.NV else self.path.name

    @property
    def is_nvlink(self) -> bool:
        return self.path is Path.NV

    def __str__(self) -> str:
        return self.code


def parse_link(code: str) -> Link:
    """Parse an nvidia-smi link code (`NV12`, `PIX`, `SYS`, ...); raise TopologyError if unknown."""
    text = code.strip().upper()
    m = _NV_RE.fullmatch(text)
    if m:
        n = int(m.group(1))
        if n < 1:
            raise TopologyError(f"link code {code!r} has no NVLinks; expected NV1 or more")
        return Link(Path.NV, n)
    if text in PCIE_CODES:
        return Link(Path[text])
    raise TopologyError(
        f"unknown link code {code!r}; expected NV<n> (n >= 1) or one of {', '.join(PCIE_CODES)}"
    )


@dataclass(frozen=True)
class BandwidthTable:
    """GB/s in one direction: per NVLink, and per PCIe path class.

    The default is the table in docs/topology.md ("Link kinds and bandwidths"). Only the order
    matters to placement rule 1 as long as the table keeps NVLink above every PCIe class; the
    values matter to the performance model.
    """

    nvlink_per_link: float = 25.0
    pix: float = 16.0
    pxb: float = 15.0
    phb: float = 12.0
    node: float = 10.0
    sys: float = 6.0

    def __post_init__(self) -> None:
        for name, value in self.as_dict().items():
            if not value > 0:
                raise TopologyError(f"bandwidth for {name} must be positive, got {value}")

    def of(self, link: Link) -> float:
        if link.path is Path.NV:
            return self.nvlink_per_link * link.nvlinks
        return {
            Path.PIX: self.pix,
            Path.PXB: self.pxb,
            Path.PHB: self.phb,
            Path.NODE: self.node,
            Path.SYS: self.sys,
        }[link.path]

    def as_dict(self) -> dict[str, float]:
        return {
            "NV": self.nvlink_per_link,
            "PIX": self.pix,
            "PXB": self.pxb,
            "PHB": self.phb,
            "NODE": self.node,
            "SYS": self.sys,
        }

    @classmethod
    def from_overrides(
        cls, overrides: Mapping[str, object], *, source: str | None = None
    ) -> BandwidthTable:
        """The default table with some entries replaced (keys `NV`, `PIX`, ...; any case)."""
        fields = {
            "NV": "nvlink_per_link",
            "PIX": "pix",
            "PXB": "pxb",
            "PHB": "phb",
            "NODE": "node",
            "SYS": "sys",
        }
        values: dict[str, float] = {}
        for key, value in overrides.items():
            field = fields.get(str(key).upper())
            if field is None:
                raise TopologyError(
                    f"unknown bandwidth key {key!r}; expected one of {', '.join(fields)}",
                    source=source,
                )
            if isinstance(value, bool) or not isinstance(value, int | float) or not value > 0:
                raise TopologyError(
                    f"bandwidth for {key} must be a positive number, got {value!r}", source=source
                )
            values[field] = float(value)
        return cls(**values)


DEFAULT_BANDWIDTH = BandwidthTable()
