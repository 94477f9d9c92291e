"""Performance model: iteration time of a data-parallel job on a placement, from a catalog."""

from toposched.perf.errors import CatalogError, PerfError
from toposched.perf.interference import interference_factor
from toposched.perf.model import (
    DEFAULT_BATCH,
    DEFAULT_FRAMEWORK,
    DEFAULT_NETWORK,
    Estimate,
    NodeShare,
    PerfModel,
)
from toposched.perf.registry import Catalog
from toposched.perf.specs import (
    REFERENCE_GPU,
    FrameworkSpec,
    GpuSpec,
    ModelSpec,
    NetworkProfile,
    Pattern,
)

__all__ = [
    "DEFAULT_BATCH",
    "DEFAULT_FRAMEWORK",
    "DEFAULT_NETWORK",
    "REFERENCE_GPU",
    "Catalog",
    "CatalogError",
    "Estimate",
    "FrameworkSpec",
    "GpuSpec",
    "ModelSpec",
    "NetworkProfile",
    "NodeShare",
    "Pattern",
    "PerfError",
    "PerfModel",
    "interference_factor",
]
