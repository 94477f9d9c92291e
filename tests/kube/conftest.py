"""Fixtures: the session's real API server (or $TOPOSCHED_KUBECONFIG's) as a `LiveCluster`,
the scheduler's kubeconfig, and a `Cluster` of it to start schedulers on."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kube.live import LiveCluster, cluster_for_tests
from tests.kube.realcluster import Session
from tests.kube.test_scheduler_e2e import Cluster


@pytest.fixture(autouse=True)
def scheduler_log(caplog: pytest.LogCaptureFixture) -> None:
    """The schedulers' decisions (INFO) kept, and shown with a failed test's output."""
    caplog.set_level(logging.INFO, logger="toposched")


@pytest.fixture
def apiserver(kube_session: Session | None) -> Iterator[LiveCluster]:
    """The real API server; everything a test made is deleted after it."""
    with cluster_for_tests(kube_session) as api:
        yield api


@pytest.fixture
def kubeconfig(apiserver: LiveCluster) -> Path:
    """The scheduler's kubeconfig: its own service account, through the fault proxy."""
    return apiserver.kubeconfig()


@pytest.fixture
def cluster(apiserver: LiveCluster, kubeconfig: Path) -> Iterator[Cluster]:
    """The API server and the schedulers a test starts, stopped after."""
    c = Cluster(apiserver, kubeconfig)
    yield c
    c.stop()
