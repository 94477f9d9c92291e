"""Durations as people write them: `30m`, `10s`, `1h30m`, `2d`, or plain seconds."""

from __future__ import annotations

import math
import re

_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
# Digits 0-9 only: float() and \d also read `1_0` and other scripts' digits (`\u0661\u0662`).
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([dhms])", re.ASCII)


class DurationError(ValueError):
    """A duration that cannot be read; the message shows what was given."""


def parse_duration(value: str | float, what: str = "duration") -> float:
    """Seconds in `value`: a number of seconds, or parts such as `1h30m` (d, h, m, s), > 0."""
    if isinstance(value, bool):
        raise DurationError(f"{what} must be a time such as 30m or 45s, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip().lower()
        try:
            if not text.isascii() or "_" in text:
                raise ValueError(text)
            seconds = float(text)
        except ValueError:
            parts = _PART.findall(text)
            if not parts or "".join(n + u for n, u in parts) != text:
                raise DurationError(
                    f"{what} must be a time such as 30m, 1h30m or 45s, got {value!r}"
                ) from None
            seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not 0 < seconds < math.inf:
        raise DurationError(f"{what} must be a positive time, got {value!r}")
    return seconds


def duration_text(seconds: float) -> str:
    """The shortest of `parse_duration`'s spellings for whole seconds: 1800 -> `30m`."""
    whole = round(seconds)
    if whole != seconds or whole <= 0:
        return f"{seconds:g}s"
    parts = []
    for unit, size in _UNITS.items():
        if whole >= size:
            count, whole = divmod(whole, size)
            parts.append(f"{count}{unit}")
    return "".join(parts)
