"""Binding on a real control plane, toposched beside kube-scheduler: pods bound per second,
creation-to-binding latency, and the NVLink bandwidth of each multi-GPU pod's GPUs.

Run: .venv/bin/python benchmarks/kube_bind.py --real --against kube-scheduler \
         [--nodes 1000] [--pods 10000] [--seed 7] [--qps 1000 --burst 2000] [--smoke]

One control plane (tools/kube: etcd, kube-apiserver, kube-controller-manager and, for its run,
kube-scheduler, all v1.37 built from their Go modules) holds --nodes DGX-1 nodes: allocatable
`nvidia.com/gpu: 8`, the DGX-1 topology annotation, opted in to toposched. No kubelet runs:
nodes are created Ready and their `not-ready` taint is taken off as the node lifecycle
controller would (that controller is left out: a thousand node leases renewed every few seconds
would load the API server more than the schedulers do).

The same workload is bound twice, once by each scheduler, each in a namespace of its own, the
other scheduler stopped: --pods pods (seeded), half of them 1-GPU pods of their own, half in
gangs of 4 pods of 2 GPUs each, Kubernetes' own gang API (a scheduling.k8s.io/v1beta1 PodGroup
with gang.minCount 4; kube-scheduler runs its GangScheduling plugin, toposched reads the same
PodGroups). All pods are created as a burst by --creators client threads; a kubelet stand-in
ends each bound pod (phase Succeeded) after its run time (uniform in 0.5-1.5 x --run-s), so
GPUs free up and every pod binds in the end. A watch times each pod from its creation (as the
client sent it) to its binding.

Both schedulers' clients are held to the same limit: --qps requests a second on average and
--burst at once (kube-scheduler's clientConnection qps/burst; toposched's --kube-api-qps and
--kube-api-burst). toposched runs as `toposched kube scheduler`, a process of its own, as the
cluster admin; kube-scheduler as system:kube-scheduler.

Placement quality: the mean ring bandwidth (GB/s) of each 2-GPU pod's GPUs on its DGX-1, and
the share on the best ring a DGX-1 has for 2 GPUs (50 GB/s, an NV2 pair). toposched's GPUs are
those it writes on the pod (toposched.io/gpus); kube-scheduler's are what the kubelet's device
manager gives without a preference: the lowest free indices of the node, modelled here as pods
come and go.

The last line is JSON: toposched_pods_per_s, kube_scheduler_pods_per_s,
toposched_ring_gbps_mean, kube_scheduler_ring_gbps_mean, nodes, pods.

`--smoke` (CI, seconds): 4 nodes, 16 pods of 0.5 s, 2 creators, 60 s per scheduler, on the same
real control plane; it builds none: without the binaries (`make kube-binaries`) it exits 1.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import json
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tools/kube, the control plane

from tools.kube import build  # noqa: E402
from tools.kube.controlplane import ControlPlane, free_port  # noqa: E402

from toposched.kube.annotations import GPUS, encode_topology  # noqa: E402
from toposched.kube.api import ApiError, KubeApi  # noqa: E402
from toposched.placement.ring import ring_bandwidth  # noqa: E402
from toposched.topology import preset  # noqa: E402

NODE_GPUS = 8
DGX1 = preset("dgx1-v100")
GANG_PODS, GANG_GPUS = 4, 2
BEST = {
    size: max(ring_bandwidth(DGX1, list(c)) or 0.0 for c in itertools.combinations(range(8), size))
    for size in (2, 4)
}
SCHEDULER_CONFIG = """apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: KUBECONFIG
  qps: {qps}
  burst: {burst}
leaderElection:
  leaderElect: false
