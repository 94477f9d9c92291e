"""Dynamic Resource Allocation on a real control plane, toposched beside kube-scheduler's own
allocator: the NVLink bandwidth of the GPUs each multi-GPU claim gets, and claims allocated per
second.

Run: .venv/bin/python benchmarks/dra_alloc.py [--nodes 16] [--claims 100] [--seed 7] [--smoke]

One control plane (tools/kube: etcd, kube-apiserver, kube-controller-manager with its resource
claim controller, and for its run kube-scheduler, all v1.37 built from their Go modules) holds
--nodes DGX-1 nodes, each with the ResourceSlice its node agent publishes (driver
gpu.toposched.io, devices gpu-0..gpu-7 in index order) and the topology annotation, and the
DeviceClass gpu.toposched.io. No kubelet runs: a bound pod stays bound and keeps its devices.

The same workload is allocated twice, once by each scheduler, each in a namespace of its own,
the other scheduler stopped: --claims pods (seeded), each asking 1, 2 or 4 GPUs (a third each)
by a claim from a ResourceClaimTemplate, created one after another, up to about 3/4 of the
cluster's GPUs. kube-scheduler allocates with its DynamicResources plugin (the upstream
allocator: the first feasible devices in the slice's order, no score); toposched (`toposched
kube scheduler`, a process of its own) with its placement objective.

For each claim of 2 or 4 GPUs: the ring bandwidth (GB/s) of its devices on the DGX-1, and
whether it is the best ring a DGX-1 has for that many GPUs (50 GB/s for 2, 25 GB/s for 4).
Allocations per second: claims allocated over the seconds from the first pod's creation to the
last claim's allocation.

The last line is JSON: toposched_ring_gbps_mean, upstream_ring_gbps_mean, toposched_best_share,
upstream_best_share, toposched_claims_per_s, upstream_claims_per_s, claims.

`--smoke` (CI, seconds): 2 nodes, 8 claims, 60 s per allocator; it builds none: without the
binaries (`make kube-binaries`) it exits 1.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # tools/kube, the control plane

from benchmarks.kube_bind import control_plane_binaries, make_nodes, start_toposched  # noqa: E402
from tools.kube.controlplane import ControlPlane  # noqa: E402

from toposched.agent.dra import resource_slice  # noqa: E402
from toposched.kube.api import KubeApi  # noqa: E402
from toposched.kube.claims import DEVICE_CLASS, DRIVER, allocated_devices  # noqa: E402
from toposched.placement.ring import ring_bandwidth  # noqa: E402
from toposched.topology import preset  # noqa: E402

DGX1 = preset("dgx1-v100")
SIZES = (1, 2, 4)
BEST = {
    size: max(ring_bandwidth(DGX1, list(c)) or 0.0 for c in itertools.combinations(range(8), size))
    for size in SIZES
    if size > 1
}
RESOURCE = "/apis/resource.k8s.io/v1"


def workload(claims: int, nodes: int, seed: int) -> list[int]:
    """The GPUs of each pod's claim, up to about 3/4 of the cluster's GPUs."""
    rng = random.Random(seed)
    sizes: list[int] = []
    room = nodes * 8 * 3 // 4
    while len(sizes) < claims:
        size = rng.choice(SIZES)
        if sum(sizes) + size > room:
            break
        sizes.append(size)
    return sizes


def publish(api: KubeApi, nodes: int) -> None:
    """The DeviceClass, and each node's ResourceSlice as its agent publishes it."""
    api.request(
        "POST",
        f"{RESOURCE}/deviceclasses",
        body={
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": DEVICE_CLASS},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
        },
    )
    for i in range(nodes):
        node = api.request("GET", f"/api/v1/nodes/n{i:05d}")
        api.request("POST", f"{RESOURCE}/resourceslices", body=resource_slice(node, DGX1))


def make_workload(api: KubeApi, ns: str, sizes: list[int], scheduler: str) -> float:
    """A template per size, then each pod; returns when the first pod was created."""
    for size in SIZES:
        request = {"name": "gpus", "exactly": {"deviceClassName": DEVICE_CLASS, "count": size}}
        api.request(
            "POST",
            f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
            body={
                "metadata": {"name": f"gpus-{size}"},
                "spec": {"spec": {"devices": {"requests": [request]}}},
            },
        )
    began = time.monotonic()
    for i, size in enumerate(sizes):
        spec: dict[str, Any] = {
            "containers": [
                {"name": "c", "image": "x", "resources": {"claims": [{"name": "gpus"}]}}
            ],
            "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": f"gpus-{size}"}],
            "terminationGracePeriodSeconds": 0,
        }
        if scheduler == "toposched":
            spec["schedulerName"] = "toposched"
        api.request(
            "POST",
            f"/api/v1/namespaces/{ns}/pods",
            body={"metadata": {"name": f"p{i:05d}"}, "spec": spec},
        )
    return began


