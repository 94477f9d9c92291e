"""How often and how long to retry: the one policy of the client, the binder and the watches."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Retry:
    """`tries` in all (None: until the caller stops), waits growing by `factor` from `first_s`
    up to `max_s`. A wait the server asks for (Retry-After) is honoured as the least, since
    coming back sooner only earns another refusal, but never beyond `max_s`, so that a
    misconfigured proxy cannot park a caller for an hour."""

    tries: int | None = 5
    first_s: float = 0.5
    max_s: float = 8.0
    factor: float = 2.0

    def __post_init__(self) -> None:
        if self.tries is not None and self.tries < 1:
            raise ValueError(f"Retry.tries: at least 1 (the first try), got {self.tries}")
        if not 0 <= self.first_s <= self.max_s:
            raise ValueError(
                f"Retry: 0 <= first_s <= max_s expected, got first_s={self.first_s}, "
                f"max_s={self.max_s}"
            )
        if self.factor < 1:
            raise ValueError(f"Retry.factor: at least 1 (waits never shrink), got {self.factor}")

    def more(self, attempt: int) -> bool:
        """Whether another try follows try `attempt` (tries count from 1)."""
        return self.tries is None or attempt < self.tries

    def wait(self, attempt: int, asked: float | None = None) -> float:
        """Seconds before the try after try `attempt`; `asked`, the server's Retry-After."""
        # The exponent is capped so that a long-running watch's count cannot overflow a float.
        wait = self.first_s * self.factor ** min(attempt - 1, 64)
        if asked is not None:
            wait = max(wait, asked)
        return min(wait, self.max_s)


def retry_after(value: object) -> float | None:
    """The seconds a Retry-After header (or a Status' retryAfterSeconds) asks for, or None
    when it asks none a caller can use: absent, negative, not finite, or an HTTP date."""
    try:
        seconds = float(str(value).strip()) if value is not None else math.nan
    except ValueError:
        return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None
