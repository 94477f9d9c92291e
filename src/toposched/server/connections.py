"""Connections bounded: deadlines for a request's headers and body, a cap on open connections."""

from __future__ import annotations

import asyncio
import resource
import time
from dataclasses import dataclass
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# A request's headers must all have come within HEADER_S of its first byte (or of the
# connection, for its first request), and its body within BODY_S of its headers: a client
# that sends a byte a minute holds nothing for long.
HEADER_S = 10.0
BODY_S = 60.0
# Far over any header block a client of ours sends; llhttp itself sets no bound.
MAX_HEADER_BYTES = 64 * 1024
# At most this many connections, and never more than half the open-file limit: the other
# half stays for the scheduler's own files (the database, the workers' files, logs).
MAX_CONNECTIONS = 4096
FD_SHARE = 2
BACKLOG = 2048  # uvicorn's own


@dataclass(frozen=True)
class ConnectionLimits:
    header_s: float = HEADER_S
    body_s: float = BODY_S
    connections: int = MAX_CONNECTIONS
    header_bytes: int = MAX_HEADER_BYTES


def raise_fd_limit() -> int:
    """The soft open-file limit raised to the hard one; the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass  # a hard limit the kernel will not give (over nr_open): the soft one stays
    return soft


def connection_bound(fd_limit: int, asked: int | None = None) -> int:
    """How many connections may be open at once under `fd_limit` open files."""
    share = fd_limit // FD_SHARE if fd_limit != resource.RLIM_INFINITY else MAX_CONNECTIONS
    return max(1, min(asked if asked is not None else MAX_CONNECTIONS, share))


def listen_backlog(fd_limit: int) -> int:
    """The listening socket's backlog: the event loop accepts all of it in one go, before a
    connection over the bound is closed, so the bound and the backlog together stay within
    three quarters of `fd_limit`."""
    quarter = fd_limit // 4 if fd_limit != resource.RLIM_INFINITY else BACKLOG
    return max(1, min(BACKLOG, quarter))


def bounded_protocol(limits: ConnectionLimits) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol held to `limits` (one class per server: the limits are
    the class's)."""
    return type("BoundedHttp", (BoundedHttp,), {"limits": limits})


# The phases a connection is in: reading a request's headers (or waiting for the next
# request), reading its body, answering it. Only a connection answering is kept when the
# bound is reached: the others have not yet asked for anything whole.
HEADERS, BODY, ANSWERING = "headers", "body", "answering"


def plain_answer(status: str, body: str, *headers: str) -> bytes:
    """A whole answer in text that closes its connection; its length counted from `body`."""
    data = body.encode()
    head = [
        f"HTTP/1.1 {status}",
        "content-type: text/plain; charset=utf-8",
        *headers,
        f"content-length: {len(data)}",
        "connection: close",
    ]
    return "\r\n".join(head).encode() + b"\r\n\r\n" + data


TIMED_OUT = plain_answer("408 Request Timeout", "the request's headers came too slowly")
TOO_MANY = plain_answer(
    "503 Service Unavailable", "too many connections are being answered", "retry-after: 1"
)
HEADERS_TOO_LARGE = plain_answer(
    "431 Request Header Fields Too Large", "the request's headers are over 64 KiB"
)


class BoundedHttp(HttpToolsProtocol):
    """A connection that is closed when its request comes too slowly, and that closes the
    oldest connection not being answered when it would be one too many."""

    limits: ClassVar[ConnectionLimits] = ConnectionLimits()

    phase: str = HEADERS
    since: float = 0.0
    header_bytes: int = 0
    deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Counted before this one joins: the set holds every open connection of the server.
        if len(self.connections) >= self.limits.connections and not self._evict_one():
            transport.write(TOO_MANY)  # type: ignore[attr-defined]
            transport.close()
            return
        super().connection_made(transport)  # type: ignore[arg-type]
        self._begin(HEADERS, self.limits.header_s)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self.transport is not None:  # None: refused in connection_made, never joined
            super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # Counted once the parser has read it: a chunk that completes the headers (and
        # brings a body) is not counted against them.
        if self.phase == HEADERS and not self.transport.is_closing():
            self.header_bytes += len(data)
            if self.header_bytes > self.limits.header_bytes:
                self._close(HEADERS_TOO_LARGE)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._begin(HEADERS, self.limits.header_s)

    def on_headers_complete(self) -> None:
        self._begin(BODY, self.limits.body_s)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self.phase = ANSWERING
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # Waiting for the next request: uvicorn's keep-alive timeout closes an idle one.
        if self.phase == ANSWERING and self.cycle.response_complete:  # none pipelined
            self.phase, self.since, self.header_bytes = HEADERS, time.monotonic(), 0

    def _begin(self, phase: str, within_s: float) -> None:
        self._disarm()
        self.phase, self.since = phase, time.monotonic()
        if phase == HEADERS:
            self.header_bytes = 0
        self.deadline = self.loop.call_later(within_s, self._timed_out)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _timed_out(self) -> None:
        self.deadline = None
        # A body that came too slowly is the application's to see (as a disconnect): it
        # may already have answered.
        self._close(TIMED_OUT if self.phase == HEADERS else b"")

    def _close(self, answer: bytes) -> None:
        if self.transport.is_closing():
            return
        if answer and (self.cycle is None or self.cycle.response_complete):
            self.transport.write(answer)
        self.transport.close()

    def _evict_one(self) -> bool:
        """Close the connection that has waited longest for a whole request; False if every
        open connection is being answered."""
        waiting = [
            other
            for other in self.connections
            if isinstance(other, BoundedHttp)
            and other.phase != ANSWERING
            and not other.transport.is_closing()
        ]
        if not waiting:
            return False
        oldest = min(waiting, key=lambda other: other.since)
        oldest._close(b"")
        # Closed, but still counted until the loop calls its connection_lost.
        self.connections.discard(oldest)
        return True
