"""The client over the standard library's wire answers as over httpx's: against a real server,
and against a scripted one that refuses, drops, stalls, answers 503 or streams (issue 32)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from tests.server import ServerProcess, free_port, running_server
from toposched.client.http import UNREACHABLE, ApiError, Client, Retry
from toposched.client.httpx_wire import HttpxWire
from toposched.client.stdlib_wire import StdlibWire
from toposched.client.wire import plain_http

WIRES = ("stdlib", "httpx")


def client_of(wire: str, url: str, **options: object) -> Client:
    """A client of `url` over `wire` (httpx's over a real connection: HTTPTransport)."""
    transport = httpx.HTTPTransport() if wire == "httpx" else None
    client = Client(url, "tok", transport=transport, **options)  # type: ignore[arg-type]
    expected = HttpxWire if wire == "httpx" else StdlibWire
    assert isinstance(client._wire, expected)
    return client


# ---------------------------------------------------------------------- which wire


def test_the_standard_librarys_wire_serves_plain_http_without_a_proxy(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ALL_PROXY", raising=False)
    assert plain_http("http://127.0.0.1:8080/api/v1")
    assert plain_http("http://gpu-box/api/v1")
    assert not plain_http("https://gpu-box:8443/api/v1")
    assert not plain_http("http://gpu-box:port/api/v1")
    assert not plain_http("ftp://gpu-box/api/v1")
    assert isinstance(Client("http://127.0.0.1:9")._wire, StdlibWire)
    assert isinstance(Client("https://127.0.0.1:9")._wire, HttpxWire)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy:3128")
    assert not plain_http("http://127.0.0.1:8080/api/v1")  # httpx honours it, and NO_PROXY
    assert isinstance(Client("http://127.0.0.1:9")._wire, HttpxWire)


# ---------------------------------------------------------------------- a scripted server

Action = Callable[[socket.socket, bytes], bool]  # (connection, request) -> keep it open


def answer(status: int, body: bytes = b"{}", **headers: str) -> Action:
    def act(conn: socket.socket, request: bytes) -> bool:
        head = [f"HTTP/1.1 {status} Whatever", f"Content-Length: {len(body)}"]
        head += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
        head.append("Content-Type: application/json")
        conn.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        return True

    return act


def drop(conn: socket.socket, request: bytes) -> bool:
    """Read the request, then close without an answer: the answer is lost."""
    return False


def stall(seconds: float) -> Action:
    def act(conn: socket.socket, request: bytes) -> bool:
        time.sleep(seconds)
        return False

    return act


class Scripted:
    """A server on a free port that answers each request with the next action, and records
    the requests and how many connections were made."""

    def __init__(self, actions: list[Action]) -> None:
        self.actions = list(actions)
        self.requests: list[bytes] = []
        self.connections = 0
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while self.actions:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                while self.actions:
                    request = read_request(conn)
                    if request is None:
                        break
                    self.requests.append(request)
                    if not self.actions.pop(0)(conn, request):
                        break

    def close(self) -> None:
        self.listener.close()
        self.thread.join(timeout=5)


def read_request(conn: socket.socket) -> bytes | None:
    data = b""
    while b"\r\n\r\n" not in data:
        more = conn.recv(65536)
        if not more:
            return None
        data += more
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        ),
        0,
    )
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


def header(request: bytes, name: str) -> str | None:
    for line in request.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        key, _, value = line.decode().partition(":")
        if key.strip().lower() == name.lower():
            return value.strip()
    return None


@pytest.fixture
def scripted() -> Iterator[Callable[[list[Action]], Scripted]]:
    made: list[Scripted] = []

    def make(actions: list[Action]) -> Scripted:
        made.append(Scripted(actions))
        return made[-1]

    yield make
    for server in made:
        server.close()


# ---------------------------------------------------------------------- failures


def test_a_refused_connection_reads_alike_over_both_wires() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    said = []
    for wire in WIRES:
        with pytest.raises(ApiError) as caught:
            client_of(wire, url).nodes()
        assert caught.value.status == UNREACHABLE
        said.append(str(caught.value))
    assert said[0] == said[1]
    assert said[0].startswith(f"the server at {url} is not reachable ([Errno 111]")


@pytest.mark.parametrize("wire", WIRES)
def test_a_503_is_retried_with_the_same_key(
    wire: str, scripted: Callable[[list[Action]], Scripted]
) -> None:
    busy = b'{"detail": "the database is locked"}'
    server = scripted([answer(503, busy, Retry_After="2"), answer(201, b'{"name": "x"}')])
    lines: list[str] = []
    waits: list[float] = []
    client = client_of(wire, server.url, on_retry=lines.append, sleep=waits.append)
    assert client.submit({"command": ["true"]}) == {"name": "x"}
    keys = {header(request, "Idempotency-Key") for request in server.requests}
    assert len(server.requests) == 2 and len(keys) == 1 and None not in keys
    assert header(server.requests[0], "Authorization") == "Bearer tok"
    assert waits == [2.0]
    assert lines == ["the database is locked; retrying in 2 s (try 2 of 5)"]


@pytest.mark.parametrize("wire", WIRES)
def test_a_lost_answer_is_retried_only_when_repeating_is_safe(
    wire: str, scripted: Callable[[list[Action]], Scripted]
) -> None:
    server = scripted([drop, answer(200, b'{"nodes": []}'), drop])
    client = client_of(wire, server.url, sleep=lambda s: None)
    assert client.nodes() == []  # a read: tried again
    with pytest.raises(ApiError, match=f"^lost the connection to the server at {server.url}"):
        client.cancel("x")  # could have been done: reported, not repeated
    assert len(server.requests) == 3


