"""The client's wire over the standard library's http.client: plain HTTP to one server.

It loads in some 20 ms where httpx takes some 60 (issue 32: a CLI that answers at
once). One connection is kept for the requests that follow (a list's pages, a delete of many
jobs), and made again when the server has closed it meanwhile.
"""

from __future__ import annotations

import http.client
import json as jsonlib
import select
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlencode, urlsplit

from toposched import __version__
from toposched.client.wire import (
    CannotConnect,
    ConnectionLost,
    Failure,
    NoAnswerInTime,
    Params,
    Reply,
)

CHUNK = 65536


def _failure(err: Exception) -> Failure:
    """The Failure that `err`, raised after the connection was made, is."""
    if isinstance(err, TimeoutError):
        return NoAnswerInTime(str(err) or "timed out")
    return ConnectionLost(str(err) or type(err).__name__)


def _closed_by_peer(conn: http.client.HTTPConnection) -> bool:
    """Whether the kept connection has something to read before a request was sent: the
    server closed it (or it is out of step), so it cannot carry the next request."""
    sock = conn.sock
    if sock is None:
        return False
    readable, _, _ = select.select([sock], [], [], 0)
    return bool(readable)


def _reply(resp: http.client.HTTPResponse) -> Reply:
    """The whole answer, its body read."""
    body = resp.read()
    return Reply(resp.status, resp.reason, _headers(resp), body)


def _headers(resp: http.client.HTTPResponse) -> dict[str, str]:
    return {name.lower(): value for name, value in resp.getheaders()}


class StdlibStream:
    """An answer of StdlibWire.stream, its body read as it arrives."""

    def __init__(self, resp: http.client.HTTPResponse) -> None:
        self._resp = resp
        self.status = resp.status

    def read(self) -> Reply:
        try:
            return _reply(self._resp)
        except (OSError, http.client.HTTPException) as err:
            raise _failure(err) from None

    def chunks(self) -> Iterator[bytes]:
        while True:
            try:
                chunk = self._resp.read1(CHUNK)
            except (OSError, http.client.HTTPException) as err:
                raise _failure(err) from None
            if not chunk:
                return
            yield chunk


class StdlibWire:
    """Requests to the server at `base_url` (http://HOST[:PORT][/PATH]), each with `headers`."""

    def __init__(self, base_url: str, headers: Mapping[str, str], timeout: float) -> None:
        parts = urlsplit(base_url)
        if parts.hostname is None:
            raise ValueError(f"no host in {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.headers = {
            "User-Agent": f"toposched/{__version__}",
            "Accept": "*/*",
            **headers,
        }
        self.timeout = timeout
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        """The kept connection, or a new one, connected (CannotConnect if it cannot be)."""
        conn = self._conn
        if conn is not None and _closed_by_peer(conn):
            conn.close()
        if conn is None:
            conn = self._conn = http.client.HTTPConnection(
                self.host, self.port, timeout=self.timeout
            )
        if conn.sock is None:
            try:
                conn.connect()
            except TimeoutError as err:
                conn.close()
                raise CannotConnect(str(err) or "timed out", timed_out=True) from None
            except OSError as err:
                conn.close()
                raise CannotConnect(str(err) or type(err).__name__) from None
        return conn

    def _target(self, path: str, params: Params | None) -> str:
        query = urlencode({k: v for k, v in (params or {}).items()}, doseq=True)
        return self.prefix + path + (f"?{query}" if query else "")

    def _begin(
        self,
        method: str,
        path: str,
        params: Params | None,
        body: bytes | None,
        headers: Mapping[str, str],
        read_timeout: float | None,
    ) -> http.client.HTTPResponse:
        """Send the request and read the answer's head on a connection of its own timeout."""
        conn = self._connection()
        sent = {**self.headers, **headers}
        if body is not None:
            sent["Content-Length"] = str(len(body))
        assert conn.sock is not None  # connected by _connection
        conn.sock.settimeout(read_timeout)
        try:
            conn.request(method, self._target(path, params), body=body, headers=sent)
            return conn.getresponse()
        except (OSError, http.client.HTTPException) as err:
            conn.close()
            raise _failure(err) from None

    def send(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        extra = dict(headers or {})
        body = None
        if json is not None:
            # As httpx encodes it: compact, UTF-8, and no NaN (which no JSON reader takes).
            text = jsonlib.dumps(json, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
            body = text.encode("utf-8")
            extra.setdefault("Content-Type", "application/json")
        resp = self._begin(method, path, params, body, extra, self.timeout)
        try:
            return _reply(resp)
        except (OSError, http.client.HTTPException) as err:
            self.close()
            raise _failure(err) from None

    @contextmanager
    def stream(
        self, method: str, path: str, *, params: Params | None, read_timeout: float | None
    ) -> Iterator[StdlibStream]:
        resp = self._begin(method, path, params, None, {}, read_timeout)
        try:
            yield StdlibStream(resp)
        finally:
            if resp.isclosed():
                self._restore_timeout()
            else:
                # Left before its end: what remains of it would come before the next answer.
                self.close()

    def _restore_timeout(self) -> None:
        if self._conn is not None and self._conn.sock is not None:
            self._conn.sock.settimeout(self.timeout)

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
