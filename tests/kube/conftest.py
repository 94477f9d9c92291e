"""Fixtures: a started API server emulator, a kubeconfig pointing at it, and a `Cluster` of
it to start schedulers on.

With `TOPOSCHED_KUBECONFIG` set, `apiserver` is a `tests.kube.live.LiveCluster` over that
cluster instead (a scratch cluster: see tests/kube/live.py), and `kubeconfig` is that file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.kube.live import cluster_for_tests
from tests.kube.test_scheduler_e2e import Cluster


@pytest.fixture
def apiserver() -> Iterator[Any]:
    """A started emulator on 127.0.0.1 and a free port; stopped (every watch ended) after.
    Or, with TOPOSCHED_KUBECONFIG set, the real cluster, cleaned of what the test made after."""
    with cluster_for_tests() as api:
        yield api


@pytest.fixture
def kubeconfig(apiserver: Any, tmp_path: Path) -> Path:
    """A kubeconfig file for `apiserver` (plain http, any token), namespace `default`; on a
    real cluster, TOPOSCHED_KUBECONFIG itself."""
    return Path(apiserver.kubeconfig(tmp_path / "kubeconfig"))


@pytest.fixture
def cluster(apiserver: Any, kubeconfig: Path) -> Iterator[Cluster]:
    """The emulator (or the live cluster) and the schedulers a test starts, stopped after."""
    c = Cluster(apiserver, kubeconfig)
    yield c
    c.stop()
