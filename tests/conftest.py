"""The session's Kubernetes control plane (tests/kube/realcluster.py), started once for the
tests that ask for it, and the strict mode of `make kube-test`."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.kube.live import ENV
from tests.kube.realcluster import HOW_TO_RUN, Session, binaries, start

# Set by `make kube-test` and `.ci/run`: a skipped test of the Kubernetes suites fails the run.
STRICT = "TOPOSCHED_KUBE_STRICT"
KUBE_SUITES = ("tests/kube/", "tests/agent/")


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
    capture = request.config.pluginmanager.get_plugin("capturemanager")

    def say(line: str) -> None:
        """A line on the terminal at once, around the capture of the test's output."""
        if reporter is None:
            return
        if capture is None:
            reporter.write_line(f"[kube] {line}")
            return
        with capture.global_and_fixture_disabled():
            reporter.write_line(f"[kube] {line}")

    folder = binaries(say)
    if folder is None:
        pytest.skip(f"no `go` command on this machine: {HOW_TO_RUN}")
    session = start(tmp_path_factory.mktemp("control-plane"), folder)
    say(f"control plane {session.plane.version()} on {session.plane.server}")
    yield session
    session.close()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under `make kube-test` and CI, a skipped Kubernetes test is a failure: every one of
    them must have run against the real control plane."""
    if not os.environ.get(STRICT):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is None:
        return
    skipped = [r for r in reporter.stats.get("skipped", []) if r.nodeid.startswith(KUBE_SUITES)]
    if skipped:
        reporter.write_line(f"{len(skipped)} Kubernetes test(s) skipped under {STRICT}:")
        for report in skipped:
            reporter.write_line(f"  {report.nodeid}: {report.longrepr}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
