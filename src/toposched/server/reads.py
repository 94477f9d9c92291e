"""The runtime's reads: the core's answers when it can be had at once, else the store's."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from toposched.common.driver import Driver
from toposched.core import JobSpec
from toposched.server.guard import WriteGuard
from toposched.server.shared import LIVE, PEEK_S, NotFound, clock_time
from toposched.store import JobRow, Store


@dataclass(frozen=True)
class Snapshot:
    """The core's state as reads show it: who holds each GPU, the sick GPUs, the node's labels,
    (guaranteed, used) GPUs and waiting jobs per queue."""

    owners: dict[int, str] = field(default_factory=dict)
    # Each shared GPU's jobs and their (thousandths, MiB): a shared GPU has no owner.
    shares: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict)
    sick: frozenset[int] = frozenset()
    labels: dict[str, str] = field(default_factory=dict)
    held: tuple[int, int] = (0, 0)  # millicores and bytes the node's jobs hold
    usage: dict[str, tuple[int, int]] = field(default_factory=dict)
    waiting: dict[str, int] = field(default_factory=dict)
    fresh: bool = True


class Reads:
    """What the API reads of the runtime. The core is read through the driver's `view` (a new
    one after each rebuild), only under the runtime's lock and while the guard says it is
    current."""

    def __init__(
        self,
        driver: Driver,
        lock: threading.RLock,
        guard: WriteGuard,
        store: Store,
        node: str,
    ) -> None:
        self.driver = driver
        self.lock = lock
        self.guard = guard
        self.store = store
        self.node = node
        self._snapshot = Snapshot()

    @contextmanager
    def peek(self) -> Iterator[bool]:
        """The core for a read, if it can be had within PEEK_S and is current: yields False
        (and holds nothing) when a change holds it longer, e.g. one waiting for a locked
        database, or while it is degraded; the caller then answers from the store."""
        got = self.lock.acquire(timeout=PEEK_S)
        try:
            yield got and self.guard.degraded is None
        finally:
            if got:
                self.lock.release()

    def job_row(self, name: str) -> JobRow:
        """Job `name` as stored; NotFound if there is none."""
        row = self.store.job(name)
        if row is None:
            raise NotFound(f"no job named {name!r}")
        return row

    def reasons(self, rows: Iterable[JobRow]) -> dict[str, str]:
        """The core's current reason for each live job (why it waits), else the stored one."""
        rows = list(rows)
        with self.peek() as current:
            return self._reasons_held(rows, current)

    def reason_held(self, row: JobRow) -> str:
        """The reason of one job, for a caller that holds the lock."""
        return self._reasons_held([row], self.guard.degraded is None)[row.name]

    def _reasons_held(self, rows: list[JobRow], current: bool) -> dict[str, str]:
        found = {row.name: row.reason for row in rows}
        if current:
            view = self.driver.view
            live = (row.name for row in rows if row.state in LIVE)
            found.update(view.reasons(name for name in live if view.knows(name)))
        return found

    def explain(self, name: str) -> tuple[JobRow, str]:
        row = self.job_row(name)
        with self.peek() as current:
            if current and self.driver.view.knows(row.name):
                return row, self.driver.view.explain(name, clock_time)
        lines = [f"job {name}: {row.state}; queue {row.queue}, priority {row.priority}"]
        lines.extend(
            f"  {clock_time(h.time)}: {h.old or '-'} -> {h.new}: {h.reason}"
            for h in self.store.history(name)
        )
        return row, "\n".join(lines)

    def snapshot(self) -> Snapshot:
        """What the core holds (GPUs, labels, queues), for reads: the last one taken when the
        core cannot be had within PEEK_S (`fresh` is then False)."""
        with self.peek() as current:
            if current:
                view = self.driver.view
                # Counted by state: a job waiting for jobs it runs after is in no waiting list.
                waiting = {q: n for q, (n, _) in view.waiting_and_running().items() if n}
                self._snapshot = Snapshot(
                    owners={gpu: job for (_, gpu), job in view.owners().items()},
                    shares={gpu: jobs for (_, gpu), jobs in view.shares().items()},
                    sick=frozenset(view.unhealthy(self.node)),
                    labels=dict(view.labels(self.node)),
                    held=view.held(self.node),
                    usage=view.queues(),
                    waiting=waiting,
                )
                return self._snapshot
        return replace(self._snapshot, fresh=False)

    def queues_of(self, names: set[str]) -> dict[str, str]:
        """The queue of each job named that the core holds (none while it is busy)."""
        found: dict[str, str] = {}
        with self.peek() as current:
            view = self.driver.view
            for name in names if current else ():
                spec = view.job(name).spec if view.knows(name) else None
                if spec is not None:
                    found[name] = spec.queue
        return found

    def spec_of(self, name: str) -> JobSpec | None:
        """The core's spec of a job it holds, or None (not held, or the core busy or degraded)."""
        with self.peek() as current:
            if current and self.driver.view.knows(name):
                return self.driver.view.job(name).spec
        return None
