"""Fixtures: a started API server emulator, and a kubeconfig pointing at it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.emulator import ApiServer


@pytest.fixture
def apiserver() -> Iterator[ApiServer]:
    """A started emulator on 127.0.0.1 and a free port; stopped (every watch ended) after."""
    with ApiServer() as api:
        yield api
        assert not api.server_errors, api.server_errors[0]


@pytest.fixture
def kubeconfig(apiserver: ApiServer, tmp_path: Path) -> Path:
    """A kubeconfig file for `apiserver` (plain http, any token), namespace `default`."""
    return apiserver.kubeconfig(tmp_path / "kubeconfig")
