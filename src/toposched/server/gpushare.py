"""A shared job's share of its GPU as the server carries it out: the memory it may use."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toposched.common.jobfields import stored_value
from toposched.common.jobspec import MIB, gpu_milli, gpu_share_mib
from toposched.executors.mps import GpuShare


def gpu_share(spec: Mapping[str, Any], gpu_memory: int) -> GpuShare | None:
    """The share of one GPU a stored submission asks (None: whole GPUs). Its memory is its
    `gpu_memory_share`, else its fraction of the GPU's `gpu_memory` bytes (0 where unknown):
    a job that asked a quarter of the GPU may use a quarter of its memory, as KAI's
    gpu-fraction also gives."""
    milli = gpu_milli(stored_value(dict(spec), "gpu_fraction"))
    mib = gpu_share_mib(stored_value(dict(spec), "gpu_memory_share"))
    if not (milli or mib):
        return None
    return GpuShare(milli, mib or milli * (gpu_memory // MIB) // 1000)
