"""A small HTTP proxy on loopback in front of the real API server, for the faults that happen
between a client and the server and that the server itself cannot be made to show: an error
answer (429 from a throttling layer, an HTML 502 from a load balancer), a request held up, an
answer lost after the server acted, watch streams ended. It also keeps the log of the requests
it passed, so that a test can say what the scheduler asked.

The scheduler under test talks plain HTTP to the proxy with its service account's token; the
proxy passes each request on over TLS, the token unchanged, so the server authenticates and
authorizes the scheduler itself. Requests are passed as they come, answers streamed back as
they come (a watch stays open through it).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
}


@dataclass(frozen=True)
class RequestRecord:
    method: str
    path: str
    query: str
    body: bytes


@dataclass
class Fault:
    """What to do instead of (or after) passing on the next `times` matching requests."""

    method: str
    path: re.Pattern[str]
    times: int
    status: int = 0  # the answer's status; 0: none at all (the connection is closed)
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)  # more headers of the answer
    delay_s: float = 0.0  # hold the request this long, then pass it on
    after: bool = False  # pass the request on, then close the connection unanswered

    def matches(self, method: str, path: str) -> bool:
        return self.times > 0 and self.method in (method, "*") and bool(self.path.search(path))


def status_body(code: int, reason: str, message: str) -> bytes:
    """A `Status` as the API server writes one."""
    return json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
    ).encode()


@dataclass
class _Stream:
    """A watch being relayed: its upstream connection, to end it on demand."""

    upstream: http.client.HTTPSConnection
    path: str
    ended: threading.Event = field(default_factory=threading.Event)


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer (a scheduler stopped, a watch ended) is not an
        error of the proxy's: the rest is printed, as the standard server does."""
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FaultProxy:
    """`url` (plain http) passes everything to `target` (https, verified with `cafile`)."""

    def __init__(self, target: str, cafile: str) -> None:
        parts = urlsplit(target)
        self.host, self.port = parts.hostname or "127.0.0.1", int(parts.port or 443)
        self.context = ssl.create_default_context(cafile=cafile)
        self.lock = threading.Lock()
        self.log: list[RequestRecord] = []
        self.faults: list[Fault] = []
        self.streams: list[_Stream] = []
        self.sleeping: list[threading.Event] = []
        self.server = _Server(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def start(self) -> FaultProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.clear_delays()
        self.drop_watches()
        self.server.shutdown()
        self.server.server_close()

    # ------------------------------------------------------------------ what tests call

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request passed or answered so far."""
        with self.lock:
            return [(r.method, r.path) for r in self.log]

    def inject(self, method: str, path_regex: str, *, times: int = 1, **what: Any) -> None:
        with self.lock:
            self.faults.append(Fault(method.upper(), re.compile(path_regex), times, **what))

    def inject_error(
        self,
        method: str,
        path_regex: str,
        code: int = 500,
        reason: str = "InternalError",
        message: str = "Internal error occurred: injected by the test",
        times: int = 1,
    ) -> None:
        """Answer the next `times` matching requests (method, re.search on the path) with
        this error Status, as the server would, instead of passing them on."""
        self.inject(
            method, path_regex, times=times, status=code, body=status_body(code, reason, message)
        )

    def inject_delay(self, method: str, path_regex: str, seconds: float, times: int = 1) -> None:
        """Hold the next `times` matching requests `seconds` (or until `clear_delays`), then
        pass them on, whether or not their client is still there."""
        self.inject(method, path_regex, times=times, delay_s=seconds)

    def clear_delays(self) -> int:
        """Drop the delays not used yet and pass on the held requests now; how many were."""
        with self.lock:
            self.faults = [f for f in self.faults if not f.delay_s]
            sleeping, self.sleeping = self.sleeping, []
        for wake in sleeping:
            wake.set()
        return len(sleeping)

    def drop_watches(self) -> int:
        """End every watch stream cleanly, as the server does when a watch times out."""
        with self.lock:
            streams, self.streams = self.streams, []
        for stream in streams:
            stream.ended.set()
            with contextlib.suppress(OSError, AttributeError):
                stream.upstream.sock.shutdown(socket.SHUT_RDWR)  # type: ignore[union-attr]
        return len(streams)

    def watch_count(self) -> int:
        with self.lock:
            return len(self.streams)

    # ------------------------------------------------------------------ the handler

    def _fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.matches(method, path):
                    fault.times -= 1
                    return fault
        return None

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            upstream: http.client.HTTPSConnection | None = None

            def log_message(self, format: str, *args: Any) -> None:
                return  # the log is `proxy.log`

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    data = b""
                    while True:
                        size = int(self.rfile.readline().split(b";")[0], 16)
                        if size == 0:
                            self.rfile.readline()
                            return data
                        data += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _serve(self) -> None:
                body = self._body()
                path, _, query = self.path.partition("?")
                method = self.command
                with proxy.lock:
                    proxy.log.append(RequestRecord(method, path, query, body))
                fault = proxy._fault(method, path)
                if fault is not None and fault.delay_s:
                    wake = threading.Event()
                    with proxy.lock:
                        proxy.sleeping.append(wake)
                    wake.wait(fault.delay_s)
                    with proxy.lock, contextlib.suppress(ValueError):
                        proxy.sleeping.remove(wake)
                    fault = proxy._fault(method, path)  # an error for it too, after the sleep
                if fault is not None and not fault.after and not fault.delay_s:
                    if not fault.status:
                        self.close_connection = True
                        with contextlib.suppress(OSError):
                            self.connection.shutdown(socket.SHUT_RDWR)
                        return
                    self._answer(fault.status, fault.body, fault.content_type, fault.headers)
                    return
                self._pass(
                    method,
                    body,
                    fault is not None and fault.after,
                    "watch=" in query and re.search(r"(^|&)watch=(true|1)", query) is not None,
                )

            def _answer(
                self, status: int, body: bytes, content_type: str, headers: dict[str, str]
            ) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _connection(self) -> http.client.HTTPSConnection:
                if self.upstream is None:
                    self.upstream = http.client.HTTPSConnection(
                        proxy.host, proxy.port, context=proxy.context, timeout=3600
                    )
                return self.upstream

            def _pass(self, method: str, body: bytes, lose_answer: bool, watch: bool) -> None:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
                upstream = self._connection()
                try:
                    upstream.request(method, self.path, body=body or None, headers=headers)
                    answer = upstream.getresponse()
                except (OSError, http.client.HTTPException):
                    self.upstream = None
                    upstream.close()
                    self.close_connection = True
                    return
                if lose_answer:  # the server acted; its answer never reaches the client
                    answer.read()
                    self.close_connection = True
                    with contextlib.suppress(OSError):
                        self.connection.shutdown(socket.SHUT_RDWR)
                    return
                stream = _Stream(upstream, self.path) if watch else None
                if stream is not None:
                    with proxy.lock:
                        proxy.streams.append(stream)
                try:
                    self._relay(answer, stream)
                finally:
                    if stream is not None:
                        with proxy.lock, contextlib.suppress(ValueError):
                            proxy.streams.remove(stream)
                        if stream.ended.is_set():  # its upstream connection was cut
                            self.upstream = None
                            upstream.close()

            def _relay(self, answer: http.client.HTTPResponse, stream: _Stream | None) -> None:
                self.send_response(answer.status, answer.reason)
                for key, value in answer.getheaders():
                    if key.lower() not in HOP_BY_HOP:
                        self.send_header(key, value)
                length = answer.getheader("Content-Length")
                if length is not None and stream is None:
                    data = answer.read()
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                while True:
                    try:
                        chunk = answer.read1(1 << 16)
                    except (OSError, http.client.HTTPException, ValueError):
                        chunk = b""
                    if not chunk:
                        break
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        return Handler

    def wait_for_request(
        self, method: str, path_regex: str, timeout_s: float = 10.0
    ) -> RequestRecord:
        """The first logged request that matches, waiting for it."""
        pattern = re.compile(path_regex)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self.lock:
                for record in self.log:
                    if record.method == method.upper() and pattern.search(record.path):
                        return record
            time.sleep(0.02)
        raise AssertionError(f"no {method} {path_regex} reached the API server in {timeout_s} s")


__all__ = ["FaultProxy", "RequestRecord", "status_body"]
