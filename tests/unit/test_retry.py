"""One retry policy and one ApiError (common/retry.py, common/apierror.py), the same type in the
REST client, the Kubernetes binder and the watches: how long each waits, how a server's
Retry-After is read, and how a failed request reads."""

from __future__ import annotations

import math

import pytest

from toposched.client import http
from toposched.common.apierror import ApiError
from toposched.common.retry import Retry, retry_after
from toposched.kube import api as kube_api
from toposched.kube import binder, runner


def waits(policy: Retry, asked: float | None = None) -> list[float]:
    """Every wait the policy makes, try after try, until it gives up."""
    out, attempt = [], 1
    while policy.more(attempt):
        out.append(policy.wait(attempt, asked))
        attempt += 1
    return out


def test_waits_grow_from_the_first_up_to_the_most() -> None:
    assert waits(Retry(tries=6, first_s=0.25, max_s=10.0)) == [0.25, 0.5, 1.0, 2.0, 4.0]
    assert waits(Retry(tries=5, first_s=0.5, max_s=3.0)) == [0.5, 1.0, 2.0, 3.0]
    assert waits(Retry(tries=4, first_s=1.0, max_s=9.0, factor=3.0)) == [1.0, 3.0, 9.0]
    assert waits(Retry(tries=1)) == []


def test_a_server_asking_for_longer_is_waited_for_but_never_past_the_most() -> None:
    policy = Retry(tries=4, first_s=0.5, max_s=8.0)
    assert waits(policy, asked=1.0) == [1.0, 1.0, 2.0]  # never sooner than asked
    assert waits(policy, asked=3600.0) == [8.0, 8.0, 8.0]  # nor an hour


def test_a_policy_without_a_count_never_gives_up_and_its_waits_stay_bounded() -> None:
    watch = Retry(tries=None, first_s=0.5, max_s=10.0)
    assert all(watch.more(n) for n in (1, 10, 10**6))
    assert [watch.wait(n) for n in (1, 2, 5, 6, 10**6)] == [0.5, 1.0, 8.0, 10.0, 10.0]


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"tries": 0}, "Retry.tries: at least 1"),
        ({"first_s": -1.0}, "first_s=-1.0"),
        ({"first_s": 9.0, "max_s": 8.0}, "first_s=9.0, max_s=8.0"),
        ({"factor": 0.5}, "Retry.factor: at least 1"),
    ],
)
def test_a_policy_that_cannot_work_is_refused_naming_the_field(
    kwargs: dict[str, float], words: str
) -> None:
    with pytest.raises(ValueError, match=words.replace("(", r"\(")):
        Retry(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("3", 3.0),
        (" 1.5 ", 1.5),
        (2, 2.0),
        ("0", 0.0),
        ("-1", None),
        ("nan", None),
        ("inf", None),
        ("Wed, 21 Oct 2015 07:28:00 GMT", None),  # an HTTP date: no wait a caller can use
        ("", None),
        (None, None),
    ],
)
def test_retry_after_reads_seconds_only(value: object, seconds: float | None) -> None:
    got = retry_after(value)
    assert got == seconds and (got is None or math.isfinite(got))


def test_the_client_the_binder_and_the_watches_share_the_one_policy_type() -> None:
    assert isinstance(http.DEFAULT_RETRY, Retry) and http.Retry is Retry
    assert isinstance(binder.WRITE_RETRY, Retry)
    assert isinstance(runner.WATCH_RETRY, Retry) and runner.WATCH_RETRY.tries is None


def test_one_api_error_reads_as_each_api_words_it() -> None:
    assert http.ApiError is ApiError and kube_api.ApiError is ApiError
    assert issubclass(kube_api.Gone, ApiError)
    # toposched's server: its detail is already a sentence.
    mine = ApiError(404, "job 'x' not found", details={"detail": "job 'x' not found"})
    assert str(mine) == "job 'x' not found" and mine.fields == [] and mine.retry_after is None
    # Kubernetes: a Status, shown as kubectl shows it.
    theirs = ApiError(429, "too many requests", reason="TooManyRequests", retry_after=1.0)
    assert str(theirs) == "429 TooManyRequests: too many requests"
    assert (theirs.status, theirs.reason, theirs.message) == (
        429,
        "TooManyRequests",
        "too many requests",
    )