def allocated(api: KubeApi, ns: str) -> list[list[tuple[str, int]]]:
    claims, _ = api.list(f"{RESOURCE}/namespaces/{ns}/resourceclaims")
    return [found for c in claims if (found := allocated_devices(c))]


def release(api: KubeApi, ns: str) -> None:
    """Delete the run's pods at once (no kubelet would confirm a graceful end) and wait until
    the resource claim controller has deleted their claims: the next run gets every GPU."""
    gone = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    api.request("DELETE", f"/api/v1/namespaces/{ns}/pods", body=gone)
    deadline = time.monotonic() + 60
    while api.list(f"{RESOURCE}/namespaces/{ns}/resourceclaims")[0]:
        if time.monotonic() > deadline:
            raise SystemExit(f"the claims of {ns} were not deleted within 60 s")
        time.sleep(0.2)


def bench(
    plane: ControlPlane, api: KubeApi, scheduler: str, sizes: list[int], args: argparse.Namespace
) -> dict[str, Any]:
    ns = f"dra-{scheduler}"
    api.request("POST", "/api/v1/namespaces", body={"metadata": {"name": ns}})
    toposched = None
    if scheduler == "toposched":
        toposched = start_toposched(plane, args, Path(plane.home) / "toposched.log")
    else:
        plane.start_scheduler()
    try:
        began = make_workload(api, ns, sizes, scheduler)
        deadline = time.monotonic() + args.timeout
        found = allocated(api, ns)
        last = time.monotonic()
        while len(found) < len(sizes) and time.monotonic() < deadline:
            time.sleep(0.2)
            now = allocated(api, ns)
            if len(now) > len(found):
                last = time.monotonic()
            found = now
    finally:
        if toposched is not None:
            toposched.terminate()
            toposched.wait(timeout=30)
        else:
            plane.stop_component("kube-scheduler")
        release(api, ns)
    rings = [
        ring_bandwidth(DGX1, [g for _, g in devices]) or 0.0
        for devices in found
        if len(devices) > 1
    ]
    best = [
        ring == BEST[len(devices)]
        for devices, ring in zip((d for d in found if len(d) > 1), rings, strict=True)
    ]
    return {
        "scheduler": scheduler,
        "claims": len(found),
        "of": len(sizes),
        "multi_gpu_claims": len(rings),
        "ring_gbps_mean": round(sum(rings) / len(rings), 2) if rings else None,
        "best_share": round(sum(best) / len(best), 4) if best else None,
        "claims_per_s": round(len(found) / max(last - began, 1e-9), 2),
        "finished": len(found) == len(sizes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--claims", type=int, default=100)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--qps", type=float, default=1000.0, help="toposched's client")
    parser.add_argument("--burst", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per allocator")
    parser.add_argument("--smoke", action="store_true", help="2 nodes, 8 claims (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.claims, args.timeout = 2, 8, 60.0

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    binaries = control_plane_binaries(args.smoke, say)
    sizes = workload(args.claims, args.nodes, args.seed)
    with tempfile.TemporaryDirectory(prefix="dra-alloc-") as tmp:
        plane = ControlPlane(Path(tmp), binaries, controllers="*,-node-lifecycle-controller")
        with plane:
            api = KubeApi.connect(str(plane.admin_kubeconfig))
            make_nodes(api, args.nodes)
            publish(api, args.nodes)
            say(f"control plane {plane.version()}: {args.nodes} DGX-1 nodes, {len(sizes)} claims")
            results = {}
            for scheduler in ("toposched", "upstream"):
                r = results[scheduler] = bench(plane, api, scheduler, sizes, args)
                print(
                    f"{scheduler:>10}: {r['claims']}/{r['of']} claims allocated, "
                    f"{r['claims_per_s']} claims/s; {r['multi_gpu_claims']} claims of 2 or 4 "
                    f"GPUs: ring {r['ring_gbps_mean']} GB/s mean, "
                    f"{(r['best_share'] or 0):.1%} on the best ring",
                    flush=True,
                )
    mine, theirs = results["toposched"], results["upstream"]
    print(
        json.dumps(
            {
                "toposched_ring_gbps_mean": mine["ring_gbps_mean"],
                "upstream_ring_gbps_mean": theirs["ring_gbps_mean"],
                "toposched_best_share": mine["best_share"],
                "upstream_best_share": theirs["best_share"],
                "toposched_claims_per_s": mine["claims_per_s"],
                "upstream_claims_per_s": theirs["claims_per_s"],
                "claims": len(sizes),
            }
        )
    )
    if args.smoke and not (mine["finished"] and theirs["finished"]):
        raise SystemExit("smoke: an allocator did not allocate every claim within --timeout")


if __name__ == "__main__":
    main()
