"""Slow and half-sent requests against a real server (issue 47, item 3): they are closed
after their deadline, and however many there are, health, submits and the workers' exits are
still served under a small open-file limit."""

from __future__ import annotations

import re
import resource
import select
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from tests.server import Api, ServerProcess, running_server

# The server starts with a soft limit under its hard one: it raises it, and keeps half of it
# for its own files. The half-sent connections are far more than the whole limit.
SOFT, HARD = 128, 256
HALF_SENT = 400
PARTIAL = b"POST /api/v1/jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"


def low_fd_limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (SOFT, HARD))


def half_sent(server: ServerProcess, stack: ExitStack, count: int) -> list[socket.socket]:
    """`count` connections that each sent part of a request's headers and no more (those the
    kernel does not take within a second are left out: it refuses them, not the server)."""
    opened = []
    for _ in range(count):
        sock = stack.enter_context(socket.socket())
        sock.settimeout(1.0)
        try:
            sock.connect(("127.0.0.1", server.port))
            sock.sendall(PARTIAL)
        except OSError:
            continue
        opened.append(sock)
    return opened


@contextmanager
def server_with(tmp: Path, *flags: str) -> Iterator[ServerProcess]:
    with running_server(tmp, args=("--emulate", "dgx1-v100", *flags), preexec=low_fd_limit) as srv:
        yield srv


def test_half_sent_requests_over_the_fd_limit_starve_no_one(tmp_path: Path) -> None:
    with server_with(tmp_path, "--header-timeout", "120") as server, ExitStack() as stack:
        assert f"open-file limit {HARD}" in server.log()
        opened = half_sent(server, stack, HALF_SENT)
        assert len(opened) > HARD, "the flood must outnumber the server's open-file limit"
        api = Api(server)
        try:
            assert api.get("/api/v1/health")["status"] == "ok"
            name = api.submit(command=["true"])["name"]
            # Its end reaches the scheduler only through files the server opens.
            api.until(name, "succeeded", timeout_s=30)
        finally:
            api.http.close()
        assert "Too many open files" not in server.log()


def read_all(sock: socket.socket, within_s: float) -> tuple[bytes, float]:
    """What the server sends until it closes the connection, and how long that took."""
    began = time.monotonic()
    sock.settimeout(within_s)
    said = b""
    while chunk := sock.recv(4096):
        said += chunk
    return said, time.monotonic() - began


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_request_that_stops_halfway_is_closed_after_its_deadline(
    tmp_path: Path, where: str
) -> None:
    flags = ("--header-timeout", "1", "--body-timeout", "1")
    with server_with(tmp_path, *flags) as server, socket.socket() as sock:
        sock.connect(("127.0.0.1", server.port))
        if where == "headers":
            sock.sendall(PARTIAL)
        else:
            sock.sendall(PARTIAL + b"Content-Length: 100\r\n\r\n" + b'{"command": ')
        said, took = read_all(sock, within_s=10)
        assert 0.9 <= took < 5, took
        if where == "headers":
            assert said.startswith(b"HTTP/1.1 408 "), said
        # A body cut short: the route read no whole job, and nothing was stored.
        assert Api(server).get("/api/v1/jobs?all=true")["jobs"] == []


def test_headers_over_the_bound_get_a_whole_431(tmp_path: Path) -> None:
    with server_with(tmp_path) as server, socket.socket() as sock:
        sock.connect(("127.0.0.1", server.port))
        # Headers that never end, as a slowloris client sends them: past 64 KiB, a 431. Sent
        # a line at a time until the answer comes (more after the close would reset it).
        sock.sendall(PARTIAL)
        for _ in range(40):
            sock.sendall(b"X-Pad: " + b"a" * 4096 + b"\r\n")
            if select.select([sock], [], [], 0.05)[0]:
                break
        said, _ = read_all(sock, within_s=10)
    head, _, body = said.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 431 "), said[:200]
    # The client reads as many bytes as the answer says it has: all of the sentence.
    length = re.search(rb"content-length: (\d+)", head)
    assert length is not None, head
    assert int(length.group(1)) == len(body)
    assert body == b"the request's headers are over 64 KiB"
