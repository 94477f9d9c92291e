"""The node agent's loop: publish the GPUs every interval, keep the plugin served and registered."""

from __future__ import annotations

import logging
import threading
import time

from toposched.agent.activity import PodActivity
from toposched.agent.publisher import Publisher
from toposched.agent.server import PluginServer

log = logging.getLogger(__name__)

# How often the plugin's socket and kubelet.sock are looked at (a kubelet restart is seen
# within this), whatever the publishing interval.
SOCKET_CHECK_S = 0.5


class NodeAgent:
    """Runs the publisher and the plugin server until `stop` is set."""

    def __init__(
        self,
        publisher: Publisher,
        server: PluginServer,
        interval_s: float,
        activity: PodActivity | None = None,
    ) -> None:
        self.publisher = publisher
        self.server = server
        self.interval_s = interval_s
        self.activity = activity  # GPU metrics per pod and idle pods (with NVML only)
        self.stop = threading.Event()

    def run(self) -> None:
        next_poll = 0.0
        try:
            while not self.stop.is_set():
                now = time.monotonic()
                if now >= next_poll:
                    self.publisher.step()
                    self._sample()
                    next_poll = now + self.interval_s
                # The plugin waits for the first topology: it has no device to list before.
                if self.publisher.state.get()[0].topology is not None:
                    self.server.check()
                self.stop.wait(min(SOCKET_CHECK_S, max(0.0, next_poll - time.monotonic())))
        finally:
            self.server.stop()
            log.info("node agent stopped")

    def _sample(self) -> None:
        if self.activity is None:
            return
        try:
            self.activity.step()
        except Exception:  # the API or NVML: the plugin and the topology must go on regardless
            log.exception("sampling the pods' GPU activity failed; trying again next poll")
