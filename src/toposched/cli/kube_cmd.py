"""`toposched kube scheduler | node-agent | submit | list | get | explain | logs | delete | top`."""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import signal
import socket
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from toposched.agent.proto import DEFAULT_PLUGIN_DIR, DEFAULT_POD_RESOURCES
from toposched.cli import kube_jobs_cmd
from toposched.cli.flags import typer_function
from toposched.cli.output import fail
from toposched.cli.params import policy_params
from toposched.cli.submit_command import SubmitCommand
from toposched.core import SCHEDULER_POLICIES, PolicyError, make_scheduler_policy
from toposched.discovery.catalog_files import load_perf_model
from toposched.kube.objects import DEFAULT_RACK_LABEL, GPU_RESOURCE
from toposched.perf import PerfError
from toposched.perf.model import DEFAULT_FRAMEWORK, DEFAULT_NETWORK

if TYPE_CHECKING:
    from toposched.topology.node import NodeTopology

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
    pod_name: str = typer.Option(
        "",
        "--pod-name",
        envvar="POD_NAME",
        help="This replica's pod: the leader labels it toposched.io/role=leader.",
    ),
    pod_namespace: str = typer.Option(
        "", "--pod-namespace", envvar="POD_NAMESPACE", help="The namespace of --pod-name."
    ),
    listen: str = typer.Option(
        "0.0.0.0:8080", "--listen", help="HOST:PORT of /healthz, /metrics and the read API."
    ),
    catalogs: list[str] = typer.Option(
        [],
        "--catalog",
        help="Extra performance catalog YAML (repeatable; `perf fit --out` writes one).",
    ),
    network: str = typer.Option(
        DEFAULT_NETWORK, "--network", help="The cluster's network profile in the catalog."
    ),
    framework: str = typer.Option(
        DEFAULT_FRAMEWORK, "--framework", help="The catalog framework jobs train with."
    ),
    kube_api_qps: float = typer.Option(
        0.0,
        "--kube-api-qps",
        min=0.0,
        help="Requests a second to the API server, on average, at most (0: no limit; "
        "kube-scheduler's default is 50).",
    ),
    kube_api_burst: int = typer.Option(
        0, "--kube-api-burst", min=0, help="Requests at once at most (default: 2 x the qps)."
    ),
) -> None:
    """Watch pods whose schedulerName is --scheduler-name, nodes and PodGroups, and bind whole
    gangs onto the best-connected GPUs of each node. The performance catalog (--catalog,
    --network, --framework) weighs a job's GPU types, and predicts where a gang annotated
    `toposched.io/model` runs fastest across nodes: by default it spreads such a gang over
    more nodes than the fewest only where it predicts that at least 10% faster
    (`--param toposched.spread_by_model=0.1`; `=null` places on the fewest nodes)."""
    from toposched.kube.api import KubeApi, RateLimit
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
    try:
        perf = load_perf_model(catalogs, network, framework)
    except PerfError as err:
        fail(str(err))
    # Pods cannot move or change size: a running pod stays where it was bound.
    chosen = replace(chosen, migration=False, elastic=False)
    limit = None
    if kube_api_qps > 0:
        limit = RateLimit(kube_api_qps, kube_api_burst or max(int(2 * kube_api_qps), 1))
    api = KubeApi.connect(
        str(kubeconfig) if kubeconfig else None, in_cluster=in_cluster, limit=limit
    )
    driver = KubeScheduler(
        api,
        chosen,
        scheduler_name=scheduler_name,
        namespace=namespace,
        rack_label=rack_label,
        config_namespace=lease_namespace,
        perf=perf,
        framework=framework,
        network=network,
    )
    lease = None
    if leader_elect:
        lease = Lease(api, lease_namespace, f"{socket.gethostname()}-{os.getpid()}")
    pod = (pod_namespace, pod_name) if pod_name and pod_namespace else None
    runner = Runner(driver, lease=lease, pod=pod)
    host, _, port = listen.rpartition(":")
    serve(make_app(runner), host or "0.0.0.0", int(port))
    signal.signal(signal.SIGTERM, lambda *_: runner.stop.set())
    spread = chosen.spread_by_model
    typer.echo(
        f"toposched kube scheduler: policy {chosen.name}, scheduler name {scheduler_name}, "
        f"spread_by_model {'off' if spread is None else spread}"
    )
    try:
        runner.run()
    except KeyboardInterrupt:
        runner.stop.set()
    if runner.failed:
        raise typer.Exit(1)  # crash-only: its Deployment starts it again, and it rebuilds