@pytest.mark.parametrize("wire", WIRES)
def test_an_answer_that_does_not_come_times_out(
    wire: str, scripted: Callable[[list[Action]], Scripted]
) -> None:
    server = scripted([stall(2.0)])
    client = client_of(wire, server.url, timeout=0.3, retry=Retry(tries=1))
    began = time.monotonic()
    with pytest.raises(ApiError, match=r"did not answer within 0.3 s$") as caught:
        client.nodes()
    assert caught.value.status == UNREACHABLE
    assert time.monotonic() - began < 1.5


@pytest.mark.parametrize("wire", WIRES)
def test_errors_and_odd_answers_read_alike(
    wire: str, scripted: Callable[[list[Action]], Scripted]
) -> None:
    detail = b'{"detail": [{"loc": ["body", "gpus"], "msg": "Input should be a valid integer"}]}'
    server = scripted(
        [
            answer(422, detail),
            answer(502, b"<html>bad gateway</html>"),
            answer(200, b"hello"),
            answer(404, b'{"detail": "no job named \'x\'"}'),
        ]
    )
    client = client_of(wire, server.url)
    with pytest.raises(ApiError) as caught:
        client.submit({"command": ["true"]})
    assert caught.value.fields == [("body.gpus", "Input should be a valid integer")]
    with pytest.raises(ApiError, match=rf"^HTTP 502 from {server.url}: <html>bad gateway"):
        client.nodes()
    with pytest.raises(ApiError, match=r"not JSON.*is it a toposched server"):
        client.whoami()
    with pytest.raises(ApiError, match=r"^no job named 'x'$") as caught:
        b"".join(client.logs("x"))
    assert caught.value.status == 404
    assert server.connections == 1  # one kept connection for all four


def test_a_kept_connection_the_server_closed_is_made_again(
    scripted: Callable[[list[Action]], Scripted],
) -> None:
    def once_then_close(conn: socket.socket, request: bytes) -> bool:
        answer(200, b'{"nodes": []}')(conn, request)
        return False  # the server closes the kept connection once it has answered

    server = scripted([once_then_close, answer(202, b'{"name": "x"}')])
    client = client_of("stdlib", server.url)
    assert client.nodes() == []
    time.sleep(0.2)  # the close has arrived
    # Not a request that may be repeated: it must go out on a new connection, not be lost.
    assert client.cancel("x") == {"name": "x"}
    assert server.connections == 2


@pytest.mark.parametrize("wire", WIRES)
def test_a_streamed_answer_arrives_piece_by_piece(
    wire: str, scripted: Callable[[list[Action]], Scripted]
) -> None:
    first_read = threading.Event()

    def chunked(conn: socket.socket, request: bytes) -> bool:
        conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        conn.sendall(b"6\r\nfirst\n\r\n")
        first_read.wait(timeout=10)
        conn.sendall(b"7\r\nsecond\n\r\n0\r\n\r\n")
        return True

    server = scripted([chunked, answer(200, b'{"nodes": []}')])
    client = client_of(wire, server.url)
    got = []
    for chunk in client.logs("x", follow=True):
        got.append(chunk)
        first_read.set()
    assert b"".join(got) == b"first\nsecond\n"
    assert got[0] == b"first\n"  # before the rest was sent
    assert client.nodes() == []  # the connection serves on after the stream


# ---------------------------------------------------------------------- a real server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("wires")) as started:
        yield started


def real(wire: str, server: ServerProcess, token: str | None = None) -> Client:
    transport = httpx.HTTPTransport() if wire == "httpx" else None
    return Client(server.url, token or server.token, token_source="test", transport=transport)


def test_a_real_server_answers_both_wires_alike(server: ServerProcess, tmp_path: Path) -> None:
    with real("stdlib", server) as stdlib, real("httpx", server) as hx:
        script = "for i in 1 2 3; do echo line $i; sleep 0.2; done"
        made = stdlib.submit({"name": "streamed", "command": ["sh", "-c", script]})
        assert made["name"] == "streamed"
        other = hx.submit({"name": "second", "command": ["true"]}, key="k-1")
        assert stdlib.submit({"name": "second", "command": ["true"]}, key="k-1") == other
        followed = b"".join(stdlib.logs("streamed", follow=True))
        assert followed == b"line 1\nline 2\nline 3\n"
        assert b"".join(hx.logs("streamed", tail=1)) == b"line 3\n"
        assert stdlib.job("streamed") == hx.job("streamed")
        paged = [job["name"] for job in stdlib.all_jobs(page_size=1, all=True)]
        assert paged == [job["name"] for job in hx.all_jobs(page_size=1, all=True)]
        assert paged == ["streamed", "second"]
        assert stdlib.nodes() == hx.nodes()
        for client in (stdlib, hx):
            with pytest.raises(ApiError, match=r"^no job named 'nosuch'$") as caught:
                client.job("nosuch")
            assert caught.value.status == 404
    for wire in WIRES:
        with pytest.raises(ApiError, match=r"\(the token from test\)$") as caught:
            real(wire, server, token="tsk_wrong").whoami()
        assert caught.value.status == 401
