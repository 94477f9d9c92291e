"""The core's two errors: an event it refuses, and books that disagree (a bug)."""

from __future__ import annotations


class SchedulingError(ValueError):
    """An event the core cannot take (unknown job, duplicate name); nothing was changed."""


class InvariantViolation(AssertionError):
    """validate mode found the books inconsistent: a bug in the core."""