@app.command("node-agent")
def node_agent(
    kubeconfig: Path | None = typer.Option(None, "--kubeconfig", help="A kubeconfig file."),
    in_cluster: bool = typer.Option(False, "--in-cluster", help="Use the pod's service account."),
    node_name: str = typer.Option("", "--node-name", envvar="NODE_NAME", help="This node's name."),
    topology_file: Path | None = typer.Option(
        None, "--topology-file", help="A YAML topology, nvidia-smi capture or preset, not NVML."
    ),
    smi_file: Path | None = typer.Option(
        None, "--smi-file", help="An `nvidia-smi topo -m` capture, instead of NVML."
    ),
    resource: str = typer.Option(GPU_RESOURCE, "--resource", help="The extended resource."),
    plugin_dir: Path = typer.Option(
        Path(DEFAULT_PLUGIN_DIR), "--plugin-dir", help="The kubelet's device plugin directory."
    ),
    dev_dir: Path = typer.Option(
        Path("/dev"), "--dev-dir", help="The host's directory of the device files."
    ),
    dev_mount: Path | None = typer.Option(
        None, "--dev-mount", help="Where this container sees --dev-dir (default: itself)."
    ),
    interval: float = typer.Option(10.0, "--interval", min=0.1, help="Seconds between polls."),
    pod_resources: Path = typer.Option(
        Path(DEFAULT_POD_RESOURCES),
        "--pod-resources-socket",
        help="The kubelet's pod resources API: which pod it is admitting.",
    ),
    metrics_listen: str = typer.Option(
        "0.0.0.0:9400",
        "--metrics-listen",
        metavar="HOST:PORT",
        help="Where /metrics serves each GPU's utilization and memory by pod, namespace and "
        "container, as NVIDIA's dcgm-exporter names them (its port by default); '' for none. "
        "Needs NVML.",
    ),
    dra: bool = typer.Option(
        True,
        "--dra/--no-dra",
        help="Publish the GPUs as a ResourceSlice (Dynamic Resource Allocation, driver "
        "gpu.toposched.io) and serve the kubelet's DRA plugin API, where the cluster serves "
        "resource.k8s.io/v1.",
    ),
    dra_plugins_dir: Path = typer.Option(
        Path("/var/lib/kubelet/plugins"),
        "--dra-plugins-dir",
        help="The kubelet's DRA plugins directory: the plugin's socket is made in "
        "gpu.toposched.io/ there.",
    ),
    plugins_registry: Path = typer.Option(
        Path("/var/lib/kubelet/plugins_registry"),
        "--plugins-registry",
        help="The kubelet's plugin registration directory, where it finds the DRA plugin.",
    ),
    scheduler_names: list[str] = typer.Option(
        ["toposched"],
        "--scheduler-name",
        help="The --scheduler-name of toposched's scheduler (repeat for several): only pods "
        "that ask for it and that it bound get the GPUs of their toposched.io/gpus.",
    ),
) -> None:
    """Publish this node's GPU topology and health on its Node, and serve the kubelet device
    plugin that gives each container the GPUs toposched chose for its pod."""
    from toposched.agent.activity import PodActivity, serve_metrics
    from toposched.agent.agent import NodeAgent
    from toposched.agent.health import NvmlHealth
    from toposched.agent.plugin import GpuPlugin, PluginConfig, pods_on
    from toposched.agent.podmatch import AllocationBook
    from toposched.agent.publisher import Publisher
    from toposched.agent.server import PluginServer
    from toposched.agent.state import NodeState
    from toposched.discovery.nvml import discover_minors
    from toposched.kube.api import KubeApi

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if kubeconfig is None and not in_cluster:
        fail("give --kubeconfig FILE or --in-cluster")
    if not node_name:
        fail("give --node-name NAME or set NODE_NAME (the DaemonSet sets it from spec.nodeName)")
    if topology_file and smi_file:
        fail("give --topology-file or --smi-file, not both")
    if not all(name.strip() for name in scheduler_names):
        fail("--scheduler-name: give a scheduler name, not an empty one")
    read_topology, nvml = _topology_source(topology_file, smi_file)
    read_minors = partial(discover_minors, nvml) if nvml is not None else None
    if read_minors is None:
        typer.echo("without NVML the GPUs' device files are taken as /dev/nvidia<index>", err=True)
    health = NvmlHealth(nvml) if nvml is not None else None
    if health is None:
        typer.echo("NVML is not available: GPU health is not watched", err=True)
    api = KubeApi.connect(str(kubeconfig) if kubeconfig else None, in_cluster=in_cluster)
    state = NodeState()
    config = PluginConfig(
        node_name,
        resource,
        plugin_dir,
        dev_dir,
        dev_mount,
        pod_resources,
        schedulers=tuple(scheduler_names),
    )
    plugin = GpuPlugin(config, state, pods_on(api, node_name), AllocationBook(config.book_file))
    activity = None
    if nvml is not None:
        from toposched.discovery.gpu_usage import NvmlUsage

        activity = PodActivity(
            api,
            node_name,
            NvmlUsage(nvml),
            pods_on(api, node_name),
            resource,
            schedulers=tuple(scheduler_names),
        )
        if metrics_listen:
            try:
                serve_metrics(activity, metrics_listen)
            except (OSError, ValueError) as err:
                fail(f"--metrics-listen {metrics_listen!r}: {err}")
    else:
        typer.echo("without NVML no GPU metrics are served and no idle rule is applied", err=True)
    slices = None
    if dra and _serves_dra(api):
        from toposched.agent.dra import SlicePublisher, facts_from_nvml
        from toposched.agent.drakubelet import DraPlugin, serve_dra

        slices = SlicePublisher(api, node_name, facts_from_nvml(nvml) if nvml is not None else ())
        size = read_topology().size
        serve_dra(DraPlugin(api, node_name, size), dra_plugins_dir, plugins_registry)
    elif dra:
        typer.echo("the cluster does not serve resource.k8s.io/v1: no ResourceSlice", err=True)
    agent = NodeAgent(
        Publisher(api, node_name, state, read_topology, health, read_minors, slices),
        PluginServer(plugin),
        interval,
        activity,
    )
    # SIGTERM interrupts the loop as Ctrl-C does (run() stops the plugin on its way out). A
    # handler that set agent.stop instead could deadlock: it runs in the main thread, which may
    # hold that Event's lock inside stop.wait() at that moment.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    source = topology_file or smi_file or "NVML"
    typer.echo(
        f"toposched kube node-agent: node {node_name}, {resource}, topology from {source}, "
        f"GPUs as chosen for the pods of scheduler {' or '.join(scheduler_names)}"
    )
    with contextlib.suppress(KeyboardInterrupt):
        agent.run()


