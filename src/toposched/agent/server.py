"""Serves the plugin on its socket and keeps it registered with the kubelet.

The kubelet removes every socket in its plugin directory when it starts, and makes a new
`kubelet.sock`; it then knows no plugin until each registers again. `check`, called every
second or so, notices either (the plugin's socket gone, or kubelet.sock another file than the
one registered with) and serves again on a new socket and registers again.
"""

from __future__ import annotations

import contextlib
import logging
import os
from concurrent import futures
from typing import Any

from toposched.agent.plugin import GpuPlugin, options
from toposched.agent.proto import KUBELET_SOCKET, VERSION, grpc, messages, services

log = logging.getLogger(__name__)

REGISTER_TIMEOUT_S = 5.0


class PluginServer:
    """The gRPC server of one GpuPlugin, and its registration."""

    def __init__(self, plugin: GpuPlugin) -> None:
        self.plugin = plugin
        self.config = plugin.config
        self._server: Any = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._registered_with: tuple[int, int] | None = None
        self._last_error = ""

    @property
    def registered(self) -> bool:
        return self._registered_with is not None

    def check(self) -> bool:
        """Serve and register if needed; True when registered with the kubelet as it is now."""
        kubelet = _file_id(self.config.plugin_dir / KUBELET_SOCKET)
        if self._server is None or not self.config.socket.exists():
            if self._server is not None:
                log.warning(
                    "%s was removed (the kubelet restarted?): serving again", self.config.socket
                )
            self._serve()
            self._registered_with = None
        elif self._registered_with is not None and kubelet != self._registered_with:
            log.warning("kubelet.sock changed (the kubelet restarted): registering again")
            self._serve()
            self._registered_with = None
        if self._registered_with is None and kubelet is not None:
            self._register(kubelet)
        return self.registered

    def stop(self) -> None:
        self.plugin.stopped.set()
        self.plugin.state.wake()
        self._stop_server()

    def _serve(self) -> None:
        self._stop_server()
        self.config.plugin_dir.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):
            self.config.socket.unlink()  # left by an agent that did not stop cleanly
        # Each ListAndWatch stream holds a thread for its life; the kubelet opens one.
        self._executor = futures.ThreadPoolExecutor(max_workers=8)
        server = grpc().server(self._executor)
        services().add_DevicePluginServicer_to_server(self.plugin, server)
        server.add_insecure_port(f"unix:{self.config.socket}")
        server.start()
        self._server = server
        log.info("serving the %s device plugin on %s", self.config.resource, self.config.socket)

    def _stop_server(self) -> None:
        if self._server is not None:
            self._server.stop(grace=0.5).wait()
            self._server = None
        if self._executor is not None:
            # gRPC leaves the executor it was given running; streams end within a second.
            self._executor.shutdown(wait=False)
            self._executor = None

    def _register(self, kubelet: tuple[int, int]) -> None:
        request = messages().RegisterRequest(
            version=VERSION,
            endpoint=self.config.socket_name,
            resource_name=self.config.resource,
            options=options(),
        )
        target = f"unix:{self.config.plugin_dir / KUBELET_SOCKET}"
        try:
            with grpc().insecure_channel(target) as channel:
                services().RegistrationStub(channel).Register(request, timeout=REGISTER_TIMEOUT_S)
        except grpc().RpcError as err:
            message = f"cannot register with the kubelet at {target}: {err}"
            if message != self._last_error:  # once, not every second
                log.error("%s; trying again", message)
            self._last_error = message
            return
        self._registered_with = kubelet
        self._last_error = ""
        log.info(
            "registered %s with the kubelet (endpoint %s)", self.config.resource, request.endpoint
        )


def _file_id(path: os.PathLike[str]) -> tuple[int, int] | None:
    """Which file is at `path` (inode, change time), or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_ctime_ns)
