"""This machine's hardware besides the GPU wiring: GPU type and memory, CPUs and memory."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from toposched.discovery.nvml import GpuInfo
from toposched.topology.errors import TopologyError
from toposched.topology.node import NodeTopology
from toposched.topology.resources import MILLI, Hardware, gpu_type_from_product
from toposched.topology.smi import parse_smi

QUERY_GPUS = ("--query-gpu=name,memory.total", "--format=csv,noheader")
TOPOLOGY = ("topo", "-m")
SMI_TIMEOUT_S = 30.0  # nvidia-smi can take seconds while the driver wakes the GPUs up
MEMINFO = Path("/proc/meminfo")
MIB = 2**20
_UNITS = {"mib": MIB, "gib": 2**30, "kib": 2**10}

# Runs nvidia-smi with these arguments and gives its standard output, or raises SmiUnavailable.
Smi = Callable[[Sequence[str]], str]


class SmiUnavailable(RuntimeError):
    """nvidia-smi is not installed, failed, or printed what cannot be read; the message says."""


def run_nvidia_smi(args: Sequence[str]) -> str:
    """nvidia-smi's output for `args`; SmiUnavailable if it is not there or fails."""
    program = shutil.which("nvidia-smi")
    if program is None:
        raise SmiUnavailable("nvidia-smi is not installed (not on the PATH)")
    command = " ".join(["nvidia-smi", *args])
    try:
        done = subprocess.run(
            [program, *args], capture_output=True, text=True, timeout=SMI_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise SmiUnavailable(f"`{command}` failed: {err}") from None
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise SmiUnavailable(
            f"`{command}` exited {done.returncode}" + (f": {said[0]}" if said else "")
        )
    return done.stdout


def parse_gpu_query(text: str, source: str = "nvidia-smi --query-gpu") -> tuple[GpuInfo, ...]:
    """GPUs from `nvidia-smi --query-gpu=name,memory.total --format=csv,noheader` output:
    one "Tesla V100-SXM2-16GB, 16160 MiB" line each; memory "[N/A]" is 0 (unknown)."""
    gpus = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        product, comma, memory = line.rpartition(",")
        if not comma or not product.strip():
            raise SmiUnavailable(
                f"{source}, line {lineno}: expected 'NAME, MEMORY MiB', got {line.strip()!r}"
            )
        gpus.append(GpuInfo(product.strip(), _memory(memory.strip(), source, lineno)))
    if not gpus:
        raise SmiUnavailable(f"{source}: no GPU listed")
    return tuple(gpus)


def _memory(text: str, source: str, lineno: int) -> int:
    if text.startswith("["):  # [N/A], [Not Supported]
        return 0
    number, _, unit = text.partition(" ")
    scale = _UNITS.get(unit.strip().lower() or "mib")  # with `nounits`: MiB
    if scale is None or not number.isdigit():
        raise SmiUnavailable(
            f"{source}, line {lineno}: memory {text!r} is not a number of MiB such as '16160 MiB'"
        )
    return int(number) * scale


def smi_gpus(smi: Smi = run_nvidia_smi) -> tuple[GpuInfo, ...]:
    """Each GPU's product name and memory, as nvidia-smi lists them."""
    return parse_gpu_query(smi(QUERY_GPUS))


def smi_topology(smi: Smi = run_nvidia_smi) -> NodeTopology:
    """The GPU topology from `nvidia-smi topo -m`, for a machine where NVML cannot be loaded."""
    text = smi(TOPOLOGY)
    try:
        return parse_smi(text, source="nvidia-smi topo -m")
    except TopologyError as err:
        raise SmiUnavailable(str(err)) from None


def gpu_hardware(gpus: Sequence[GpuInfo], known: Iterable[str]) -> Hardware:
    """The GPU part of a node's Hardware: the type most of its GPUs have (short names such as
    V100 where `known` has them) and the least memory of a GPU of that type."""
    names = list(known)
    types = [gpu_type_from_product(gpu.product, names) for gpu in gpus]
    if not types:
        return Hardware()
    common = Counter(types).most_common(1)[0][0]
    memory = min(gpu.memory for gpu, kind in zip(gpus, types, strict=True) if kind == common)
    return Hardware(common, memory)


@dataclass(frozen=True)
class HostResources:
    """What workers may use of this machine: CPUs in millicores, memory in bytes (None:
    unknown, so not counted)."""

    cpus: int
    memory: int | None


def host_resources(meminfo: Path = MEMINFO) -> HostResources:
    """The CPUs this process may run on (its affinity, so a `taskset` or a cpuset counts) and
    the machine's memory (MemTotal)."""
    cpus = len(os.sched_getaffinity(0)) * MILLI
    try:
        text = meminfo.read_text(encoding="ascii", errors="replace")
    except OSError:
        return HostResources(cpus, None)
    return HostResources(cpus, mem_total(text))


def mem_total(meminfo: str) -> int | None:
    """MemTotal in bytes from /proc/meminfo's text ("MemTotal:  16318460 kB"), or None."""
    for line in meminfo.splitlines():
        key, _, value = line.partition(":")
        if key == "MemTotal":
            number, _, unit = value.strip().partition(" ")
            if number.isdigit() and unit.strip() == "kB":
                return int(number) * 1024
    return None
