"""Deleting jobs: an ended one at once, a live one once it has ended; its name is free again."""

from __future__ import annotations

import logging
import secrets
import shutil
import threading
from collections.abc import Callable

from toposched.common.driver import Driver
from toposched.executors.local import LocalExecutor
from toposched.server.guard import WriteGuard
from toposched.server.launcher import Launcher
from toposched.server.reads import Reads
from toposched.server.shared import ENDED, LIVE, Conflict
from toposched.store import JobRow, Store

log = logging.getLogger("toposched.server")


class Deletes:
    """Removes jobs from the store, the core and the disk. `deleting`: the jobs deleted while
    live, removed once they have ended (stored with `delete_when_ended`, so that a restart
    still removes them)."""

    def __init__(
        self,
        driver: Driver,
        lock: threading.RLock,
        guard: WriteGuard,
        store: Store,
        reads: Reads,
        executor: LocalExecutor,
        launcher: Launcher,
        clock: Callable[[], float],
    ) -> None:
        self.driver = driver
        self.lock = lock
        self.guard = guard
        self.store = store
        self.reads = reads
        self.executor = executor
        self.launcher = launcher
        self.clock = clock
        self.deleting: set[str] = set()
        # Those removed in the last feed, for the answer of the delete that ended them.
        self._just_removed: dict[str, JobRow] = {}

    def asked(self, names: set[str]) -> None:
        """The live jobs whose delete is stored (a restart): removed once they have ended."""
        self.deleting = set(names)

    def remove(self, name: str) -> JobRow:
        """Delete ended job `name` from the store and the core: its name is free again.
        Returns the job as it was; Conflict for a live one (cancel it first)."""
        with self.lock:
            self.guard.usable()
            row = self.reads.job_row(name)
            if row.state in LIVE or not self.removed(row):
                raise Conflict(f"job {name!r} is {row.state}: only an ended job can be deleted")
            return row

    def delete_live(self, name: str, cancel: Callable[[str], JobRow]) -> tuple[JobRow, bool]:
        """Cancel live job `name` (with `cancel`) and remove it once it has ended (at once if
        cancelling ended it): the job as it is now, and whether it is removed already."""
        with self.lock:
            self.guard.usable()
            row = self.reads.job_row(name)
            if row.state not in LIVE:
                raise Conflict(f"job {name!r} has already ended ({row.state})")
            self.guard.write(self.store.delete_when_ended, name)
            self.deleting.add(name)
            after = cancel(name)
            removed = self._just_removed.pop(name, None)
            return (removed, True) if removed is not None else (after, False)

    def removed(self, row: JobRow) -> bool:
        """Remove ended job `row` from the store, the core and the disk; whether it was."""
        if not self.guard.write(self.store.remove_job, row.name, ENDED, self.clock()):
            return False
        self.driver.core.forget(row.name)
        self._discard_runs(row.name)
        self.deleting.discard(row.name)
        log.info("job %s: %s -> deleted: its name is free again", row.name, row.state)
        return True

    def remove_deleted(self) -> None:
        """Remove the jobs deleted while live that have ended since."""
        for name in sorted(self.deleting):
            row = self.store.job(name)
            if row is None:
                self.deleting.discard(name)
            elif row.state in ENDED and self.removed(row):
                self._just_removed[name] = row

    def _discard_runs(self, name: str) -> None:
        """A deleted job's runs (logs, pid and exit files) and checkpoints go with it: a new job
        of its name would find them (its attempt 0 refused as started, the old checkpoint
        loaded). Moved aside at once, removed by the loop thread (a checkpoint may be large)."""
        home = self.executor.run_dir(name, 0).parent
        trash = home.with_name(f".deleted-{name}-{secrets.token_hex(4)}")
        try:
            home.rename(trash)
        except FileNotFoundError:
            return  # it never started
        except OSError as err:
            log.warning("job %s: deleted, but its runs stay in %s: %s", name, home, err)
            return
        self.launcher.later(shutil.rmtree, trash, True)
