"""The write guard: every store write of the runtime, and the degraded state a failed one leaves.

When a write fails (the database locked past its busy timeout, the disk full, a read-only file),
the runtime is degraded rather than dead: it refuses changes (`Unavailable`), starts nothing it
has not stored, lets running workers run, and probes the database every `PROBE_S`. Once a write
succeeds it rebuilds the core from the store, as a restart would, and goes on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, NoReturn

from toposched.server.shared import PROBE_S, STORE_ERRORS, RuntimeBroken, Unavailable
from toposched.store import DuplicateJob, Store, write_fault

log = logging.getLogger("toposched.server")


class WriteGuard:
    """Whether the runtime may change anything now (`degraded`, `broken`), and its writes.

    `forget` is called when a write fails: the driver's posted events, decided on the state
    that could not be stored, must not be carried out."""

    def __init__(self, store: Store, lock: threading.RLock, forget: Callable[[], None]) -> None:
        self.store = store
        self.lock = lock
        self.forget = forget
        # Why state cannot be written now; None while it can.
        self.degraded: str | None = None
        self.broken: str | None = None
        self._next_probe = 0.0

    def usable(self) -> None:
        """Raise why no change can be taken now, if one cannot."""
        if self.broken is not None:
            raise RuntimeBroken(self.broken)
        if self.degraded is not None:
            raise Unavailable(self.degraded)

    def write(self, write: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A store write before any decision: a failure changes nothing, but degrades the
        runtime until a write succeeds again. A taken name is no fault of the database."""
        try:
            return write(*args, **kwargs)
        except DuplicateJob:
            raise
        except STORE_ERRORS as err:
            self.degrade(err)

    def after_decision(self, write: Callable[..., None], *args: Any) -> None:
        """A store write the core's state already reflects: if it fails, the two disagree
        until the core is rebuilt from the store."""
        try:
            write(*args)
        except STORE_ERRORS as err:
            self.degrade(err)

    def degrade(self, err: Exception) -> NoReturn:
        """Stop deciding: what the core decided and the store does not hold must not happen
        (decisions stored already are still carried out), and a write that fails must not
        hold every caller for the database's busy timeout."""
        cause = write_fault(err)
        if self.degraded is None:
            log.error(
                "degraded: cannot write the state (%s); refusing changes, running jobs keep "
                "running; trying again every %g s",
                cause,
                PROBE_S,
            )
        self.degraded = cause
        self._next_probe = time.monotonic() + PROBE_S
        self.forget()
        raise Unavailable(cause) from err

    def try_recover(self, rebuild: Callable[[], list[str]]) -> None:
        """Once a write succeeds again, `rebuild` the core from the store, as a restart would
        (it returns one line per job whose fate changed)."""
        if time.monotonic() < self._next_probe:
            return
        self._next_probe = time.monotonic() + PROBE_S
        try:
            # On fresh connections: one opened while the file was read-only stays read-only.
            self.store.engine.dispose()
            self.store.probe()
            with self.lock:
                cause, self.degraded = self.degraded, None
                try:
                    notes = rebuild()
                except BaseException:
                    self.degraded = self.degraded or cause
                    raise
        except Unavailable:
            return
        except STORE_ERRORS as err:
            self.degraded = write_fault(err)
            return
        except Exception as err:
            self.broken = f"could not rebuild the scheduler's state from the database: {err}"
            log.critical("%s; exiting, a restart reloads it", self.broken)
            return
        log.warning("recovered: the state can be written again (%s)", "; ".join(notes) or "-")
