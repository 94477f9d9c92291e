"""`toposched kube node-agent` as a process: it publishes, registers, and stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.conftest import DGX1, NODE
from tests.agent.fakes import FakeKubelet
from tests.e2e.conftest import run_cli
from tests.kube.live import LiveCluster
from tests.server import wait_for
from toposched.kube.annotations import TOPOLOGY, decode_topology
from toposched.topology.smi import render_smi


def test_the_command_publishes_registers_and_stops_on_sigterm(
    cluster: LiveCluster,
    kubelet: FakeKubelet,
    plugin_dir: Path,
    agent_kubeconfig: Path,
    tmp_path: Path,
) -> None:
    capture = tmp_path / "topo.txt"
    capture.write_text(render_smi(DGX1))
    args = ["--kubeconfig", str(agent_kubeconfig)]
    args += ["--smi-file", str(capture), "--plugin-dir", str(plugin_dir), "--interval", "0.2"]
    env = {**os.environ, "NODE_NAME": NODE}
    proc = subprocess.Popen(
        [sys.executable, "-m", "toposched", "kube", "node-agent", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert kubelet.registration(timeout_s=30).resource_name == "nvidia.com/gpu"
        node = wait_for(
            lambda: (cluster.get("nodes", NODE) or {})["metadata"].get("annotations"),
            "the topology annotation",
        )
        assert decode_topology(node[TOPOLOGY]).topology.codes() == DGX1.codes()
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=15)
    assert proc.returncode == 0, out
    # (Not "registered": SIGTERM may come before the Register call has returned to the agent.)
    assert f"node {NODE}" in out and "serving the nvidia.com/gpu device plugin" in out
    assert "node agent stopped" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--node-name", NODE], "give --kubeconfig FILE or --in-cluster"),
        (["--kubeconfig", "k"], "give --node-name NAME or set NODE_NAME"),
        (
            ["--kubeconfig", "k", "--node-name", NODE, "--smi-file", "a", "--topology-file", "b"],
            "not both",
        ),
        (["--kubeconfig", "k", "--node-name", NODE, "--smi-file", "/no/such"], "no such file"),
        (
            ["--kubeconfig", "k", "--node-name", NODE, "--scheduler-name", " "],
            "--scheduler-name: give a scheduler name",
        ),
    ],
)
def test_clear_errors(args: list[str], message: str) -> None:
    result = run_cli("kube", "node-agent", *args, NODE_NAME="")
    assert result.code != 0
    assert message in result.err
