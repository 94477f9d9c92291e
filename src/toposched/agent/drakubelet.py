"""The kubelet's side of Dynamic Resource Allocation: the DRA plugin the kubelet calls before it
starts a pod whose claims name toposched's devices, and the registration that tells the kubelet
where the plugin is.

NodePrepareResources reads each claim from the API server and answers, for each of its devices
of driver `gpu.toposched.io` in this node's pool, the CDI device name NVIDIA's container
toolkit gives that GPU (`nvidia.com/gpu=<index>`): the container runtime then gives the
container exactly those GPUs. A claim allocated on another node, or naming a device this node
does not have, gets its error and nothing else; results of other drivers are theirs to prepare.
Nothing is set up on the node, so NodeUnprepareResources has nothing to undo.
"""

from __future__ import annotations

import logging
from concurrent import futures
from pathlib import Path
from typing import Any

from toposched.agent.proto import dra, grpc, registration
from toposched.kube.api import ApiError, KubeApi
from toposched.kube.claims import API, DRIVER

log = logging.getLogger(__name__)

DEFAULT_PLUGINS_DIR = "/var/lib/kubelet/plugins"
DEFAULT_REGISTRY_DIR = "/var/lib/kubelet/plugins_registry"
CDI_KIND = "nvidia.com/gpu"  # the CDI kind NVIDIA's container toolkit names its GPUs by
SERVICE = "v1.DRAPlugin"


class DraPlugin:
    """The DRAPlugin service (method names as the .proto has them; gRPC calls them)."""

    def __init__(self, api: KubeApi, node: str, gpus: int) -> None:
        self.api = api
        self.node = node
        self.gpus = gpus

    def NodePrepareResources(self, request: Any, context: Any) -> Any:
        answer = dra()[0].NodePrepareResourcesResponse()
        for claim in request.claims:
            entry = answer.claims[claim.uid]
            try:
                for name, device, index in self._devices(claim):
                    entry.devices.add(
                        request_names=[name],
                        pool_name=self.node,
                        device_name=device,
                        cdi_device_ids=[f"{CDI_KIND}={index}"],
                    )
            except ValueError as err:
                del entry.devices[:]
                entry.error = str(err)
                log.warning("claim %s/%s: %s", claim.namespace, claim.name, err)
        return answer

    def NodeUnprepareResources(self, request: Any, context: Any) -> Any:
        answer = dra()[0].NodeUnprepareResourcesResponse()
        for claim in request.claims:
            answer.claims[claim.uid].error = ""
        return answer

    def _devices(self, claim: Any) -> list[tuple[str, str, int]]:
        """(request, device, GPU index) of the claim's devices that are this driver's; ValueError
        says why the claim cannot be prepared here."""
        shown = f"ResourceClaim {claim.namespace}/{claim.name}"
        path = f"{API}/namespaces/{claim.namespace}/resourceclaims/{claim.name}"
        try:
            obj = self.api.request("GET", path)
        except ApiError as err:
            raise ValueError(f"{shown} cannot be read: {err}") from None
        if (obj.get("metadata") or {}).get("uid") != claim.uid:
            raise ValueError(f"{shown} is another claim now (uid {claim.uid} asked)")
        allocation = (obj.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        found = []
        for result in results:
            if result.get("driver") != DRIVER:
                continue  # another driver's to prepare
            device = str(result.get("device") or "")
            if result.get("pool") != self.node:
                raise ValueError(
                    f"{shown}: {device} is allocated on {result.get('pool')}, not on this node"
                )
            index = device.removeprefix("gpu-")
            if not index.isdigit() or int(index) >= self.gpus:
                raise ValueError(f"{shown}: this node has no device {device!r}")
            found.append((str(result.get("request") or ""), device, int(index)))
        return found


class Registrar:
    """The Registration service the kubelet's plugin watcher asks (GetInfo), and is told by."""

    def __init__(self, endpoint: Path) -> None:
        self.endpoint = endpoint

    def GetInfo(self, request: Any, context: Any) -> Any:
        return registration()[0].PluginInfo(
            type="DRAPlugin", name=DRIVER, endpoint=str(self.endpoint), supported_versions=[SERVICE]
        )

    def NotifyRegistrationStatus(self, request: Any, context: Any) -> Any:
        if not request.plugin_registered:
            log.error("the kubelet did not register the DRA plugin: %s", request.error)
        return registration()[0].RegistrationStatusResponse()


def serve_dra(plugin: DraPlugin, plugins_dir: Path, registry_dir: Path | None) -> tuple[Any, Path]:
    """Serve the plugin on `<plugins_dir>/gpu.toposched.io/dra.sock`, and its registration on
    `<registry_dir>/gpu.toposched.io-reg.sock` (the kubelet's plugin watcher finds it there).
    Returns the gRPC server (stop it) and the plugin's socket."""
    socket = plugins_dir / DRIVER / "dra.sock"
    socket.parent.mkdir(parents=True, exist_ok=True)
    socket.unlink(missing_ok=True)
    server = grpc().server(futures.ThreadPoolExecutor(max_workers=4))
    dra()[1].add_DRAPluginServicer_to_server(plugin, server)
    server.add_insecure_port(f"unix:{socket}")
    if registry_dir is not None:
        registry_dir.mkdir(parents=True, exist_ok=True)
        reg = registry_dir / f"{DRIVER}-reg.sock"
        reg.unlink(missing_ok=True)
        registration()[1].add_RegistrationServicer_to_server(Registrar(socket), server)
        server.add_insecure_port(f"unix:{reg}")
    server.start()
    return server, socket