def _serves_dra(api: Any) -> bool:
    """Whether the API server serves resource.k8s.io/v1 (DRA, GA in 1.34)."""
    from toposched.kube.api import ApiError

    try:
        api.request("GET", "/apis/resource.k8s.io/v1")
    except ApiError:
        return False
    return True


def _topology_source(
    topology_file: Path | None, smi_file: Path | None
) -> tuple[Callable[[], NodeTopology], Any]:
    """How the topology is read, and the NVML module for health (None where it cannot load)."""
    from toposched.discovery.files import load_topology
    from toposched.discovery.nvml import discover_topology, nvml_available
    from toposched.topology.presets import PRESETS
    from toposched.topology.smi import parse_smi

    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        nvml = None
    if (topology_file or smi_file) and nvml is not None and not nvml_available(nvml):
        nvml = None  # a topology given by hand, on a machine without the driver: no health
    if topology_file is not None:
        if not topology_file.is_file() and str(topology_file) not in PRESETS:
            fail(f"--topology-file {topology_file}: no such file or preset")
        return partial(load_topology, str(topology_file)), nvml
    if smi_file is not None:
        if not smi_file.is_file():
            fail(f"--smi-file {smi_file}: no such file")
        return lambda: parse_smi(smi_file.read_text(), source=str(smi_file)), nvml
    if nvml is None:
        fail("NVML is not available (pip install 'toposched[nvml]'); or give --topology-file")
    return partial(discover_topology, nvml), nvml


# Jobs on a cluster, Arena-like: the commands live with their helpers in kube_jobs_cmd.
app.command("submit", cls=SubmitCommand)(typer_function(kube_jobs_cmd.submit))
app.command("list")(kube_jobs_cmd.list_jobs)
app.command("get")(kube_jobs_cmd.get)
app.command("explain")(kube_jobs_cmd.explain)
app.command("logs")(kube_jobs_cmd.logs)
app.command("delete")(kube_jobs_cmd.delete)
top_app = typer.Typer(no_args_is_help=True, help="What the scheduler sees of the cluster.")
top_app.command("node")(kube_jobs_cmd.top_node)
app.add_typer(top_app, name="top")
