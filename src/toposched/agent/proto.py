"""The kubelet APIs the agent speaks, built at run time from their .proto files: the device
plugin API (deviceplugin.proto), the pod resources API (podresources.proto), and for Dynamic
Resource Allocation the DRA plugin API (draplugin.proto) and plugin registration
(pluginregistration.proto).

The project keeps no generated code in git, so the Python modules are made from the .proto when
first needed, by `grpc.protos_and_services` (grpcio-tools, in the `kube` extra). It compiles in
memory: nothing is written, which the agent's container needs (its root filesystem is
read-only) and which leaves no cache to go stale when the .proto changes. The generated modules
are untyped; they are reached only through this module, as `Any`.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

VERSION = "v1beta1"
HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"
KUBELET_SOCKET = "kubelet.sock"
DEFAULT_PLUGIN_DIR = "/var/lib/kubelet/device-plugins"
DEFAULT_POD_RESOURCES = "/var/lib/kubelet/pod-resources/kubelet.sock"
# Resolved against sys.path, where the installed package (or src/ in a checkout) lies.
PROTO = "toposched/agent/deviceplugin.proto"
POD_RESOURCES_PROTO = "toposched/agent/podresources.proto"
DRA_PROTO = "toposched/agent/draplugin.proto"
REGISTRATION_PROTO = "toposched/agent/pluginregistration.proto"


def grpc() -> Any:
    """The `grpc` module (the `kube` extra), which ships no types."""
    return importlib.import_module("grpc")


@functools.cache
def _load() -> tuple[Any, Any]:
    return grpc().protos_and_services(PROTO)  # type: ignore[no-any-return]


def messages() -> Any:
    """The message classes (RegisterRequest, Device, AllocateResponse ...)."""
    return _load()[0]


def services() -> Any:
    """The stubs, servicer bases and `add_*_to_server` functions of both services."""
    return _load()[1]


@functools.cache
def _pod_resources() -> tuple[Any, Any]:
    return grpc().protos_and_services(POD_RESOURCES_PROTO)  # type: ignore[no-any-return]


def pod_resources() -> tuple[Any, Any]:
    """The pod resources API: its messages, and its stub and servicer functions."""
    return _pod_resources()


@functools.cache
def dra() -> tuple[Any, Any]:
    """The DRA plugin API: its messages, and its stub and servicer functions."""
    return grpc().protos_and_services(DRA_PROTO)  # type: ignore[no-any-return]


@functools.cache
def registration() -> tuple[Any, Any]:
    """The plugin registration API: its messages, and its stub and servicer functions."""
    return grpc().protos_and_services(REGISTRATION_PROTO)  # type: ignore[no-any-return]
