"""This machine as a one-node cluster: its GPUs through NVML or nvidia-smi, or an emulated
topology, with the hardware workers may use (GPU type and memory, CPUs, memory)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from types import ModuleType

from toposched.discovery.files import load_topology
from toposched.discovery.host import (
    HostResources,
    Smi,
    SmiUnavailable,
    gpu_hardware,
    host_resources,
    run_nvidia_smi,
    smi_gpus,
    smi_topology,
)
from toposched.discovery.mig import discover_mig, mig_gpus
from toposched.discovery.nvml import NvmlUnavailable, discover_gpus, discover_topology
from toposched.perf import Catalog
from toposched.topology.cluster import Node
from toposched.topology.mig import mig_table
from toposched.topology.node import NodeTopology
from toposched.topology.presets import preset_hardware
from toposched.topology.resources import Hardware

DEFAULT_EMULATION = "dgx1-v100"


@dataclass(frozen=True)
class LocalNode:
    node: Node
    source: str  # "nvml", "nvidia-smi", or "emulated (...)": what the GPU indices refer to


@cache
def known_gpu_types() -> tuple[str, ...]:
    """The GPU type names of the performance catalog: NVML's product names shorten to these."""
    return tuple(gpu.name for gpu in Catalog.load().gpus.values())


def local_node(
    emulate: str | None,
    name: str | None = None,
    *,
    nvml: ModuleType | object | None = None,
    smi: Smi = run_nvidia_smi,
    host: HostResources | None = None,
) -> LocalNode:
    """The node the server schedules. With `emulate` (a preset or topology file) the jobs still
    run as real processes, with CUDA_VISIBLE_DEVICES naming GPUs this machine may not have.

    The topology comes from NVML (`nvml`, the pynvml module unless given), else from
    nvidia-smi (`smi` runs it), else it is emulated. CPUs and memory are always this machine's
    (`host`, read from the OS unless given).
    """
    node_name = name or socket.gethostname() or "localhost"
    here = host or host_resources()
    if emulate is not None:
        return _emulated(node_name, emulate, here, f"emulated ({emulate})")
    try:
        topology = discover_topology(nvml)
    except NvmlUnavailable as err:
        try:
            topology = smi_topology(smi)
            gpus = gpu_hardware(smi_gpus(smi), known_gpu_types())
        except SmiUnavailable:
            why = str(err).split(";")[0]
            source = f"emulated ({DEFAULT_EMULATION}; {why})"
            return _emulated(node_name, DEFAULT_EMULATION, here, source)
        return LocalNode(_node(node_name, topology, gpus, here), "nvidia-smi")
    gpus = _with_mig(_gpus(nvml, smi), nvml)
    return LocalNode(_node(node_name, topology, gpus, here), "nvml")


def _gpus(nvml: ModuleType | object | None, smi: Smi) -> Hardware:
    """GPU type and memory through NVML; through nvidia-smi if NVML cannot say (unknown if
    neither can: the GPUs are still scheduled, only not by type or memory)."""
    try:
        return gpu_hardware(discover_gpus(nvml), known_gpu_types())
    except NvmlUnavailable:
        try:
            return gpu_hardware(smi_gpus(smi), known_gpu_types())
        except SmiUnavailable:
            return Hardware()


def _with_mig(gpus: Hardware, nvml: ModuleType | object | None) -> Hardware:
    """The GPUs in MIG mode now, as NVML says, in `gpus.mig`: only MIG jobs go there. None
    where NVML cannot say, or the node's GPU model has no MIG table here (its profiles and
    placements unknown, toposched cannot place instances on it)."""
    try:
        states = discover_mig(nvml)
    except NvmlUnavailable:
        return gpus
    if mig_table(gpus.gpu_type, gpus.gpu_memory) is None:
        return gpus
    return replace(gpus, mig=mig_gpus(states))


def _emulated(node_name: str, emulate: str, host: HostResources, source: str) -> LocalNode:
    """An emulated topology: a preset's GPU type and memory (a file's are unknown), this
    machine's CPUs and memory, which the workers really use."""
    topology = load_topology(emulate)  # a file of that name wins over a preset, as here
    gpus = Hardware() if Path(emulate).is_file() else preset_hardware(emulate)
    return LocalNode(_node(node_name, topology, gpus, host), source)


def _node(name: str, topology: NodeTopology, gpus: Hardware, host: HostResources) -> Node:
    hardware = replace(gpus, cpus=host.cpus, memory=host.memory)
    return Node(name, topology, hardware=hardware)


def topology_name(topology: NodeTopology) -> str:
    return topology.name or f"{topology.size} GPUs"
