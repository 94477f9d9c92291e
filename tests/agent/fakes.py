"""Stand-ins for the agent's tests: an NVML with health, and a kubelet's plugin side (its
device plugin registration and pod resources APIs; no kubelet can run here, it needs a
container runtime)."""

from __future__ import annotations

import queue
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.fakes.fake_nvml import FakeHandle, FakeNvml, FakeNvmlError, FakePciInfo
from toposched.agent.proto import KUBELET_SOCKET, grpc, messages, pod_resources, services

NVML_ERROR_TIMEOUT = 10
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999


@dataclass(frozen=True)
class FakeEventData:
    """pynvml's c_nvmlEventData_t: the device handle, the event type, the XID."""

    device: FakeHandle
    eventType: int
    eventData: int


class HealthNvml(FakeNvml):
    """FakeNvml with what health checks use: XID events, lost GPUs, and NVML failing whole.

    `xid(gpu, code)` queues a critical XID event; a GPU in `lost` answers GPU_IS_LOST; with
    `failing` set every call (nvmlInit included) answers UNKNOWN, as when the driver goes away.
    """

    NVML_ERROR_TIMEOUT = NVML_ERROR_TIMEOUT
    NVML_ERROR_GPU_IS_LOST = NVML_ERROR_GPU_IS_LOST
    nvmlEventTypeXidCriticalError = 0x8

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lost: set[int] = set()
        self.failing = False
        self.events: queue.Queue[FakeEventData] = queue.Queue()
        self.registered: set[int] = set()

    def xid(self, gpu: int, code: int) -> None:
        if gpu in self.registered:
            self.events.put(
                FakeEventData(FakeHandle(gpu), self.nvmlEventTypeXidCriticalError, code)
            )

    def nvmlInit(self) -> None:
        self._fail()
        super().nvmlInit()

    def nvmlDeviceGetCount(self) -> int:
        self._fail()
        return super().nvmlDeviceGetCount()

    def nvmlDeviceGetPciInfo(self, handle: FakeHandle) -> FakePciInfo:
        self._fail()
        if handle.index in self.lost:
            raise FakeNvmlError(NVML_ERROR_GPU_IS_LOST)
        return super().nvmlDeviceGetPciInfo(handle)

    def nvmlDeviceGetIndex(self, handle: FakeHandle) -> int:
        self._check()
        return handle.index

    def nvmlEventSetCreate(self) -> object:
        self._check()
        return object()

    def nvmlDeviceRegisterEvents(self, handle: FakeHandle, types: int, events: object) -> None:
        self._check()
        assert types & self.nvmlEventTypeXidCriticalError
        self.registered.add(handle.index)

    def nvmlEventSetWait_v2(self, events: object, timeout_ms: int) -> FakeEventData:
        self._fail()
        try:
            return self.events.get_nowait()
        except queue.Empty:
            raise FakeNvmlError(NVML_ERROR_TIMEOUT) from None

    def nvmlEventSetFree(self, events: object) -> None:
        pass

    def _fail(self) -> None:
        if self.failing:
            raise FakeNvmlError(NVML_ERROR_UNKNOWN)


class _Registration:
    """The kubelet's Registration service: records each request."""

    def __init__(self, requests: queue.Queue[Any]) -> None:
        self.requests = requests

    def Register(self, request: Any, context: Any) -> Any:
        self.requests.put(request)
        return messages().Empty()


class _PodResources:
    """The kubelet's pod resources API: the pods it has taken in, and their devices."""

    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: Any) -> Any:
        m = pod_resources()[0]
        answer = m.ListPodResourcesResponse()
        for (ns, name), containers in sorted(self.kubelet.taken.items()):
            pod = answer.pod_resources.add(name=name, namespace=ns)
            for container, ids in containers.items():
                entry = pod.containers.add(name=container)
                if ids:
                    entry.devices.add(resource_name=RESOURCE, device_ids=ids)
        return answer


RESOURCE = "nvidia.com/gpu"


