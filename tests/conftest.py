"""The session's Kubernetes control plane (tests/kube/realcluster.py), started once for the
tests that ask for it, and the strict mode of `make kube-test`."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.kube.live import ENV
from tests.kube.realcluster import HOW_TO_RUN, Session, binaries, start

STRICT = "TOPOSCHED_KUBE_STRICT"  # set by `make kube-test`: a skipped test fails the run


@pytest.fixture(scope="session")
def kube_session(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Session | None]:
    """The control plane of the whole session, built first where it is missing; None where
    the tests run against $TOPOSCHED_KUBECONFIG instead."""
    if os.environ.get(ENV):
        yield None
        return
    reporter = request.config.pluginmanager.get_plugin("terminalreporter")

    def say(line: str) -> None:
        if reporter is not None:
            reporter.write_line(f"[kube] {line}")

    folder = binaries(say)
    if folder is None:
        pytest.skip(f"no `go` command on this machine: {HOW_TO_RUN}")
    session = start(tmp_path_factory.mktemp("control-plane"), folder)
    say(f"control plane {session.plane.version()} on {session.plane.server}")
    yield session
    session.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under `make kube-test`, a skipped test is a failure: every test must have run."""
    if not os.environ.get(STRICT):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    if skipped:
        reporter.write_line(f"{len(skipped)} test(s) skipped under {STRICT}: failing the run")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
