"""`toposched kube scheduler`: toposched as a secondary Kubernetes scheduler."""

from __future__ import annotations

import logging
import os
import signal
import socket
from dataclasses import replace
from pathlib import Path

import typer

from toposched.cli.output import fail
from toposched.cli.params import policy_params
from toposched.core import SCHEDULER_POLICIES, PolicyError, make_scheduler_policy
from toposched.kube.objects import DEFAULT_RACK_LABEL

app = typer.Typer(no_args_is_help=True, help="toposched on Kubernetes.")


@app.command("scheduler")
def scheduler(
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig", help="A kubeconfig file."),
    in_cluster: bool = typer.Option(False, "--in-cluster", help="Use the pod's service account."),
    scheduler_name: str = typer.Option("toposched", "--scheduler-name"),
    policy: str = typer.Option("toposched", "--policy", help=", ".join(SCHEDULER_POLICIES)),
    param: list[str] = typer.Option([], "--param", help="[POLICY.]KEY=VALUE"),
    namespace: str | None = typer.Option(None, "--namespace", help="Only pods of this one."),
    rack_label: str = typer.Option(DEFAULT_RACK_LABEL, "--rack-label"),
    leader_elect: bool = typer.Option(False, "--leader-elect", help="Lead on a Lease first."),
    lease_namespace: str = typer.Option(
        os.environ.get("POD_NAMESPACE", "toposched-system"),
        "--lease-namespace",
        help="Where the Lease and the toposched-queues ConfigMap live.",
    ),
    listen: str = typer.Option(
        "0.0.0.0:8080", "--listen", help="HOST:PORT of /healthz, /metrics and the read API."
    ),
) -> None:
    """Watch pods whose schedulerName is --scheduler-name, nodes and PodGroups, and bind whole
    gangs onto the best-connected GPUs of each node."""
    from toposched.kube.api import KubeApi
    from toposched.kube.driver import KubeScheduler
    from toposched.kube.readapi import make_app, serve
    from toposched.kube.runner import Lease, Runner

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if kubeconfig is None and not in_cluster:
        fail("give --kubeconfig FILE or --in-cluster")
    try:
        params = policy_params(param, [policy]).get(policy, {})
        chosen = make_scheduler_policy(policy, params)
    except (PolicyError, ValueError) as err:
        fail(str(err))
    # Pods cannot move or change size: a running pod stays where it was bound.
    chosen = replace(chosen, migration=False, elastic=False)
    api = KubeApi.connect(str(kubeconfig) if kubeconfig else None, in_cluster=in_cluster)
    driver = KubeScheduler(
        api,
        chosen,
        scheduler_name=scheduler_name,
        namespace=namespace,
        rack_label=rack_label,
        config_namespace=lease_namespace,
    )
    lease = None
    if leader_elect:
        lease = Lease(api, lease_namespace, f"{socket.gethostname()}-{os.getpid()}")
    runner = Runner(driver, lease=lease)
    host, _, port = listen.rpartition(":")
    serve(make_app(runner), host or "0.0.0.0", int(port))
    signal.signal(signal.SIGTERM, lambda *_: runner.stop.set())
    typer.echo(f"toposched kube scheduler: policy {chosen.name}, scheduler name {scheduler_name}")
    try:
        runner.run()
    except KeyboardInterrupt:
        runner.stop.set()
    if runner.failed:
        raise typer.Exit(1)  # crash-only: its Deployment starts it again, and it rebuilds