@dataclass
class FakeKubelet:
    """The kubelet's side of the device plugin API, on `plugin_dir`/kubelet.sock, and its pod
    resources API on `pod_resources_socket`: `take_in` a pod as the kubelet does when it starts
    admitting it, `gave` a container its devices, or `admit` a whole pod as the kubelet does
    (GetPreferredAllocation, then Allocate, container by container)."""

    plugin_dir: Path
    requests: queue.Queue[Any] = field(default_factory=queue.Queue)
    server: Any = None
    # (namespace, name) -> container -> the device IDs it was given (none yet: [])
    taken: dict[tuple[str, str], dict[str, list[str]]] = field(default_factory=dict)

    @property
    def pod_resources_socket(self) -> Path:
        return self.plugin_dir / "pod-resources.sock"

    def start(self) -> FakeKubelet:
        server = grpc().server(_executor())
        services().add_RegistrationServicer_to_server(_Registration(self.requests), server)
        pod_resources()[1].add_PodResourcesListerServicer_to_server(_PodResources(self), server)
        server.add_insecure_port(f"unix:{self.plugin_dir / KUBELET_SOCKET}")
        server.add_insecure_port(f"unix:{self.pod_resources_socket}")
        server.start()
        self.server = server
        return self

    def take_in(self, pod: dict[str, Any]) -> None:
        """The kubelet starts admitting `pod`: it lists it, its containers without devices."""
        meta = pod["metadata"]
        names = [c["name"] for c in pod["spec"]["containers"]]
        self.taken[(meta.get("namespace") or "default", meta["name"])] = {n: [] for n in names}

    def gave(self, namespace: str, name: str, container: str, ids: list[str]) -> None:
        self.taken[(namespace, name)][container] = list(ids)

    def free(self, size: int = 8) -> list[int]:
        """The devices no container has been given."""
        given = {int(i) for pod in self.taken.values() for ids in pod.values() for i in ids}
        return [g for g in range(size) if g not in given]

    def admit(self, stub: Any, pod: dict[str, Any]) -> list[Any]:
        """Admit `pod` as the kubelet does: take it in, then for each container that asks GPUs,
        ask the plugin which devices it prefers among the free ones, allocate those, and
        record them. The Allocate answers, by container."""
        from tests.agent.test_plugin import allocate, preferred

        self.take_in(pod)
        meta = pod["metadata"]
        answers = []
        for container in pod["spec"]["containers"]:
            count = int((container.get("resources") or {}).get("limits", {}).get(RESOURCE, 0))
            if not count:
                continue
            chosen = [str(g) for g in preferred(stub, self.free(), count)]
            answers.append(allocate(stub, *chosen))
            self.gave(meta.get("namespace") or "default", meta["name"], container["name"], chosen)
        return answers

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop(grace=0).wait()
            self.server = None
        (self.plugin_dir / KUBELET_SOCKET).unlink(missing_ok=True)
        self.pod_resources_socket.unlink(missing_ok=True)

    def restart(self) -> None:
        """As a kubelet starting again: every socket in the directory gone, a new kubelet.sock."""
        self.stop()
        for sock in self.plugin_dir.glob("*.sock"):
            sock.unlink()
        self.start()

    def registration(self, timeout_s: float = 5.0) -> Any:
        return self.requests.get(timeout=timeout_s)

    def plugin(self, endpoint: str) -> AbstractContextManager[Any]:
        """A client of the plugin's socket, as the kubelet makes after a registration."""
        return _stub(self.plugin_dir / endpoint)


@contextmanager
def _stub(path: Path) -> Iterator[Any]:
    with grpc().insecure_channel(f"unix:{path}") as channel:
        yield services().DevicePluginStub(channel)


def _executor() -> Any:
    from concurrent import futures

    return futures.ThreadPoolExecutor(max_workers=4)


@contextmanager
def short_tmp_dir() -> Iterator[Path]:
    """A fresh directory with a short path: a unix socket's path must fit in 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ts-agent-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
