"""The kubelet device plugin for GPUs: the `DevicePlugin` service, on a unix socket.

Devices are the node's GPUs, named by their NVML index ("0" ... "7", the indices of the
topology annotation and of `toposched.io/gpus`). GetPreferredAllocation offers the kubelet the
GPUs the scheduler chose for the pod being admitted (found by `podmatch`, among the pods
toposched placed), so that the kubelet picks them, or else the topology-best set among those
free. Allocate gives a container exactly the device IDs the kubelet passed: the kubelet passes
only devices it holds free for that container, so no GPU is ever given to two. Where they are
not the scheduler's choice (its GPUs were not free, or the annotation was edited after the
bind), the container gets the kubelet's and the log says so.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from toposched.agent.podmatch import (
    DEFAULT_SCHEDULERS,
    JSON,
    AllocationBook,
    Claim,
    KubeletPods,
    PodResourcesReader,
    find_claim,
    pod_uid,
)
from toposched.agent.proto import (
    DEFAULT_PLUGIN_DIR,
    DEFAULT_POD_RESOURCES,
    HEALTHY,
    UNHEALTHY,
    grpc,
    messages,
)
from toposched.agent.state import Gpus, NodeState
from toposched.kube.annotations import GPUS, encode_gpus
from toposched.kube.api import ApiError, KubeApi
from toposched.placement import NodePolicy, NodeRequest, PlacementError, make_policy, ring_bandwidth
from toposched.topology.node import NodeTopology

log = logging.getLogger(__name__)

# Opened by the CUDA driver beside /dev/nvidia<i>; given where the node has them.
CONTROL_DEVICES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


@dataclass(frozen=True)
class PluginConfig:
    """Where the plugin serves and what it hands out."""

    node: str
    resource: str = "nvidia.com/gpu"
    plugin_dir: Path = Path(DEFAULT_PLUGIN_DIR)
    dev_dir: Path = Path("/dev")  # the device files' directory on the host, as given to it
    dev_mount: Path | None = None  # where the agent sees that directory (default: dev_dir)
    # The kubelet's pod resources socket: which pod it is admitting (None: guessed, podmatch).
    pod_resources: Path | None = Path(DEFAULT_POD_RESOURCES)
    # The scheduler names toposched runs under: only their pods' toposched.io/gpus is heeded.
    schedulers: tuple[str, ...] = DEFAULT_SCHEDULERS

    def device_exists(self, name: str) -> bool:
        return ((self.dev_mount or self.dev_dir) / name).exists()

    @property
    def socket_name(self) -> str:
        return "toposched-" + self.resource.replace("/", "-").replace(".", "-") + ".sock"

    @property
    def socket(self) -> Path:
        return self.plugin_dir / self.socket_name

    @property
    def book_file(self) -> Path:
        return self.plugin_dir / (self.socket_name.removesuffix(".sock") + "-served.json")


def pods_on(api: KubeApi, node: str) -> Callable[[], list[JSON]]:
    """A function that lists the pods bound to `node`, in every namespace."""
    return lambda: api.list("/api/v1/pods", fieldSelector=f"spec.nodeName={node}")[0]


class Refused(Exception):
    """A request the plugin refuses: the gRPC status code's name, and the message."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class GpuPlugin:
    """The DevicePlugin service (method names as the .proto has them; gRPC calls them)."""

    def __init__(
        self,
        config: PluginConfig,
        state: NodeState,
        pods: Callable[[], list[JSON]],
        book: AllocationBook | None = None,
        policy: NodePolicy | None = None,
    ) -> None:
        self.config = config
        self.state = state
        self.pods = pods
        self.book = book if book is not None else AllocationBook()
        self.policy = policy or make_policy("topology")
        self.kubelet = (
            PodResourcesReader(config.pod_resources, config.resource)
            if config.pod_resources is not None
            else None
        )
        self.stopped = threading.Event()
        self._allocating = threading.Lock()

    # ------------------------------------------------------------------ the service

    def GetDevicePluginOptions(self, request: Any, context: Any) -> Any:
        return options()

    def ListAndWatch(self, request: Any, context: Any) -> Iterator[Any]:
        gpus, version = self.state.get()
        sent: tuple[tuple[str, str, int | None], ...] | None = None
        while not self.stopped.is_set() and context.is_active():
            devices = device_list(gpus)
            if devices != sent:
                sent = devices
                log.info("ListAndWatch: %s", ", ".join(f"{d[0]} {d[1]}" for d in devices))
                yield list_response(devices)
            gpus, version = self.state.wait_change(version, 1.0)

    def GetPreferredAllocation(self, request: Any, context: Any) -> Any:
        m = messages()
        gpus, _ = self.state.get()
        answer = m.PreferredAllocationResponse()
        for req in request.container_requests:
            available = indices(req.available_deviceIDs)
            must = indices(req.must_include_deviceIDs)
            chosen = self._preferred(gpus.topology, available, must, int(req.allocation_size))
            answer.container_responses.add(deviceIDs=[str(g) for g in chosen])
        return answer

    def Allocate(self, request: Any, context: Any) -> Any:
        answer = messages().AllocateResponse()
        # One matching at a time: two calls must not both take the same pod. (The kubelet sends
        # one container per call; a second container refused after a first was served leaves
        # the first recorded.)
        with self._allocating:
            for req in request.container_requests:
                try:
                    gpus = self._allocate(list(req.devices_ids))
                except Refused as err:
                    log.error("Allocate refused: %s", err.message)
                    context.abort(_status(err.code), err.message)
                minors = self.state.get()[0].minor
                answer.container_responses.append(container_response(gpus, self.config, minors))
        return answer

    def PreStartContainer(self, request: Any, context: Any) -> Any:
        return messages().PreStartContainerResponse()

    # ------------------------------------------------------------------ choices

    def _preferred(
        self, topology: NodeTopology | None, available: list[int], must: list[int], size: int
    ) -> list[int]:
        try:
            pods = self.pods()
            claim = self._find(pods, size)
        except ApiError as err:
            log.warning("GetPreferredAllocation: cannot list pods (%s)", err)
            claim = None
        if claim is not None and not claim.error:
            if set(must) <= set(claim.gpus) <= set(available):
                return list(claim.gpus)
            log.warning(
                "GetPreferredAllocation: pod %s was given GPUs %s by toposched, but the kubelet "
                "offers %s (must keep %s): the best of those is preferred",
                claim.pod,
                encode_gpus(claim.gpus),
                encode_gpus(available),
                encode_gpus(must),
            )
        if topology is None:
            return (must + [g for g in available if g not in must])[:size]
        return best_set(self.policy, topology, available, must, size)

    def _allocate(self, ids: Sequence[str]) -> tuple[int, ...]:
        gpus, _ = self.state.get()
        offered = indices(ids)
        if len(offered) != len(ids):
            raise Refused("INVALID_ARGUMENT", f"device IDs {list(ids)} are not GPU indices")
        try:
            pods = self.pods()
        except ApiError as err:
            # Without the pod the scheduler's choice is unknown: giving other GPUs would break
            # its books, so the container is refused (the kubelet fails the pod's admission).
            raise Refused(
                "UNAVAILABLE", f"cannot list the pods of node {self.config.node}: {err}"
            ) from err
        self.book.keep_only([pod_uid(p) for p in pods])
        claim = self._find(pods, len(ids))
        if claim is None:
            check_usable(gpus, offered, self.config.node, "the kubelet")
            log.info("Allocate: no toposched pod asks %d GPUs; kubelet's %s", len(ids), offered)
            return tuple(offered)
        chosen = self._claimed(gpus, claim)
        check_usable(gpus, offered, self.config.node, "the kubelet")
        self.book.record(claim.uid)
        given = tuple(sorted(offered))
        # The kubelet passes only devices it holds free for this container: any other GPU,
        # the scheduler's included, may be another container's (toposched's books and the
        # kubelet's disagree, or the annotation was written by someone else after the bind).
        if given != chosen:
            log.warning(
                "Allocate: pod %s gets the kubelet's GPUs %s, not %s that %s names: the kubelet "
                "did not pass those (not free for the pod, or the annotation was changed)",
                claim.pod,
                encode_gpus(given),
                encode_gpus(chosen),
                GPUS,
            )
        else:
            log.info("Allocate: pod %s gets %s", claim.pod, chosen)
        return given

    def _find(self, pods: list[JSON], size: int) -> Claim | None:
        config = self.config
        admitting = self._admitting()
        return find_claim(pods, size, config.resource, self.book, admitting, config.schedulers)

    def _admitting(self) -> KubeletPods | None:
        """What the kubelet has taken in, or None (the pod is then guessed, oldest first)."""
        return self.kubelet.pods() if self.kubelet is not None else None

    def _claimed(self, gpus: Gpus, claim: Claim) -> tuple[int, ...]:
        if claim.error:
            raise Refused("INVALID_ARGUMENT", claim.error)
        check_usable(gpus, claim.gpus, self.config.node, f"pod {claim.pod}: {GPUS}")
        return claim.gpus


