"""The core's two errors: an event it refuses, and books that disagree (a bug)."""

from __future__ import annotations

from typing import Any


class SchedulingError(ValueError):
    """An event the core cannot take (unknown job, duplicate name); nothing was changed."""


class BatchRefused(SchedulingError):
    """One event of a batch was refused (`cause`, which changed nothing); the events before it
    were taken, and `actions` is the core's answer to them, to be carried out all the same."""

    def __init__(self, cause: SchedulingError, actions: list[Any]) -> None:
        super().__init__(str(cause))
        self.cause = cause
        self.actions = actions


class InvariantViolation(AssertionError):
    """validate mode found the books inconsistent: a bug in the core."""
