"""The client's wire over httpx: TLS, proxies, and any httpx transport (tests' MockTransport)."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from toposched.client.wire import (
    CannotConnect,
    ConnectionLost,
    Failure,
    InvalidTarget,
    NoAnswerInTime,
    Params,
    Reply,
    proxied,
)

if TYPE_CHECKING:
    import httpx


def _httpx() -> Any:
    # Imported on first use: the commands that never talk to a server (place, sim, ...) and
    # those that reach theirs over the standard library's wire need not pay for httpx.
    if "httpx" not in sys.modules:
        _import_httpx_without_its_cli()
    import httpx

    return httpx


# httpx's own command line (`httpx URL`), which httpx imports with itself when it can: click,
# pygments and rich's progress bars and syntax, some 30 ms of every server command's start.
HTTPX_CLI = "httpx._main"


def _import_httpx_without_its_cli() -> None:
    """Import httpx without its command line: while it loads, HTTPX_CLI cannot be imported,
    and httpx's `main` becomes the stub it has for an install without the CLI's extras (only
    the `httpx` command calls it). Importable again afterwards, as before, for whoever wants
    it."""
    sys.modules[HTTPX_CLI] = None  # type: ignore[assignment]
    try:
        import httpx  # noqa: F401
    finally:
        if sys.modules.get(HTTPX_CLI, 0) is None:
            del sys.modules[HTTPX_CLI]


def _tls_verify(url: str) -> Any:
    """What httpx verifies TLS with for a client of `url`: its default (True: certifi's CA
    bundle, which httpx loads as the client is made, some 50 ms), except for a server reached
    over plain HTTP without a proxy. Every request of a wire goes to its own URL, so that one
    never makes a TLS connection: it gets a context that trusts no CA, made at no cost, which
    would refuse any TLS connection were one made."""
    if urlsplit(url).scheme != "http" or proxied():
        return True
    import ssl

    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


def _failure(err: Exception) -> Failure:
    """The Failure that httpx's TransportError `err` is."""
    hx = _httpx()
    if isinstance(err, hx.UnsupportedProtocol | hx.InvalidURL):
        return InvalidTarget(str(err))
    if isinstance(err, hx.ConnectError):
        return CannotConnect(str(err) or type(err).__name__)
    if isinstance(err, hx.ConnectTimeout):
        return CannotConnect(str(err) or type(err).__name__, timed_out=True)
    if isinstance(err, hx.TimeoutException):
        return NoAnswerInTime(str(err) or type(err).__name__)
    return ConnectionLost(str(err) or type(err).__name__)


def _reply(resp: httpx.Response) -> Reply:
    return Reply(resp.status_code, resp.reason_phrase, resp.headers, resp.content)


class HttpxStream:
    """An answer of HttpxWire.stream, its body read as it arrives."""

    def __init__(self, resp: httpx.Response) -> None:
        self._resp = resp
        self.status = resp.status_code

    def read(self) -> Reply:
        try:
            self._resp.read()
        except _httpx().TransportError as err:
            raise _failure(err) from None
        return _reply(self._resp)

    def chunks(self) -> Iterator[bytes]:
        try:
            yield from self._resp.iter_bytes()
        except _httpx().TransportError as err:
            raise _failure(err) from None


class HttpxWire:
    """Requests to `base_url` through an httpx Client (over `transport`, if given)."""

    def __init__(
        self,
        base_url: str,
        headers: Mapping[str, str],
        timeout: float,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.timeout = timeout
        self._http: httpx.Client = _httpx().Client(
            base_url=base_url,
            headers=dict(headers),
            timeout=timeout,
            transport=transport,
            verify=_tls_verify(base_url),
        )

    def send(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        try:
            resp = self._http.request(method, path, params=params, json=json, headers=headers)
        except _httpx().TransportError as err:
            raise _failure(err) from None
        return _reply(resp)

    @contextmanager
    def stream(
        self, method: str, path: str, *, params: Params | None, read_timeout: float | None
    ) -> Iterator[HttpxStream]:
        hx = _httpx()
        timeout = hx.Timeout(self.timeout, read=read_timeout)
        try:
            with self._http.stream(method, path, params=params, timeout=timeout) as resp:
                yield HttpxStream(resp)
        except hx.TransportError as err:
            raise _failure(err) from None

    def close(self) -> None:
        self._http.close()