def check_usable(gpus: Gpus, chosen: Sequence[int], node: str, who: str) -> None:
    """Refuse GPUs the node does not have, or that are unhealthy (or of a stale reading)."""
    size = gpus.topology.size if gpus.topology else 0
    for g in chosen:
        if not 0 <= g < size:
            have = f"GPUs 0-{size - 1}" if size else "no known GPU"
            raise Refused("INVALID_ARGUMENT", f"{who} names GPU {g}, but node {node} has {have}")
        if not gpus.healthy(g):
            why = "stale (NVML cannot be read)" if gpus.stale else "unhealthy"
            raise Refused("FAILED_PRECONDITION", f"{who} names GPU {g} of node {node}: {why}")


def best_set(
    policy: NodePolicy, topology: NodeTopology, available: list[int], must: list[int], size: int
) -> list[int]:
    """The topology-best `size` GPUs among `available` that include `must`."""
    if not must:
        busy = frozenset(range(topology.size)) - set(available)
        try:
            return list(policy.place(NodeRequest(topology, size, busy)).gpus)
        except PlacementError:  # more asked than offered: the kubelet does not do that
            return available[:size]
    # The policy cannot be told to keep GPUs; add the GPU that gives the best ring, one by one.
    chosen = list(must)
    for _ in range(size - len(chosen)):
        rest = [g for g in available if g not in chosen]
        if not rest:
            break
        chosen.append(max(rest, key=lambda g: (ring_bandwidth(topology, [*chosen, g]) or 0, -g)))
    return sorted(chosen)


