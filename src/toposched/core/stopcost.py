"""What stopping a running job costs: the work since its last checkpoint, and its restart."""

from __future__ import annotations

import math


def checkpointed_s(done_s: float, interval_s: float | None) -> float:
    """Of `done_s` seconds of work, what the last checkpoint holds: the job saves every
    `interval_s` seconds of work (None: it cannot checkpoint, so nothing is kept)."""
    if interval_s is None or done_s <= 0:
        return 0.0
    if not 0 < interval_s < math.inf:
        raise ValueError(f"a checkpoint interval must be a positive time, got {interval_s}")
    return math.floor(done_s / interval_s) * interval_s


def lost_s(done_s: float, interval_s: float | None) -> float:
    """The work a stop loses: done since the last checkpoint (all of it without one)."""
    return max(0.0, done_s - checkpointed_s(done_s, interval_s))
