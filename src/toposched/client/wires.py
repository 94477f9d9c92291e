"""Which wire carries the client's requests to a URL: the standard library's or httpx's."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toposched.client.wire import Wire, plain_http


def connect(
    base_url: str,
    headers: Mapping[str, str],
    timeout: float,
    transport: Any = None,
) -> Wire:
    """The wire to `base_url`: the standard library's where the URL is plain HTTP and no
    transport is given, else httpx's (over `transport`, if given)."""
    # Each imported only once chosen: a command's start pays for the one it uses.
    if transport is None and plain_http(base_url):
        from toposched.client.stdlib_wire import StdlibWire

        return StdlibWire(base_url, headers, timeout)
    from toposched.client.httpx_wire import HttpxWire

    return HttpxWire(base_url, headers, timeout, transport)
