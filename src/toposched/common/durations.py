"""Durations as people write them: `30m`, `10s`, `1h30m`, `2d`, Slurm's `1:30:00` or
`2-12`, or plain seconds; and Slurm's time limits, where a plain number is minutes."""

from __future__ import annotations

import math
import re

_UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
# Digits 0-9 only: float() and \d also read `1_0` and other scripts' digits (`\u0661\u0662`).
_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)([dhms])", re.ASCII)
# Slurm's forms with a colon or a day: MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
_CLOCK = re.compile(r"(?:([0-9]+)-)?([0-9]+)(?::([0-9]+))?(?::([0-9]+))?", re.ASCII)


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
        number = _number(text)
        if number is None:
            number = _clock(text) if ":" in text or "-" in text else _parts(text)
            if number is None:
                raise DurationError(
                    f"{what} must be a time such as 30m, 1h30m, 45s or 1:30:00, got {value!r}"
                )
        seconds = number
    if not 0 < seconds < math.inf:
        raise DurationError(f"{what} must be a positive time, got {value!r}")
    return seconds


def parse_time_limit(value: str, what: str = "time limit") -> float:
    """Seconds in a time limit as Slurm's `--time` takes it: a plain number is minutes (MM),
    else MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or a duration such as `1h30m`; > 0."""
    text = value.strip()
    minutes = _number(text)
    if minutes is not None:
        if not 0 < minutes < math.inf:
            raise DurationError(f"{what} must be a positive time, got {value!r}")
        return minutes * 60.0
    try:
        return parse_duration(text, what)
    except DurationError:
        raise DurationError(
            f"{what} must be a time such as 90 (minutes, as Slurm's), 1:30:00, 2-12:00, "
            f"1h30m or 45s, got {value!r}"
        ) from None


def _number(text: str) -> float | None:
    """A plain number in `text` (`90`, `0.5`, `nan`), or None: float() alone also reads `1_0`
    and other scripts' digits (Arabic-Indic, fullwidth), refused everywhere as numbers."""
    if not text.isascii() or "_" in text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def _parts(text: str) -> float | None:
    """`1h30m`: the sum of its parts, or None where the text is not only parts."""
    parts = _PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNITS[u] for n, u in parts)


def _clock(text: str) -> float | None:
    """Slurm's forms: MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS; None for any other."""
    match = _CLOCK.fullmatch(text)
    if match is None:
        return None
    days, first, second, third = match.groups()
    if days is None:
        if second is None:
            return None  # a plain number is not this form's
        # MM:SS or HH:MM:SS
        hours, minutes, secs = (first, second, third) if third is not None else (0, first, second)
    else:
        hours, minutes, secs = first, second or 0, third or 0
    if (int(minutes) >= 60 and (days is not None or third is not None)) or int(secs) >= 60:
        return None
    return int(days or 0) * 86_400.0 + int(hours) * 3_600.0 + int(minutes) * 60.0 + int(secs)


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
