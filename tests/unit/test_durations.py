"""Durations and Slurm's time limits as people write them, and what each refuses."""

from __future__ import annotations

import pytest

from toposched.common.durations import DurationError, parse_duration, parse_time_limit


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90", 5400.0),  # Slurm's MM: minutes
        ("0.5", 30.0),
        ("0:03", 3.0),  # MM:SS
        ("90:00", 5400.0),
        ("1:00:00", 3600.0),  # HH:MM:SS
        ("2-12", 216_000.0),  # D-HH
        ("2-12:30", 217_800.0),  # D-HH:MM
        ("2-12:30:15", 217_815.0),  # D-HH:MM:SS
        ("1h30m", 5400.0),  # the house's
        ("45s", 45.0),
    ],
)
def test_a_time_limit_reads_slurms_forms_and_the_houses(text: str, seconds: float) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["0", "-5", "inf", "nan", "x", "1:60:00", "1:2:3:4", "1-", "0:00"])
def test_a_time_limit_that_is_no_positive_time_is_refused_saying_so(text: str) -> None:
    with pytest.raises(DurationError, match=rf"--time .*got '{text}'"):
        parse_time_limit(text, "--time")


@pytest.mark.parametrize("text", ["1_0", "\u0661\u0662", "\uff15", "1_0:00"])
def test_a_time_limit_reads_the_digits_0_to_9_only(text: str) -> None:
    """As durations do: float() alone took `1_0` as 10 minutes and `\u0661\u0662` as 12."""
    with pytest.raises(DurationError, match=r"--time must be a time such as 90"):
        parse_time_limit(text, "--time")


def test_durations_take_slurms_clock_but_a_plain_number_stays_seconds() -> None:
    assert parse_duration("1:30:00") == 5400.0
    assert parse_duration("2-0") == 172_800.0
    assert parse_duration("30") == 30.0
    with pytest.raises(DurationError, match="1:30:00"):
        parse_duration("soon")
