"""The binder's writes in parallel (`Binder._on_connections`): as the pool's map, every
answer in order on at most BIND_CONNECTIONS threads, and after an error no new call starts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import pytest

from toposched.kube.binder import BIND_CONNECTIONS, Binder


def on_connections(call: Callable[[int], int], items: list[int]) -> list[int]:
    """The method on a stand-in for the binder: it needs only the pool."""
    binder: Any = SimpleNamespace(_pool=ThreadPoolExecutor(BIND_CONNECTIONS))
    try:
        return Binder._on_connections(binder, call, items)
    finally:
        binder._pool.shutdown()


def test_every_answer_in_order_at_most_bind_connections_at_once() -> None:
    lock = threading.Lock()
    running = [0, 0]  # now, most

    def call(i: int) -> int:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        time.sleep(0.001 * (i % 3))
        with lock:
            running[0] -= 1
        return i * i

    assert on_connections(call, list(range(200))) == [i * i for i in range(200)]
    assert 1 < running[1] <= BIND_CONNECTIONS
    assert on_connections(call, []) == []


def test_after_an_error_no_new_call_starts_and_the_first_error_is_raised() -> None:
    called: list[int] = []

    def call(i: int) -> int:
        called.append(i)
        if i in (5, 6):
            time.sleep(0.05 if i == 5 else 0.0)  # 6 fails first, 5 is still the first in order
            raise ValueError(f"item {i}")
        time.sleep(0.01)
        return i

    with pytest.raises(ValueError, match="item 5"):
        on_connections(call, list(range(100)))
    assert 5 in called and 6 in called
    assert len(called) < 30  # the rest never started
