"""ApiError: a request to an API (toposched's server, or Kubernetes') that failed."""

from __future__ import annotations

from typing import Any

UNREACHABLE = 0  # ApiError.status when no HTTP answer came back


class ApiError(RuntimeError):
    """A request that failed: `status` is the HTTP status, or UNREACHABLE (0) when no answer
    came; `message` what went wrong, in words a person can act on; `reason` the Kubernetes
    Status reason (Conflict, NotFound, Expired, TooManyRequests ...) or, for an answer that is
    no Status, the HTTP reason phrase, and empty from toposched's server, whose `detail` is
    already a sentence; `retry_after` the seconds the server asked to wait before trying again,
    if it did; `details` the decoded error body; `fields` (location, message) per bad field of
    a 422."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        reason: str = "",
        retry_after: float | None = None,
        details: Any = None,
        fields: list[tuple[str, str]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.reason = reason
        self.retry_after = retry_after
        self.details = details
        self.fields = fields or []

    def __str__(self) -> str:
        # A Status is read as kubectl shows it, its code and reason first.
        return f"{self.status} {self.reason}: {self.message}" if self.reason else self.message
