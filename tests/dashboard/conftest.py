"""Fixtures of the dashboard's browser tests: one Chromium per module, a real server per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.browser import MISSING, chromium
from tests.server import ServerProcess, running_server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if MISSING:
        pytest.skip(MISSING)
    with chromium() as found:
        yield found


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A real `toposched serve` on an emulated DGX-1, with its admin token."""
    with running_server(tmp_path) as found:
        yield found


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Say at the end of the run, not only in `-rs`, why the browser tests were skipped."""
    if MISSING and terminalreporter.stats.get("skipped"):
        terminalreporter.write_line(f"dashboard browser tests skipped: {MISSING}", yellow=True)
