"""What the runtime's rooms share: the job states they sort by, their timings, their errors."""

from __future__ import annotations

import time

from sqlalchemy.exc import SQLAlchemyError

from toposched.core import JobState
from toposched.store import StoreError

LIVE = tuple(state.value for state in JobState if not state.terminal)
ENDED = tuple(state.value for state in JobState if state.terminal)
TICK_S = 5.0
PROBE_S = 1.0  # how often a degraded runtime tries a write
PEEK_S = 0.1  # how long a read waits for the core before it answers from the store
STORE_ERRORS = (StoreError, SQLAlchemyError)


def clock_time(t: float) -> str:
    """An event time as the server's local date and time, to the millisecond."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"


class RuntimeBroken(RuntimeError):
    """The runtime could not rebuild its state from the database for a reason other than the
    database (a bug): it takes no more calls, and the server exits so that a restart does."""


class Unavailable(RuntimeError):
    """The server cannot write its state now; nothing of the request was stored. `cause` says
    why (the database locked, the disk full, ...)."""

    def __init__(self, cause: str) -> None:
        super().__init__(
            f"the server cannot store changes now: {cause}; nothing was changed, running jobs "
            "keep running; retry later"
        )
        self.cause = cause


class SubmitRefused(ValueError):
    """A submission the cluster can never run; nothing was stored. `field`: the one at fault."""

    def __init__(self, message: str, field: str = "gpus") -> None:
        super().__init__(message)
        self.field = field


class QueueFull(ValueError):
    """A submission refused because its queue already has as many jobs waiting as the server
    takes; nothing was stored, and the same one may be sent again once some have started."""


class NotFound(LookupError):
    pass


class Conflict(ValueError):
    pass