def indices(ids: Sequence[str]) -> list[int]:
    """The GPU indices among device IDs (others left out)."""
    return [int(i) for i in ids if i.isdigit()]


def options() -> Any:
    return messages().DevicePluginOptions(
        pre_start_required=False, get_preferred_allocation_available=True
    )


def device_list(gpus: Gpus) -> tuple[tuple[str, str, int | None], ...]:
    """(ID, health, NUMA node) of each GPU; none before the topology is known."""
    if gpus.topology is None:
        return ()
    numa = gpus.topology.numa
    return tuple(
        (str(g), HEALTHY if gpus.healthy(g) else UNHEALTHY, numa[g] if numa else None)
        for g in range(gpus.topology.size)
    )


def list_response(devices: Sequence[tuple[str, str, int | None]]) -> Any:
    m = messages()
    answer = m.ListAndWatchResponse()
    for gpu_id, health, numa in devices:
        device = answer.devices.add(ID=gpu_id, health=health)
        if numa is not None:
            device.topology.nodes.add(ID=numa)
    return answer


def container_response(
    gpus: Sequence[int], config: PluginConfig, minor: Callable[[int], int] = int
) -> Any:
    """The container's device files and environment for `gpus` (host indices). A GPU's
    device file is named by its minor number (`minor`: the driver's, which NVML reports), not
    its index: the two orders can differ.

    NVIDIA_VISIBLE_DEVICES names the host GPUs for the NVIDIA container runtime, which shows the
    container those alone; CUDA numbers what it sees from 0, in PCI order with
    CUDA_DEVICE_ORDER=PCI_BUS_ID (the NVML order of the indices), so CUDA_VISIBLE_DEVICES is
    0..k-1: the host indices would name devices the container does not have.
    """
    m = messages()
    answer = m.ContainerAllocateResponse()
    for g in gpus:
        answer.devices.add(
            container_path=f"/dev/nvidia{minor(g)}",
            host_path=str(config.dev_dir / f"nvidia{minor(g)}"),
            permissions="rw",
        )
    for name in CONTROL_DEVICES:
        if config.device_exists(name):
            answer.devices.add(
                container_path=f"/dev/{name}",
                host_path=str(config.dev_dir / name),
                permissions="rw",
            )
    host = encode_gpus(gpus)
    answer.envs["NVIDIA_VISIBLE_DEVICES"] = host
    answer.envs["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(gpus)))
    answer.envs["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    answer.envs["TOPOSCHED_GPUS"] = host
    answer.annotations[GPUS] = host
    return answer


def _status(code: str) -> Any:
    return getattr(grpc().StatusCode, code)
