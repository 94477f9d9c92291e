"""What the agent knows of its node's GPUs, shared by the publisher and the device plugin."""

from __future__ import annotations

import threading
from dataclasses import dataclass

from toposched.topology.node import NodeTopology


@dataclass(frozen=True)
class Gpus:
    """One reading: the topology (None before the first), failed GPUs, whether it is old, and
    each GPU's device minor number (its device file is /dev/nvidia<minor>; none known: the
    index)."""

    topology: NodeTopology | None = None
    unhealthy: frozenset[int] = frozenset()
    stale: bool = False
    minors: tuple[int, ...] = ()

    def minor(self, gpu: int) -> int:
        """The device minor number of GPU `gpu` (its NVML index)."""
        return self.minors[gpu] if 0 <= gpu < len(self.minors) else gpu

    def healthy(self, gpu: int) -> bool:
        """Usable now: known, not failed, and read lately (a stale node takes no new work)."""
        size = self.topology.size if self.topology else 0
        return 0 <= gpu < size and gpu not in self.unhealthy and not self.stale


class NodeState:
    """The latest reading; waiters are woken when it changes (ListAndWatch streams changes)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._gpus = Gpus()
        self._version = 0

    def get(self) -> tuple[Gpus, int]:
        with self._cond:
            return self._gpus, self._version

    def set(self, gpus: Gpus) -> bool:
        """Store a reading; True (and waiters woken) when it differs from the last."""
        with self._cond:
            if gpus == self._gpus:
                return False
            self._gpus = gpus
            self._version += 1
            self._cond.notify_all()
            return True

    def wait_change(self, version: int, timeout_s: float) -> tuple[Gpus, int]:
        """The reading once its version is past `version`, or as it is after `timeout_s`."""
        with self._cond:
            self._cond.wait_for(lambda: self._version != version, timeout=timeout_s)
            return self._gpus, self._version

    def wake(self) -> None:
        """Wake every waiter (so that streams see a stop flag at once)."""
        with self._cond:
            self._version += 1
            self._cond.notify_all()
