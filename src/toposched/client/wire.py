"""What the client needs of an HTTP library: a request's answer, and the ways none comes back.

Two libraries serve it: the standard library's http.client (toposched.client.stdlib_wire), for
a server reached over plain HTTP without a proxy, which is what the CLI talks to and costs a
command's start little; httpx (toposched.client.httpx_wire) for everything else (TLS, proxies,
a transport given by the caller). Client (toposched.client.http) sees only what is here.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import urlsplit

Params = Mapping[str, Any]


@dataclass(frozen=True)
class Reply:
    """A whole answer: status, reason phrase, headers (names in lower case) and body."""

    status: int
    reason: str
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON; ValueError if it is none."""
        return json.loads(self.body)


class Failure(Exception):
    """No answer came back; str() says why, as the library said it."""


class CannotConnect(Failure):
    """No connection was made (refused, no such host, or `timed_out` making it): nothing was
    sent. Only a timed-out one may be worth a retry."""

    def __init__(self, reason: str, *, timed_out: bool = False) -> None:
        super().__init__(reason)
        self.timed_out = timed_out


class NoAnswerInTime(Failure):
    """The request went out, and its answer did not come within the timeout."""


class ConnectionLost(Failure):
    """The connection broke after the request went out: it may have been done."""


class InvalidTarget(Failure):
    """The URL cannot be requested (its scheme, its host or port)."""


class Stream(Protocol):
    """An answer whose body is read as it arrives."""

    status: int

    def read(self) -> Reply:
        """The whole answer (for an error's body)."""
        ...

    def chunks(self) -> Iterator[bytes]:
        """The body, piece by piece as it arrives; a failure midway raises a Failure."""
        ...


class Wire(Protocol):
    """Requests to one server: paths are relative to its base URL; every request carries the
    headers the wire was made with, and `headers` besides. Failures raise a Failure."""

    def send(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply: ...

    def stream(
        self, method: str, path: str, *, params: Params | None, read_timeout: float | None
    ) -> AbstractContextManager[Stream]:
        """The answer, its body unread; `read_timeout` None waits for it without end."""
        ...

    def close(self) -> None: ...


# The variables through which a proxy is set (any case); httpx honours them, http.client not.
PROXY_VARIABLES = ("http_proxy", "https_proxy", "all_proxy")


def proxied() -> bool:
    """Whether this environment names a proxy (then httpx goes through it, with NO_PROXY's
    exceptions)."""
    return any(name.lower() in PROXY_VARIABLES and value for name, value in os.environ.items())


def plain_http(url: str) -> bool:
    """Whether `url` is http://HOST[:PORT][/PATH] with a port that reads and no proxy in the
    way: what the standard library's wire serves as httpx would."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return False
    try:
        parts.port  # noqa: B018 -- raises ValueError for a port that is no number
    except ValueError:
        return False
    return not proxied()
