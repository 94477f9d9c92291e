"""The answers the server writes itself when it closes a connection (server/connections.py)
are whole HTTP messages: each says the length its text has."""

from __future__ import annotations

import re

import pytest

from toposched.server.connections import HEADERS_TOO_LARGE, TIMED_OUT, TOO_MANY


@pytest.mark.parametrize(
    ("answer", "status", "text"),
    [
        (TIMED_OUT, 408, b"the request's headers came too slowly"),
        (TOO_MANY, 503, b"too many connections are being answered"),
        (HEADERS_TOO_LARGE, 431, b"the request's headers are over 64 KiB"),
    ],
)
def test_each_answer_says_its_own_length(answer: bytes, status: int, text: bytes) -> None:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/1.1 {status} ".encode())
    length = re.search(rb"\r\ncontent-length: (\d+)\r\n", head + b"\r\n")
    assert length is not None, head
    assert body == text
    assert int(length.group(1)) == len(text)
    assert b"\r\nconnection: close" in head