"""


@dataclass(frozen=True)
class Gang:
    name: str
    pods: int
    gpus: int  # per pod
    run_s: tuple[float, ...]  # each pod's run time


def workload(pods: int, seed: int, run_s: float) -> list[Gang]:
    """Half the pods 1-GPU pods of their own, half in 4-pod gangs of 2 GPUs, shuffled."""
    rng = random.Random(seed)
    gangs = pods // 2 // GANG_PODS
    singles = pods - gangs * GANG_PODS
    kinds = [(GANG_PODS, GANG_GPUS)] * gangs + [(1, 1)] * singles
    rng.shuffle(kinds)
    return [
        Gang(
            f"{'gang' if count > 1 else 'pod'}-{i:05d}",
            count,
            gpus,
            tuple(run_s * rng.uniform(0.5, 1.5) for _ in range(count)),
        )
        for i, (count, gpus) in enumerate(kinds)
    ]


def node(name: str, annotation: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"toposched.io/gpu-schedule": "topology", "toposched.io/rack": name[:4]},
            "annotations": {"toposched.io/topology": annotation},
        },
        "status": {
            "capacity": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "768Gi", "pods": "110"},
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "768Gi", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, namespace: str, gpus: int, group: str, scheduler: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
        ],
        "terminationGracePeriodSeconds": 0,
    }
    if scheduler == "toposched":
        spec["schedulerName"] = "toposched"
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def podgroup(name: str, count: int) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": count}}},
    }


@dataclass
class Run:
    """One scheduler's run: what was made and bound when, and each pod's GPUs."""

    scheduler: str
    namespace: str
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    rings: dict[str, float] = field(default_factory=dict)  # of each 2-GPU pod
    nodes: dict[str, str] = field(default_factory=dict)  # where each pod was bound
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: threading.Event = field(default_factory=threading.Event)


class Kubelets:
    """The nodes' side: each bound pod's GPUs (toposched's annotation, or the lowest free
    indices for kube-scheduler's pods), and its end once its run time is over."""

    def __init__(self, api: KubeApi, run: Run, run_s: dict[str, float], total: int) -> None:
        self.api, self.run, self.run_s, self.total = api, run, run_s, total
        self.used: dict[str, set[int]] = {}
        self.held: dict[str, tuple[str, tuple[int, ...]]] = {}
        self.due: list[tuple[float, str]] = []
        self.cond = threading.Condition()

    def bound(self, obj: dict[str, Any]) -> None:
        name, node_name = obj["metadata"]["name"], obj["spec"]["nodeName"]
        want = int(obj["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"])
        with self.cond:
            used = self.used.setdefault(node_name, set())
            text = (obj["metadata"].get("annotations") or {}).get(GPUS)
            if text:
                gpus = tuple(int(g) for g in text.split(","))
            else:  # the device manager's choice without a preference
                gpus = tuple([g for g in range(NODE_GPUS) if g not in used][:want])
            used.update(gpus)
            self.held[name] = (node_name, gpus)
            heapq.heappush(self.due, (time.monotonic() + self.run_s[name], name))
            self.cond.notify()
        if want > 1:
            with self.run.lock:
                self.run.rings[name] = ring_bandwidth(DGX1, list(gpus)) or 0.0
        with self.run.lock:
            self.run.nodes[name] = node_name

    def end_pods(self) -> None:
        """Mark each pod Succeeded once its run time is over, as its kubelet would."""
        with ThreadPoolExecutor(8) as pool:
            while not self.run.done.is_set():
                with self.cond:
                    now = time.monotonic()
                    ready = []
                    while self.due and self.due[0][0] <= now:
                        ready.append(heapq.heappop(self.due)[1])
                    if not ready:
                        self.cond.wait(
                            timeout=min(0.05, self.due[0][0] - now) if self.due else 0.05
                        )
                        continue
                list(pool.map(self._end, ready))

    def _end(self, name: str) -> None:
        with self.cond:
            node_name, gpus = self.held.pop(name)
            self.used[node_name].difference_update(gpus)
        path = f"/api/v1/namespaces/{self.run.namespace}/pods/{name}/status"
        try:
            self.api.request(
                "PATCH",
                path,
                body={"status": {"phase": "Succeeded"}},
                content_type="application/merge-patch+json",
            )
        except ApiError as err:
            print(f"ending {name}: {err}", file=sys.stderr)


def watch(api: KubeApi, run: Run, kubelets: Kubelets, version: str) -> None:
    """Each pod's binding, as a client's watch sees it."""
    path = f"/api/v1/namespaces/{run.namespace}/pods"
    while not run.done.is_set():
        try:
            for event in api.watch(path, version, 30):
                obj = event.get("object") or {}
                version = (obj.get("metadata") or {}).get("resourceVersion") or version
                if event.get("type") == "BOOKMARK":
                    continue
                name = obj["metadata"]["name"]
                if (obj.get("spec") or {}).get("nodeName") and name not in run.bound:
                    with run.lock:
                        run.bound[name] = time.time()
                        finished = len(run.bound) >= kubelets.total
                    kubelets.bound(obj)
                    if finished:
                        run.done.set()
                        return
        except ApiError as err:
            print(f"watch: {err}", file=sys.stderr)
            time.sleep(0.5)


def create_all(api: KubeApi, run: Run, gangs: list[Gang], creators: int) -> None:
    """The burst: every PodGroup and pod, made by `creators` threads."""
    ns = run.namespace

    def make(gang: Gang) -> None:
        if gang.pods > 1:
            api.request(
                "POST",
                f"/apis/scheduling.k8s.io/v1beta1/namespaces/{ns}/podgroups",
                body=podgroup(gang.name, gang.pods),
            )
        for i in range(gang.pods):
            name = f"{gang.name}-{i}" if gang.pods > 1 else gang.name
            body = pod(name, ns, gang.gpus, gang.name if gang.pods > 1 else "", run.scheduler)
            with run.lock:
                run.created[name] = time.time()
            api.request("POST", f"/api/v1/namespaces/{ns}/pods", body=body)

    with ThreadPoolExecutor(creators) as pool:
        list(pool.map(make, gangs))


def cpu_seconds(pid: int) -> float:
    """A process's CPU time so far (user and system), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    import os

    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_toposched(
    plane: ControlPlane, args: argparse.Namespace, log: Path
) -> subprocess.Popen[bytes]:
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "toposched",
        "kube",
        "scheduler",
        "--kubeconfig",
        str(plane.admin_kubeconfig),
        "--listen",
        f"127.0.0.1:{port}",
        "--kube-api-qps",
        str(args.qps),
        "--kube-api-burst",
        str(args.burst),
    ]
    with log.open("wb") as out:
        proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1):
                return proc
        except OSError:
            if proc.poll() is not None:
                raise SystemExit(f"toposched exited: {log.read_text()[-2000:]}") from None
            time.sleep(0.2)
    raise SystemExit("toposched did not answer /healthz in 120 s")


def bench(
    plane: ControlPlane, api: KubeApi, scheduler: str, gangs: list[Gang], args: argparse.Namespace
) -> dict[str, Any]:
    ns = f"bench-{scheduler}"
    api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    deadline = time.monotonic() + 60
    while not api.list(f"/api/v1/namespaces/{ns}/serviceaccounts")[0]:
        if time.monotonic() > deadline:
            raise SystemExit(f"no service account in {ns}")
        time.sleep(0.1)
    run = Run(scheduler, ns)
    run_s = {
        (f"{g.name}-{i}" if g.pods > 1 else g.name): g.run_s[i]
        for g in gangs
        for i in range(g.pods)
    }
    kubelets = Kubelets(api, run, run_s, len(run_s))
    if scheduler == "toposched":
        proc = start_toposched(plane, args, plane.home / "logs" / "toposched.log")
        pid = proc.pid
    else:
        plane.start_scheduler(SCHEDULER_CONFIG.format(qps=args.qps, burst=args.burst))
        pid = plane.processes["kube-scheduler"].pid
        time.sleep(3)  # its informers' first lists
    _, version = api.list(f"/api/v1/namespaces/{ns}/pods")
    threads = [
        threading.Thread(target=watch, args=(api, run, kubelets, version), daemon=True),
        threading.Thread(target=kubelets.end_pods, daemon=True),
    ]
    for thread in threads:
        thread.start()
    cpu_before = cpu_seconds(pid)
    began = time.time()
    create_all(api, run, gangs, args.creators)
    created_s = time.time() - began
    finished = run.done.wait(args.timeout)
    cpu = cpu_seconds(pid) - cpu_before
    run.done.set()
    if scheduler == "toposched":
        proc.terminate()
        proc.wait(timeout=30)
    else:
        plane.stop_component("kube-scheduler")
    with run.lock:
        latencies = sorted(
            (run.bound[n] - run.created[n]) * 1000 for n in run.bound if n in run.created
        )
        last = max(run.bound.values(), default=began)
        rings = list(run.rings.values())
        spanning = _spanning(run)
    wall = last - min(run.created.values(), default=began)
    best = sum(1 for r in rings if r >= BEST[GANG_GPUS])
    return {
        "scheduler": scheduler,
        "pods": len(run.bound),
        "of": len(run_s),
        "finished": finished,
        "wall_s": round(wall, 1),
        "create_s": round(created_s, 1),
        "pods_per_s": round(len(run.bound) / wall, 1) if wall else 0.0,
        "p50_create_to_bind_ms": round(_pct(latencies, 0.5), 1),
        "p99_create_to_bind_ms": round(_pct(latencies, 0.99), 1),
        "multi_gpu_pods": len(rings),
        "ring_gbps_mean": round(sum(rings) / len(rings), 2) if rings else 0.0,
        "on_best_ring": round(best / len(rings), 4) if rings else 0.0,
        # The 2-GPU pods not on the best ring: how many of them are in gangs spanning nodes.
        "off_best_in_spanning_gangs": sum(
            1 for n, r in run.rings.items() if r < BEST[GANG_GPUS] and spanning.get(n, False)
        ),
        "off_best": len(rings) - best,
        "scheduler_cpu_s": round(cpu, 1),
    }


def _spanning(run: Run) -> dict[str, bool]:
    """For each pod of a gang, whether its gang was bound on more than one node."""
    gangs: dict[str, set[str]] = {}
    for name, node_name in run.nodes.items():
        if name.startswith("gang-"):
            gangs.setdefault(name.rsplit("-", 1)[0], set()).add(node_name)
    return {
        name: len(gangs[name.rsplit("-", 1)[0]]) > 1
        for name in run.nodes
        if name.startswith("gang-")
    }


def _pct(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    return values[min(len(values) - 1, int(q * len(values)))]


def make_nodes(api: KubeApi, count: int) -> None:
    """The nodes, Ready, without the taint admission puts on new nodes."""
    annotation = encode_topology(DGX1)

    def one(i: int) -> None:
        name = f"n{i:05d}"
        api.request("POST", "/api/v1/nodes", body=node(name, annotation))
        api.request(
            "PATCH",
            f"/api/v1/nodes/{name}",
            body={"spec": {"taints": None}},
            content_type="application/merge-patch+json",
        )

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(count)))


def control_plane_binaries(smoke: bool, say: Callable[[str], None]) -> Path:
    """The control plane's binaries, built first unless `smoke`: a smoke run must not start the
    first build (about 15 minutes; CI builds it before). SystemExit says how to get them."""
    try:
        binaries = build.built() if smoke else build.build(say)
    except build.BuildError as err:
        raise SystemExit(f"error: {err}") from None
    if binaries is None:
        raise SystemExit(
            "error: no Kubernetes control plane built for the pinned versions (or no `go`): "
            f"`make kube-binaries` builds it ({build.FIRST_BUILD}) into {build.cache_root()}"
        )
    return binaries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--real",
        action="store_true",
        help="on a real control plane (tools/kube): the only mode there is",
    )
    parser.add_argument(
        "--against",
        choices=["kube-scheduler"],
        default=None,
        help="also bind the same workload with the real kube-scheduler",
    )
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--run-s", type=float, default=20.0, help="a pod's mean run time")
    parser.add_argument("--qps", type=float, default=1000.0, help="each scheduler's client")
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--creators", type=int, default=8, help="client threads making pods")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds per scheduler")
    parser.add_argument("--logs", type=Path, help="keep the components' logs in this folder")
    parser.add_argument(
        "--smoke", action="store_true", help="4 nodes, 16 pods; binaries already built (CI)"
    )
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.pods, args.run_s, args.creators, args.timeout = 4, 16, 0.5, 2, 60.0

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    binaries = control_plane_binaries(args.smoke, say)
    gangs = workload(args.pods, args.seed, args.run_s)
    with tempfile.TemporaryDirectory(prefix="kube-bind-") as tmp:
        plane = ControlPlane(Path(tmp), binaries, controllers="*,-node-lifecycle-controller")
        with plane:
            say(f"control plane {plane.version()}; {args.nodes} nodes ...")
            api = KubeApi.connect(str(plane.admin_kubeconfig))
            began = time.monotonic()
            make_nodes(api, args.nodes)
            say(f"{args.nodes} nodes in {time.monotonic() - began:.0f} s")
            results = []
            for scheduler in ["toposched", *([args.against] if args.against else [])]:
                say(f"{scheduler}: {args.pods} pods ...")
                result = bench(plane, api, scheduler, gangs, args)
                results.append(result)
                print(
                    f"{scheduler:>14}: {result['pods']}/{result['of']} pods in "
                    f"{result['wall_s']} s = {result['pods_per_s']} pods/s; create to bind "
                    f"p50 {result['p50_create_to_bind_ms']} ms, p99 "
                    f"{result['p99_create_to_bind_ms']} ms; {result['multi_gpu_pods']} 2-GPU "
                    f"pods: ring {result['ring_gbps_mean']} GB/s mean, "
                    f"{result['on_best_ring']:.1%} on the best ring; "
                    f"scheduler CPU {result['scheduler_cpu_s']} s",
                    flush=True,
                )
            if args.logs:
                shutil.copytree(plane.home / "logs", args.logs, dirs_exist_ok=True)
    by = {r["scheduler"]: r for r in results}
    print(json.dumps({"results": results, "qps": args.qps, "burst": args.burst}))
    kube = by.get("kube-scheduler", {})
    print(
        json.dumps(
            {
                "toposched_pods_per_s": by["toposched"]["pods_per_s"],
                "kube_scheduler_pods_per_s": kube.get("pods_per_s"),
                "toposched_ring_gbps_mean": by["toposched"]["ring_gbps_mean"],
                "kube_scheduler_ring_gbps_mean": kube.get("ring_gbps_mean"),
                "nodes": args.nodes,
                "pods": args.pods,
            }
        )
    )
    if args.smoke and not all(r["finished"] for r in results):
        # A full run reports a timeout in its figures; in a smoke run (16 pods on 32 free
        # GPUs) one means the binding is broken.
        raise SystemExit("smoke: a scheduler did not bind every pod within --timeout")


if __name__ == "__main__":
    main()
