"""The Kubernetes scheduler end to end, against the real API server: gangs bound whole on the
best-connected GPUs, no deadlock, a successor that finishes a half-bound gang, a watch that
recovers from 410 Gone, leader failover, freed GPUs, bad objects refused with an Event, and
Volcano's PodGroups as the Kubeflow training and MPI operators make them."""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.e2e.conftest import run_cli
from tests.kube.live import LiveCluster
from tests.kube.proxy import status_body
from tests.server import free_port
from tests.server import wait_for as until
from toposched.core import make_scheduler_policy
from toposched.kube.annotations import encode_topology
from toposched.kube.api import ApiError, KubeApi
from toposched.kube.driver import PLAN, KubeScheduler
from toposched.kube.runner import Lease, Runner
from toposched.placement.ring import ring_bandwidth
from toposched.topology import preset

DGX1 = preset("dgx1-v100")


def node(name: str, opted_in: bool = True, annotation: str | None = None) -> dict[str, Any]:
    labels = {"toposched.io/gpu-schedule": "topology"} if opted_in else {}
    text = annotation if annotation is not None else encode_topology(DGX1)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {"toposched.io/topology": text},
        },
        "status": {
            "allocatable": {"nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def pod(name: str, gpus: Any = 1, group: str | None = None, ns: str = "team-a") -> dict[str, Any]:
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "schedulerName": "toposched",
            "containers": [
                {
                    "name": "main",
                    "image": "pytorch",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}},
                }
            ],
        },
    }


def podgroup(name: str, min_member: Any, ns: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minMember": min_member},
    }


VOLCANO_GROUPS = "podgroups.scheduling.volcano.sh"
UPSTREAM_GROUPS = "podgroups.scheduling.k8s.io"
GANG_KINDS = ("scheduler-plugins", "volcano", "upstream")
GROUP_RESOURCES = {
    "scheduler-plugins": "podgroups",
    "volcano": VOLCANO_GROUPS,
    "upstream": UPSTREAM_GROUPS,
}


def volcano_podgroup(name: str, min_member: Any, ns: str = "team-a") -> dict[str, Any]:
    """Volcano's PodGroup as the Kubeflow training operator makes it for a job."""
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "minMember": min_member,
            "queue": "default",
            "priorityClassName": "training",
            "minResources": {"nvidia.com/gpu": "4", "cpu": "4"},
        },
    }


def volcano_pod(
    name: str, gpus: Any = 1, group: str = "", ns: str = "team-a", index: int = 0
) -> dict[str, Any]:
    """A pod as the Kubeflow training operator makes it for Volcano: Volcano's group-name
    annotation and its own labels, no scheduler-plugins label."""
    made = pod(name, gpus, ns=ns)
    made["metadata"]["annotations"] = {"scheduling.k8s.io/group-name": group}
    made["metadata"]["labels"] = {
        "training.kubeflow.org/job-name": group,
        "training.kubeflow.org/replica-type": "worker",
        "training.kubeflow.org/replica-index": str(index),
    }
    return made


def upstream_podgroup(
    name: str, min_count: int | None, ns: str = "team-a", workload: str = ""
) -> dict[str, Any]:
    """Kubernetes' own PodGroup (scheduling.k8s.io/v1beta1, 1.37), as a workload controller
    makes it from its Workload's template: a gang of at least `min_count` pods, or (None) a
    basic group whose pods are scheduled one by one."""
    policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    spec: dict[str, Any] = {"schedulingPolicy": policy}
    if workload:
        spec["workloadRef"] = {"workloadName": workload, "templateName": "workers"}
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }


def upstream_pod(name: str, gpus: Any, group: str, ns: str = "team-a") -> dict[str, Any]:
    """A pod that names its PodGroup as Kubernetes 1.37 has pods do, in its spec."""
    made = pod(name, gpus, ns=ns)
    made["spec"]["schedulingGroup"] = {"podGroupName": group}
    return made


def gang_group(kind: str, name: str, min_member: Any) -> dict[str, Any]:
    """A PodGroup of any kind (GANG_KINDS)."""
    if kind == "upstream":
        return upstream_podgroup(name, min_member)
    return volcano_podgroup(name, min_member) if kind == "volcano" else podgroup(name, min_member)


def member(kind: str, name: str, gpus: Any, group: str) -> dict[str, Any]:
    """A pod of the gang `group`, named as a PodGroup of `kind` wants."""
    if kind == "upstream":
        return upstream_pod(name, gpus, group)
    return volcano_pod(name, gpus, group) if kind == "volcano" else pod(name, gpus, group=group)


def node_name(server: LiveCluster, name: str) -> str:
    """A test node's name as the scheduler knows it: the adapter makes `dgx0`
    `toposched-e2e-dgx0` on the cluster (tests/kube/live.py)."""
    return server.node_name(name)


class Cluster:
    """The API server (tests/kube/live.py) and the schedulers a test starts."""

    def __init__(self, server: LiveCluster, kubeconfig: Path) -> None:
        self.server = server
        self.kubeconfig = kubeconfig
        self.runners: list[tuple[Runner, threading.Thread]] = []

    def start(
        self,
        lease: bool = False,
        name: str = "a",
        policy: str = "toposched",
        params: dict[str, Any] | None = None,
        pod: tuple[str, str] | None = None,
        **options: Any,
    ) -> Runner:
        """A scheduler with `policy` and its `params`, running in `pod` if given; `options` go
        to KubeScheduler."""
        api = KubeApi.connect(str(self.kubeconfig))
        chosen = make_scheduler_policy(
            policy, {"migration": False, "elastic": False, **(params or {})}
        )
        driver = KubeScheduler(api, chosen, **options)
        runner = Runner(
            driver,
            lease=Lease(api, "toposched-system", name, duration_s=2) if lease else None,
            interval_s=0.05,
            watch_timeout_s=5,
            pod=pod,
        )
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        self.runners.append((runner, thread))
        return runner

    def stop(self) -> None:
        for runner, thread in self.runners:
            runner.stop.set()
            thread.join(timeout=10)

    def pod(self, name: str, ns: str = "team-a") -> dict[str, Any]:
        found = [p for p in self.server.objects("pods", ns) if p["metadata"]["name"] == name]
        return found[0] if found else {}

    def bound(self, *names: str, ns: str = "team-a") -> dict[str, tuple[str, tuple[int, ...]]]:
        """Where each named pod is bound, once all are."""
        out = {}
        for name in names:
            p = self.pod(name, ns)
            node_name = (p.get("spec") or {}).get("nodeName")
            gpus = ((p.get("metadata") or {}).get("annotations") or {}).get("toposched.io/gpus")
            if not node_name or not gpus:
                return {}
            out[name] = (node_name, tuple(int(g) for g in gpus.split(",")))
        return out

    def warnings(self, name: str, reason: str, ns: str = "team-a") -> list[dict[str, Any]]:
        """The Events of `reason` about the object `name` (a node's are in `default`, with
        those of the node controllers)."""
        return [e for e in self.events(name, ns) if e["reason"] == reason]

    def events(self, name: str, ns: str = "team-a") -> list[dict[str, Any]]:
        return [
            e
            for e in self.server.objects("events", ns)
            if (e.get("involvedObject") or {}).get("name") == name
        ]


def test_a_gang_lands_on_one_nvlink_ring_of_one_node(cluster: Cluster) -> None:
    for i in range(4):
        cluster.server.create(node(f"dgx{i}"))
    cluster.start()
    cluster.server.create(podgroup("vgg16", 4))
    for i in range(4):
        cluster.server.create(pod(f"vgg16-{i}", 1, group="vgg16"))
    where = until(lambda: cluster.bound(*(f"vgg16-{i}" for i in range(4))), "the gang bound")
    nodes = {n for n, _ in where.values()}
    gpus = sorted(g for _, gs in where.values() for g in gs)
    assert len(nodes) == 1 and len(set(gpus)) == 4
    assert ring_bandwidth(DGX1, gpus) == 25.0  # an NVLink ring: 4 workers of VGG16 at 1.9x


def test_a_large_gang_takes_the_fewest_whole_nodes(cluster: Cluster) -> None:
    for i in range(4):
        cluster.server.create(node(f"dgx{i}"))
    cluster.start()
    cluster.server.create(podgroup("big", 2))
    for i in range(2):
        cluster.server.create(pod(f"big-{i}", 8, group="big"))
    where = until(lambda: cluster.bound("big-0", "big-1"), "the gang bound")
    assert len({n for n, _ in where.values()}) == 2
    assert all(gpus == tuple(range(8)) for _, gpus in where.values())


def test_two_gangs_that_do_not_fit_together_never_deadlock(cluster: Cluster) -> None:
    cluster.server.create(node("dgx0"))
    cluster.start()
    for g in ("a", "b"):
        cluster.server.create(podgroup(g, 2))
    for i in range(2):  # interleaved: a binder that takes pods one at a time would split them
        for g in ("a", "b"):
            cluster.server.create(pod(f"{g}-{i}", 4, group=g))
    first = until(
        lambda: cluster.bound("a-0", "a-1") or cluster.bound("b-0", "b-1"), "one gang bound"
    )
    other = "b" if "a-0" in first else "a"
    time.sleep(0.3)
    assert not any(cluster.pod(f"{other}-{i}")["spec"].get("nodeName") for i in range(2))
    waiting = cluster.pod(f"{other}-0")
    condition = [c for c in waiting["status"].get("conditions", []) if c["type"] == "PodScheduled"]
    assert condition and condition[0]["status"] == "False" and "GPUs" in condition[0]["message"]
    assert any(e["reason"] == "FailedScheduling" for e in cluster.events(f"{other}-0"))
    for name in first:
        cluster.server.set_phase("team-a", name, "Succeeded")
    until(lambda: cluster.bound(f"{other}-0", f"{other}-1"), "the other gang bound")


def test_a_deleted_pod_frees_its_gpus(cluster: Cluster) -> None:
    cluster.server.create(node("dgx0"))
    cluster.start()
    cluster.server.create(pod("first", 8))
    until(lambda: cluster.bound("first"), "first bound")
    cluster.server.create(pod("second", 8))
    time.sleep(0.3)
    assert not cluster.bound("second")
    cluster.server.delete("pods", "first", namespace="team-a")
    until(lambda: cluster.bound("second"), "second bound once first is gone")


@pytest.mark.parametrize("kind", GANG_KINDS)
def test_a_successor_finishes_a_half_bound_gang_from_its_plan(
    apiserver: LiveCluster, cluster: Cluster, kind: str
) -> None:
    """As if the scheduler died between two binds: the plan is on the PodGroup (of either
    kind), one pod is bound, the other not. The next scheduler restores the gang and binds the
    rest, and a pod that asks for the whole node meanwhile waits (no GPU booked twice)."""
    apiserver.create(node("dgx0"))
    plan = {
        "job": "team-a/g#1",
        "pods": {"g-0": ["dgx0", [0, 1, 2, 3]], "g-1": ["dgx0", [4, 5, 6, 7]]},
    }
    group = gang_group(kind, "g", 2)
    group["metadata"]["annotations"] = {PLAN: json.dumps(plan)}
    apiserver.create(group)
    bound = member(kind, "g-0", 4, "g")
    bound["spec"]["nodeName"] = "dgx0"
    bound["metadata"].setdefault("annotations", {})["toposched.io/gpus"] = "0,1,2,3"
    apiserver.create(bound)
    apiserver.create(member(kind, "g-1", 4, "g"))
    apiserver.create(pod("whole", 8))
    cluster.start()
    where = until(lambda: cluster.bound("g-0", "g-1"), "the rest of the gang bound")
    assert where == {"g-0": ("dgx0", (0, 1, 2, 3)), "g-1": ("dgx0", (4, 5, 6, 7))}
    time.sleep(0.3)
    assert not cluster.bound("whole")


def test_a_watch_that_is_gone_lists_again(apiserver: LiveCluster, cluster: Cluster) -> None:
    apiserver.create(node("dgx0"))
    runner = cluster.start()
    apiserver.create(pod("before", 1))
    until(lambda: cluster.bound("before"), "before bound")
    apiserver.compact()
    apiserver.drop_watches()
    apiserver.create(pod("after", 1))
    until(lambda: cluster.bound("after"), "a pod created after the compaction bound")
    assert any(w.relists for w in runner.watchers)


def test_only_the_leader_binds_and_a_successor_takes_over(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    apiserver.create(node("dgx0"))
    first = cluster.start(lease=True, name="first")
    until(lambda: first.leading, "the first replica leads")
    second = cluster.start(lease=True, name="second")
    apiserver.create(pod("p1", 1))
    until(lambda: cluster.bound("p1"), "p1 bound by the leader")
    assert not second.leading
    first.stop.set()  # it dies without giving the lease back
    until(lambda: second.leading, "the second replica leads once the lease expires", 20.0)
    apiserver.create(pod("p2", 1))
    where = until(lambda: cluster.bound("p1", "p2"), "p2 bound by the successor")
    assert where["p1"][1] != where["p2"][1]  # it rebuilt p1's GPUs before binding


def test_bad_objects_get_an_event_and_change_nothing_else(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    apiserver.create(node("dgx0"))
    apiserver.create(node("broken", annotation="{not json"))
    cluster.start()
    # A fractional GPU count never gets this far: the API server refuses it (as the real one
    # does, 422 "must be an integer"). What reaches the scheduler is an annotation set by hand.
    with pytest.raises(Exception, match="must be an integer"):
        apiserver.create(pod("half", "500m"))
    bad = pod("two", 1)
    bad["metadata"]["annotations"] = {"toposched.io/gpus": "two"}
    apiserver.create(bad)
    apiserver.create(podgroup("huge", 100))
    for i in range(100):
        apiserver.create(pod(f"huge-{i}", 1, group="huge"))
    apiserver.create(pod("fine", 1))
    until(lambda: cluster.bound("fine"), "a good pod bound beside the bad ones")
    invalid = until(lambda: cluster.events("two"), "an Event on the bad pod")
    assert "toposched.io/gpus must list GPU indices" in invalid[0]["message"]
    huge = until(
        lambda: [e for e in cluster.events("huge-0") if e["reason"] == "Unschedulable"],
        "an Event on the gang that never fits",
    )
    assert "at most" in huge[0]["message"]
    node_events = until(
        lambda: cluster.warnings("broken", "UnknownTopology", ns="default"),
        "an Event on the node",
    )
    assert "not JSON" in node_events[0]["message"]
    assert not cluster.bound("two") and not cluster.bound("huge-0")


def test_a_node_of_unknown_topology_serves_only_jobs_that_accept_it(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """A GPU node with no topology annotation yet (no agent): its allocatable GPUs are counted
    for a pod annotated to accept that; another pod waits, saying why. Once the agent writes the
    annotation (applied when the node's gangs end), every job may use the node."""
    blank = node("plain")
    del blank["metadata"]["annotations"]
    apiserver.create(blank)
    cluster.start()
    apiserver.create(pod("strict", 2))
    relaxed = pod("relaxed", 2)
    relaxed["metadata"]["annotations"] = {"toposched.io/accept-unknown-topology": "true"}
    apiserver.create(relaxed)
    where = until(lambda: cluster.bound("relaxed"), "the accepting pod bound")
    plain = "plain"
    assert where["relaxed"] == (plain, (0, 1))  # counted: the lowest indices
    said = until(
        lambda: [e for e in cluster.events("strict") if e["reason"] == "FailedScheduling"],
        "the other pod told why it waits",
    )
    assert "toposched.io/topology-known=true" in said[-1]["message"]
    node_events = until(
        lambda: cluster.warnings(plain, "UnknownTopology", ns="default"),
        "an Event on the node",
    )
    assert "no toposched.io/topology annotation" in node_events[0]["message"]
    assert "accept-unknown-topology=true" in node_events[0]["message"]
    assert not cluster.bound("strict")
    annotations = {"toposched.io/topology": encode_topology(DGX1)}
    apiserver.patch("nodes", "plain", {"metadata": {"annotations": annotations}})
    apiserver.delete("pods", "relaxed", namespace="team-a")
    where = until(lambda: cluster.bound("strict"), "the node known, the other pod bound")
    assert where["strict"][0] == plain
    assert ring_bandwidth(DGX1, where["strict"][1]) > 0


def test_a_failed_bind_stops_the_whole_gang_and_it_binds_again_whole(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """Pods cannot be unbound: when one bind of a gang fails, the pods already bound are
    evicted, and the pods made again (as a job operator would) wait and bind as a whole."""
    apiserver.create(node("dgx0"))
    cluster.start()
    apiserver.inject_error("POST", r"/pods/g-1/binding$", 409, "Conflict", "injected")
    apiserver.create(podgroup("g", 2))
    apiserver.create(pod("g-0", 4, group="g"))
    apiserver.create(pod("g-1", 4, group="g"))
    until(lambda: not cluster.pod("g-0"), "the bound pod evicted")
    assert not cluster.bound("g-1")
    apiserver.create(pod("g-0", 4, group="g"))  # its operator makes it again
    where = until(lambda: cluster.bound("g-0", "g-1"), "the gang bound whole")
    assert sorted(g for _, gs in where.values() for g in gs) == list(range(8))


def queues(**guaranteed: int) -> dict[str, Any]:
    text = "queues:\n" + "".join(
        f"  {q}: {{guaranteed_gpus: {g}}}\n" for q, g in guaranteed.items()
    )
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "toposched-queues", "namespace": "toposched-system"},
        "data": {"queues.yaml": text},
    }


def test_a_team_within_its_share_reclaims_borrowed_gpus_by_eviction(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    apiserver.create(node("dgx0"))
    apiserver.create(queues(**{"team-a": 8}))
    cluster.start()
    apiserver.create(pod("borrower", 8, ns="team-b"))
    until(lambda: cluster.bound("borrower", ns="team-b"), "team-b borrows the idle node")
    apiserver.create(pod("owner", 8))
    until(lambda: not cluster.pod("borrower", ns="team-b"), "the borrower evicted")
    assert ("POST", "/api/v1/namespaces/team-b/pods/borrower/eviction") in apiserver.requests
    until(lambda: cluster.bound("owner"), "team-a's pod bound on its share")


def test_a_disruption_budget_holds_an_eviction_back_and_says_so(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    apiserver.create(node("dgx0"))
    apiserver.create(queues(**{"team-a": 8}))
    borrower = pod("borrower", 8, ns="team-b")
    borrower["metadata"]["labels"] = {"app": "keep"}
    apiserver.create(
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "keep", "namespace": "team-b"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "keep"}}},
        }
    )
    cluster.start()
    apiserver.create(borrower)
    until(lambda: cluster.bound("borrower", ns="team-b"), "team-b borrows the idle node")
    apiserver.set_phase("team-b", "borrower", "Running")  # ready: the budget counts it
    apiserver.create(pod("owner", 8))
    blocked = until(
        lambda: [
            e for e in cluster.events("borrower", ns="team-b") if e["reason"] == "EvictionBlocked"
        ],
        "an Event saying the budget blocks the eviction",
    )
    assert "PodDisruptionBudget" in blocked[0]["message"]
    assert cluster.pod("borrower", ns="team-b") and not cluster.bound("owner")
    apiserver.delete("poddisruptionbudgets", "keep", namespace="team-b")
    until(lambda: cluster.bound("owner"), "the owner bound once the budget is gone")


def _running_then_urgent(apiserver: LiveCluster, cluster: Cluster, running: dict[str, Any]) -> None:
    """`running` takes the one node, then a pod of its priority and an `urgent` one ask for
    all its GPUs."""
    apiserver.create(node("dgx0"))
    apiserver.create(
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": "urgent"},
            "value": 100,
        }
    )
    cluster.start()
    apiserver.create(running)
    until(lambda: cluster.bound("running"), "the node taken")
    apiserver.create(pod("low", 8))
    high = pod("high", 8)
    high["spec"]["priorityClassName"] = "urgent"  # admission sets spec.priority from it
    apiserver.create(high)


def test_a_higher_priority_pod_does_not_preempt_work_that_cannot_checkpoint(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """Issue 16: a pod declares no checkpoint contract, so an eviction would lose its work;
    it goes only to give back GPUs its queue borrowed, not for a higher priority."""
    _running_then_urgent(apiserver, cluster, pod("running", 8))
    until(lambda: cluster.events("high"), "the higher priority pod says why it waits")
    assert ("POST", "/api/v1/namespaces/team-a/pods/running/eviction") not in apiserver.requests
    assert cluster.bound("running") and not cluster.bound("high") and not cluster.bound("low")


def test_a_higher_priority_pod_preempts_work_that_saves_its_state(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """A pod annotated toposched.io/checkpoint=true saves its state on the eviction's SIGTERM
    (its controller makes it again): a higher priority of its queue may preempt it."""
    running = pod("running", 8)
    running["metadata"]["annotations"] = {"toposched.io/checkpoint": "true"}
    running["spec"]["terminationGracePeriodSeconds"] = 60
    _running_then_urgent(apiserver, cluster, running)
    until(lambda: cluster.bound("high"), "the higher priority pod bound")
    assert ("POST", "/api/v1/namespaces/team-a/pods/running/eviction") in apiserver.requests
    assert not cluster.bound("low")


def test_the_cli_reads_a_cluster_through_the_read_api(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """`toposched top node`, `list` and `explain`, as a user types them, against the scheduler."""
    from toposched.kube.readapi import make_app, serve

    apiserver.create(node("dgx0"))
    runner = cluster.start()
    port = free_port()
    serve(make_app(runner), "127.0.0.1", port)
    url = f"http://127.0.0.1:{port}"
    apiserver.create(pod("big", 8))
    until(lambda: cluster.bound("big"), "big bound")
    apiserver.create(pod("waits", 4))
    until(lambda: cluster.events("waits"), "waits says why")

    def cli(*args: str) -> str:
        done = run_cli(*args, TOPOSCHED_URL=url)
        assert done.code == 0, done.err
        return done.out

    until(lambda: _get(url + "/healthz"), "the read API up")
    listed = json.loads(cli("list", "--json"))["jobs"]
    names = {j["name"]: j for j in listed}
    big = next(j for n, j in names.items() if n.startswith("team-a/big"))
    waits = next(n for n in names if n.startswith("team-a/waits"))
    assert big["state"] == "running"
    assert big["placement"][0]["node"] == node_name(apiserver, "dgx0")
    assert "GPUs" in cli("explain", waits)
    assert "dgx0" in cli("top", "node")


def _get(url: str) -> bool:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=2) as answer:
            return bool(answer.status == 200)
    except OSError:
        return False


def test_a_cordoned_node_keeps_its_gang_and_takes_no_new_work(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    apiserver.create(node("dgx0"))
    runner = cluster.start()
    apiserver.create(pod("running", 4))
    until(lambda: cluster.bound("running"), "running bound")
    apiserver.patch("nodes", "dgx0", {"spec": {"unschedulable": True}})
    until(
        lambda: node_name(apiserver, "dgx0") in runner.scheduler.cordoned,
        "the scheduler sees the cordon",
    )
    apiserver.create(pod("new", 4))
    time.sleep(0.4)
    assert cluster.pod("running") and not cluster.bound("new")  # kept, and nothing added
    apiserver.patch("nodes", "dgx0", {"spec": {"unschedulable": False}})
    until(lambda: cluster.bound("new"), "new bound once the node is uncordoned")


def test_a_pod_in_its_grace_period_keeps_its_gpus(apiserver: LiveCluster, cluster: Cluster) -> None:
    apiserver.create(node("dgx0"))
    cluster.start()
    old = pod("old", 8)
    old["spec"]["terminationGracePeriodSeconds"] = 30
    apiserver.create(old)
    until(lambda: cluster.bound("old"), "old bound")
    apiserver.set_phase("team-a", "old", "Running")
    apiserver.hold("team-a", "old")  # its containers take their grace period to stop
    user = KubeApi.connect(str(apiserver.admin_kubeconfig))
    user.request("DELETE", "/api/v1/namespaces/team-a/pods/old")  # as kubectl delete
    assert (apiserver.get("pods", "old", "team-a") or {})["metadata"]["deletionTimestamp"]
    apiserver.create(pod("next", 8))
    time.sleep(0.4)
    assert not cluster.bound("next")
    apiserver.set_phase("team-a", "old", "Succeeded")  # its containers have exited
    until(lambda: cluster.bound("next"), "next bound once old has ended")


def test_a_deleted_worker_stops_its_gang_which_binds_again_whole(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    apiserver.create(node("dgx0"))
    cluster.start()
    apiserver.create(podgroup("g", 2))
    for i in range(2):
        apiserver.create(pod(f"g-{i}", 4, group="g"))
    until(lambda: cluster.bound("g-0", "g-1"), "the gang bound")
    apiserver.delete("pods", "g-1", namespace="team-a")
    until(lambda: not cluster.pod("g-0"), "the rest of the gang evicted")
    for i in range(2):  # its operator makes the gang again
        apiserver.create(pod(f"g-{i}", 4, group="g"))
    until(lambda: cluster.bound("g-0", "g-1"), "the gang bound whole again")


def test_a_gang_that_lost_a_member_is_not_restored_smaller(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    apiserver.create(node("dgx0"))
    apiserver.create(podgroup("g", 2))
    alone = pod("g-0", 4, group="g")
    alone["spec"]["nodeName"] = "dgx0"
    alone["metadata"]["annotations"] = {"toposched.io/gpus": "0,1,2,3"}
    apiserver.create(alone)
    cluster.start()
    until(lambda: not cluster.pod("g-0"), "the lone member evicted")


def test_an_mpi_gang_binds_its_launcher_with_its_workers(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """As the MPI operator makes them: a launcher without GPUs first, then the workers; every
    member counts toward minMember, and the launcher is not bound alone."""
    apiserver.create(node("dgx0"))
    cluster.start()
    apiserver.create(podgroup("mpi", 3))
    apiserver.create(pod("mpi-launcher", 0, group="mpi"))
    time.sleep(0.3)
    assert not cluster.pod("mpi-launcher")["spec"].get("nodeName")
    for i in range(2):
        apiserver.create(pod(f"mpi-worker-{i}", 4, group="mpi"))
    where = until(lambda: cluster.bound("mpi-worker-0", "mpi-worker-1"), "the workers bound")
    launcher = until(lambda: cluster.pod("mpi-launcher")["spec"].get("nodeName"), "the launcher")
    assert launcher == where["mpi-worker-0"][0]


def test_a_pod_named_like_a_podgroup_does_not_block_its_gang(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    apiserver.create(node("dgx0"))
    cluster.start()
    apiserver.create(pod("train", 2))  # a pod of its own, named as the gang below
    apiserver.create(podgroup("train", 2))
    for i in range(2):
        apiserver.create(pod(f"train-{i}", 2, group="train"))
    until(lambda: cluster.bound("train", "train-0", "train-1"), "the pod and the gang bound")


# ----------------------------------------------------------------- Volcano's own PodGroups


def gpus_of(where: dict[str, tuple[str, tuple[int, ...]]]) -> list[int]:
    return sorted(g for _, gs in where.values() for g in gs)


def gang_on_dgx0(cluster: Cluster, group: dict[str, Any], *pods: dict[str, Any]) -> None:
    """One DGX-1 node and the scheduler, then a PodGroup and its pods (as operators make them,
    the PodGroup first)."""
    cluster.server.create(node("dgx0"))
    cluster.start()
    for obj in (group, *pods):
        cluster.server.create(obj)


def queued(server: LiveCluster, name: str) -> bool:
    """Whether the Volcano PodGroup is Inqueue: what the training operator waits for."""
    group = server.get(VOLCANO_GROUPS, name, "team-a") or {}
    return bool((group.get("status") or {}).get("phase") == "Inqueue")


def test_a_kubeflow_job_with_a_volcano_podgroup_binds_whole_on_one_nvlink_ring(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """As the training operator runs a 4-worker job for Volcano: it makes the PodGroup
    (scheduling.volcano.sh), waits until its phase is Inqueue (Volcano's scheduler would set
    it), then makes 4 pods with Volcano's annotation and no other gang label. The plan is
    written on the Volcano PodGroup before the binds."""
    for i in range(4):
        cluster.server.create(node(f"dgx{i}"))
    cluster.start()
    cluster.server.create(volcano_podgroup("vgg16", 4))
    until(lambda: queued(cluster.server, "vgg16"), "the PodGroup Inqueue, as the operator waits")
    names = [f"vgg16-worker-{i}" for i in range(4)]
    for i, name in enumerate(names):
        cluster.server.create(volcano_pod(name, 1, "vgg16", index=i))
    where = until(lambda: cluster.bound(*names), "the job's four pods bound")
    assert len({n for n, _ in where.values()}) == 1 and len(set(gpus_of(where))) == 4
    assert ring_bandwidth(DGX1, gpus_of(where)) == 25.0
    group = cluster.server.get(VOLCANO_GROUPS, "vgg16", "team-a") or {}
    plan = json.loads(group["metadata"]["annotations"][PLAN])
    assert {p: (n, tuple(g)) for p, (n, g) in plan["pods"].items()} == where
    assert plan["job"].startswith("team-a/vgg16#")


def test_only_new_volcano_podgroups_are_set_inqueue_and_a_refusal_is_told(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    apiserver.create(volcano_podgroup("running", 1))
    # Volcano's CRD has no status subresource: the status is written on the object.
    apiserver.patch(VOLCANO_GROUPS, "running", {"status": {"phase": "Running"}}, "team-a")
    apiserver.inject_error("PATCH", r"/podgroups/denied$", 403, "Forbidden", "no access")
    apiserver.create(volcano_podgroup("denied", 1))
    cluster.start()
    told = until(
        lambda: [e for e in cluster.events("denied") if e["reason"] == "PodGroupNotQueued"],
        "an Event saying the phase could not be set",
    )
    assert "could not set status.phase Inqueue: 403 Forbidden: no access" in told[0]["message"]
    apiserver.create(volcano_podgroup("new", 1))
    until(lambda: queued(apiserver, "new"), "a new PodGroup Inqueue")
    patched = {p for m, p in apiserver.requests if m == "PATCH" and "/podgroups/" in p}
    assert patched == {
        f"/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups/{name}"
        for name in ("denied", "new")
    }
    assert (apiserver.get(VOLCANO_GROUPS, "running", "team-a") or {})["status"] == {
        "phase": "Running"
    }


def test_podgroups_of_two_kinds_with_one_name_are_two_gangs(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """A scheduler-plugins PodGroup and a Volcano PodGroup both named `train`: merged, their
    pods would ask different GPU counts (an InvalidGang) and bind nowhere."""
    for i in range(3):
        apiserver.create(node(f"dgx{i}"))
    cluster.start()
    apiserver.create(podgroup("train", 2))
    apiserver.create(volcano_podgroup("train", 4))
    for i in range(2):
        apiserver.create(pod(f"sp-{i}", 8, group="train"))
    for i in range(4):
        apiserver.create(volcano_pod(f"vc-{i}", 2, "train", index=i))
    plugins = until(lambda: cluster.bound("sp-0", "sp-1"), "the scheduler-plugins gang bound")
    volcano = until(lambda: cluster.bound(*(f"vc-{i}" for i in range(4))), "the Volcano gang")
    assert len({n for n, _ in plugins.values()}) == 2
    assert len({n for n, _ in volcano.values()}) == 1 and gpus_of(volcano) == list(range(8))
    assert not {n for n, _ in plugins.values()} & {n for n, _ in volcano.values()}
    for name in ("sp-0", "vc-0"):
        assert not [e for e in cluster.events(name) if e["reason"] == "InvalidGang"]
    sp = json.loads(apiserver.get("podgroups", "train", "team-a")["metadata"]["annotations"][PLAN])
    vc = apiserver.get(VOLCANO_GROUPS, "train", "team-a") or {}
    assert set(sp["pods"]) == {"sp-0", "sp-1"}
    assert set(json.loads(vc["metadata"]["annotations"][PLAN])["pods"]) == {
        f"vc-{i}" for i in range(4)
    }


def test_a_cluster_with_only_volcanos_crd_binds_an_mpi_job(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """No scheduler-plugins CRD: its list answers 404, the scheduler goes on without it, and
    an MPI job made for Volcano (a launcher without GPUs and two workers) binds whole. A pod
    that names a scheduler-plugins PodGroup there waits, and says so."""
    with apiserver.without_crd("podgroups.scheduling.x-k8s.io"):
        with pytest.raises(ApiError, match="404"):
            apiserver.create(podgroup("other", 1))
        apiserver.create(node("dgx0"))
        runner = cluster.start()
        apiserver.create(volcano_podgroup("mpi", 3))
        apiserver.create(volcano_pod("mpi-launcher", 0, "mpi"))
        for i in range(2):
            apiserver.create(volcano_pod(f"mpi-worker-{i}", 4, "mpi", index=i))
        apiserver.create(pod("orphan", 1, group="other"))
        where = until(lambda: cluster.bound("mpi-worker-0", "mpi-worker-1"), "the workers bound")
        assert gpus_of(where) == list(range(8))
        launcher = until(lambda: cluster.pod("mpi-launcher")["spec"].get("nodeName"), "launcher")
        assert launcher == "dgx0"
        waiting = until(lambda: cluster.events("orphan"), "the orphan says why it waits")
        assert waiting[0]["reason"] == "WaitingForPodGroup"
        assert "no PodGroup team-a/other yet" in waiting[0]["message"]
        assert not cluster.bound("orphan")
        assert ("GET", "/apis/scheduling.x-k8s.io/v1alpha1/podgroups") in apiserver.requests
        # The runner's first sync may bind the gang (its pods may exist by the time it lists
        # them), and it starts its watches only once that sync returns.
        watchers = until(lambda: runner.watchers, "the watches started")
        assert sorted(w.kind for w in watchers) == [
            "configmaps",
            "k8s-podgroups",  # the server serves Kubernetes' own PodGroups
            "nodes",
            "others",
            "pods",
            "resourceclaims",  # and resource.k8s.io/v1 (Dynamic Resource Allocation)
            "volcano-podgroups",
        ]
        cluster.stop()


def test_a_cluster_without_volcanos_crd_leaves_volcano_pods_waiting(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    with apiserver.without_crd(VOLCANO_GROUPS):
        apiserver.create(node("dgx0"))
        cluster.start()
        apiserver.create(volcano_pod("vc-0", 1, "job"))
        apiserver.create(podgroup("g", 1))
        apiserver.create(pod("g-0", 1, group="g"))
        until(lambda: cluster.bound("g-0"), "the scheduler-plugins gang bound")
        waiting = until(lambda: cluster.events("vc-0"), "the Volcano pod says why it waits")
        assert "no Volcano PodGroup team-a/job yet" in waiting[0]["message"]
        assert not cluster.bound("vc-0")
        cluster.stop()


def test_a_volcano_gang_binds_nothing_until_its_last_pod_exists(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """Three of four pods: nothing is bound and nothing held (a pod that wants the whole node
    takes it); the fourth arrives and the gang binds whole once the node is free."""
    names = [f"job-worker-{i}" for i in range(4)]
    first = (volcano_pod(name, 2, "job", index=i) for i, name in enumerate(names[:3]))
    gang_on_dgx0(cluster, volcano_podgroup("job", 4), *first)
    told = until(  # an Event per count, as the pods arrive
        lambda: [e for e in cluster.events(names[0]) if "3 of 4 pods" in e["message"]],
        "the gang says it waits for its fourth pod",
    )
    assert told[0]["reason"] == "WaitingForPods" and told[0]["type"] == "Warning"
    assert told[0]["message"] == "gang team-a/job: 3 of 4 pods"
    apiserver.create(pod("whole", 8))
    until(lambda: cluster.bound("whole"), "a pod that wants the whole node bound")
    assert not any(cluster.pod(n)["spec"].get("nodeName") for n in names[:3])
    apiserver.create(volcano_pod(names[3], 2, "job", index=3))
    time.sleep(0.4)
    assert not any(cluster.pod(n)["spec"].get("nodeName") for n in names)
    apiserver.delete("pods", "whole", namespace="team-a")
    where = until(lambda: cluster.bound(*names), "the gang bound whole")
    assert gpus_of(where) == list(range(8)) and {n for n, _ in where.values()} == {"dgx0"}


def test_a_volcano_podgroup_with_a_bad_min_member_gets_a_warning_and_binds_nothing(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    pods = (volcano_pod(f"bad-{i}", 4, "bad", index=i) for i in range(2))
    gang_on_dgx0(cluster, volcano_podgroup("bad", 0), *pods)
    said = until(
        lambda: [e for e in cluster.events("bad") if e["reason"] == "InvalidPodGroup"],
        "a Warning Event on the Volcano PodGroup",
    )
    why = "podgroup team-a/bad (scheduling.volcano.sh/v1beta1): spec.minMember 0 is not a"
    assert said[0]["type"] == "Warning" and why in said[0]["message"]
    assert said[0]["involvedObject"]["apiVersion"] == "scheduling.volcano.sh/v1beta1"
    assert said[0]["involvedObject"]["kind"] == "PodGroup"
    on_pod = until(
        lambda: [e for e in cluster.events("bad-0") if e["reason"] == "InvalidPodGroup"],
        "a Warning Event on its pods",
    )
    assert why in on_pod[0]["message"]
    time.sleep(0.3)
    assert not cluster.pod("bad-0")["spec"].get("nodeName")
    assert not cluster.pod("bad-1")["spec"].get("nodeName")
    apiserver.patch(VOLCANO_GROUPS, "bad", {"spec": {"minMember": 2}}, "team-a")
    where = until(lambda: cluster.bound("bad-0", "bad-1"), "the gang bound once it is fixed")
    assert gpus_of(where) == list(range(8))


def docs_blocks(section: str) -> list[list[dict[str, Any]]]:
    """The YAML blocks of one section of docs/kubernetes.md, each a list of documents."""
    text = (Path(__file__).parents[2] / "docs" / "kubernetes.md").read_text()
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return [list(yaml.safe_load_all(b)) for b in re.findall(r"```yaml\n(.*?)```", body, re.S)]


def test_the_docs_kubeflow_example_binds_as_written(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """docs/kubernetes.md's Kubeflow example: the PyTorchJob, and what the training operator
    makes of it, applied as the operator would (the pods once the PodGroup is Inqueue)."""
    job, made = docs_blocks("Kubeflow / MPI operator")
    [[pytorch_job], [group, *pods]] = job, made
    replicas = pytorch_job["spec"]["pytorchReplicaSpecs"]
    assert sum(r["replicas"] for r in replicas.values()) == group["spec"]["minMember"] == 4
    assert {r["template"]["spec"]["schedulerName"] for r in replicas.values()} == {"toposched"}
    names = [p["metadata"]["name"] for p in pods]
    assert names == ["vgg16-master-0", *(f"vgg16-worker-{i}" for i in range(3))]
    for i in range(2):
        apiserver.create(node(f"dgx{i}"))
    cluster.start()
    apiserver.create(group)
    until(lambda: queued(apiserver, "vgg16"), "the PodGroup Inqueue")
    for made_pod in pods:
        apiserver.create(made_pod)
    where = until(lambda: cluster.bound(*names), "the job's pods bound")
    assert len({n for n, _ in where.values()}) == 1
    assert ring_bandwidth(DGX1, gpus_of(where)) == 25.0


def test_the_adapter_speaks_to_the_real_server(apiserver: LiveCluster) -> None:
    """The adapter: create/get/objects/patch/delete round trips, the fake nodes' names as
    stored and as the tests read them, and the hooks that need the session's control plane
    skipping without it."""
    made = apiserver.create(node("dgx0"))
    assert made["metadata"]["name"] == "dgx0"
    raw = apiserver.api.request("GET", "/api/v1/nodes/toposched-e2e-dgx0")
    assert raw["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] > 0  # its kubelet's
    assert [n["metadata"]["name"] for n in apiserver.objects("nodes")] == ["dgx0"]
    apiserver.create(podgroup("g", 2))
    bound = pod("g-0", 4, group="g")
    bound["spec"]["nodeName"] = "dgx0"
    apiserver.create(bound)
    apiserver.create(pod("other", 1, ns="team-b"))
    stored = apiserver.api.request("GET", "/api/v1/namespaces/team-a/pods/g-0")
    assert stored["spec"]["nodeName"] == "toposched-e2e-dgx0"
    got = apiserver.get("pods", "g-0", "team-a")
    assert got is not None and got["spec"]["nodeName"] == "dgx0"
    assert apiserver.get("pods", "missing", "team-a") is None
    assert [p["metadata"]["name"] for p in apiserver.objects("pods", "team-a")] == ["g-0"]
    with pytest.raises(ApiError, match="must be an integer"):
        apiserver.create(pod("half", "500m"))
    apiserver.patch("nodes", "dgx0", {"spec": {"unschedulable": True}})
    assert (apiserver.get("nodes", "dgx0") or {})["spec"]["unschedulable"] is True
    planned = volcano_podgroup("g", 2)  # Volcano's, beside scheduler-plugins' `g`
    planned["metadata"]["annotations"] = {PLAN: json.dumps({"pods": {"g-0": ["dgx0", [0]]}})}
    apiserver.create(planned)
    path = "/apis/scheduling.volcano.sh/v1beta1/namespaces/team-a/podgroups/g"
    stored_plan = apiserver.api.request("GET", path)["metadata"]["annotations"][PLAN]
    assert json.loads(stored_plan)["pods"]["g-0"][0] == "toposched-e2e-dgx0"
    got_plan = (apiserver.get(VOLCANO_GROUPS, "g", "team-a") or {})["metadata"]["annotations"]
    assert json.loads(got_plan[PLAN])["pods"]["g-0"][0] == "dgx0"
    deleted = apiserver.delete("pods", "other", namespace="team-b")
    assert deleted is not None and apiserver.get("pods", "other", "team-b") is None
    assert apiserver.delete("pods", "other", namespace="team-b") is None
    bare = LiveCluster(apiserver.api, apiserver.kubeconfig())
    for hook in (
        lambda: bare.requests,
        lambda: bare.set_phase("team-a", "g-0", "Running"),
        lambda: bare.inject_error("POST", "/binding$", 409),
        bare.compact,
        bare.drop_watches,
    ):
        with pytest.raises(pytest.skip.Exception, match="needs"):
            hook()
    apiserver.close()
    assert not apiserver.objects("pods") and not apiserver.objects("podgroups")
    assert not apiserver.objects(VOLCANO_GROUPS) and not apiserver.objects("nodes")


KUEUE_GATE = {"name": "kueue.x-k8s.io/admission"}


def test_gated_pods_wait_for_their_gates_and_their_gang_binds_whole_once_they_are_lifted(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """Kueue gates the pods of a job it has not admitted yet (spec.schedulingGates), and the
    API server refuses to bind a gated pod: the gang is not bound, holds no GPU, is not
    failed or evicted, and binds whole once its gates are lifted."""
    apiserver.create(node("dgx0"))
    cluster.start()
    apiserver.create(podgroup("g", 2))
    for i in range(2):
        gated = pod(f"g-{i}", 4, group="g")
        gated["spec"]["schedulingGates"] = [KUEUE_GATE]
        apiserver.create(gated)
    apiserver.create(pod("free", 8))  # the whole node, while the gang is gated
    until(lambda: cluster.bound("free"), "the pod without gates bound")
    apiserver.delete("pods", "free", "team-a")
    time.sleep(1.0)
    binds = [p for m, p in apiserver.requests if m == "POST" and "/pods/g-" in p]
    assert binds == [], binds
    assert cluster.pod("g-0") and cluster.pod("g-1") and not cluster.bound("g-0")
    said = [c for c in cluster.pod("g-0")["status"]["conditions"] if c["type"] == "PodScheduled"]
    assert said[0]["reason"] == "SchedulingGated"  # the API server's own word, left as it is
    apiserver.patch("pods", "g-0", {"spec": {"schedulingGates": []}}, "team-a")
    time.sleep(0.5)
    assert not cluster.bound("g-0")  # half the gang lifted: still nothing bound
    told = until(
        lambda: [e for e in cluster.events("g-0") if e["reason"] == "WaitingForPods"],
        "the gang says it waits for its gated pod",
    )
    assert (
        "1 of 2 pods" in told[-1]["message"] and "kueue.x-k8s.io/admission" in told[-1]["message"]
    )
    apiserver.patch("pods", "g-1", {"spec": {"schedulingGates": []}}, "team-a")
    where = until(lambda: cluster.bound("g-0", "g-1"), "the gang bound whole")
    assert gpus_of(where) == list(range(8))


@pytest.mark.parametrize(
    ("fault", "sent"),
    [
        ({"status": 429, "reason": "TooManyRequests", "retry_after": "1"}, 3),  # APF's answer
        ({"status": 500, "reason": "InternalError"}, 3),
        ({"status": 503, "reason": "ServiceUnavailable"}, 3),
        ({"status": 0}, 3),  # the connection cut before the server saw it
        ({"after": True}, 2),  # the server bound it, its answer lost: the retry is a 409
    ],
    ids=["429", "500", "503", "no-answer", "answer-lost"],
)
def test_a_throttled_or_failed_bind_is_tried_again_and_the_gang_binds_whole(
    apiserver: LiveCluster, cluster: Cluster, fault: dict[str, Any], sent: int
) -> None:
    """API Priority and Fairness answers 429 with Retry-After under load; a server or a load
    balancer answers 5xx; a connection breaks. One such answer must not fail a gang: the bind
    is tried again (after the wait the server asks for), and a retry that finds the pod bound
    as planned counts it bound. Nothing is evicted."""
    apiserver.create(node("dgx0"))
    cluster.start()
    status = fault.get("status", 0)
    headers = {"Retry-After": fault["retry_after"]} if "retry_after" in fault else {}
    body = status_body(status, fault.get("reason", ""), "injected") if status else b""
    times = 1 if fault.get("after") else 2
    apiserver.proxy.inject(
        "POST",
        r"/pods/g-1/binding$",
        times=times,
        status=status,
        body=body,
        headers=headers,
        after=bool(fault.get("after")),
    )
    apiserver.create(podgroup("g", 2))
    for i in range(2):
        apiserver.create(pod(f"g-{i}", 4, group="g"))
    where = until(lambda: cluster.bound("g-0", "g-1"), "the gang bound whole")
    assert gpus_of(where) == list(range(8))
    time.sleep(0.5)
    posts = [p for m, p in apiserver.requests if m == "POST"]
    assert posts.count("/api/v1/namespaces/team-a/pods/g-1/binding") == sent
    assert not [p for p in posts if p.endswith("/eviction")]
    assert cluster.bound("g-0", "g-1") == where


def test_a_throttled_write_of_the_plan_is_tried_again(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """The plan goes on the PodGroup before the binds; a 429 there fails no gang either: the
    gang's first job runs, never failed and submitted again."""
    apiserver.create(node("dgx0"))
    runner = cluster.start()
    throttled = status_body(429, "TooManyRequests", "Too many requests, please try again later.")
    apiserver.proxy.inject(
        "PATCH", r"/podgroups/g$", times=2, status=429, body=throttled, headers={"Retry-After": "1"}
    )
    apiserver.create(podgroup("g", 2))
    for i in range(2):
        apiserver.create(pod(f"g-{i}", 4, group="g"))
    until(lambda: cluster.bound("g-0", "g-1"), "the gang bound whole")
    patches = [p for m, p in apiserver.requests if m == "PATCH" and p.endswith("/podgroups/g")]
    assert len(patches) == 3
    with runner.lock:
        assert [gang.job for gang in runner.scheduler.gangs.values()] == ["team-a/g#1"]


# ----------------------------------------------------------------- Kubernetes' own gangs


def workload(name: str, min_count: int) -> dict[str, Any]:
    """The Workload a job controller makes (scheduling.k8s.io/v1beta1): the template of its
    PodGroups."""
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "Workload",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "podGroupTemplates": [
                {"name": "workers", "schedulingPolicy": {"gang": {"minCount": min_count}}}
            ]
        },
    }


def initially_scheduled(api: LiveCluster, name: str) -> dict[str, Any]:
    group = api.get(UPSTREAM_GROUPS, name, "team-a") or {}
    found = [
        c
        for c in (group.get("status") or {}).get("conditions") or []
        if c["type"] == "PodGroupInitiallyScheduled"
    ]
    return found[0] if found else {}


def test_a_kubernetes_gang_binds_whole_on_one_nvlink_ring(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """Kubernetes 1.37's own gang API: a Workload, its PodGroup (gang, minCount 4) and four
    pods that name it in spec.schedulingGroup. They bind together on one NVLink ring; the
    plan is on the PodGroup, and its PodGroupInitiallyScheduled condition turns True."""
    for i in range(4):
        apiserver.create(node(f"dgx{i}"))
    cluster.start()
    apiserver.create(workload("vgg16", 4))
    apiserver.create(upstream_podgroup("vgg16-0", 4, workload="vgg16"))
    names = [f"vgg16-{i}" for i in range(4)]
    for name in names[:3]:
        apiserver.create(upstream_pod(name, 1, "vgg16-0"))
    until(  # an Event per count, as the pods arrive
        lambda: [e for e in cluster.events(names[0]) if "3 of 4 pods" in e["message"]],
        "the gang says it waits for its fourth pod",
    )
    assert not cluster.bound(names[0])
    apiserver.create(upstream_pod(names[3], 1, "vgg16-0"))
    where = until(lambda: cluster.bound(*names), "the gang bound whole")
    assert len({n for n, _ in where.values()}) == 1
    assert ring_bandwidth(DGX1, gpus_of(where)) == 25.0
    group = apiserver.get(UPSTREAM_GROUPS, "vgg16-0", "team-a") or {}
    plan = json.loads(group["metadata"]["annotations"][PLAN])
    assert {p: (n, tuple(g)) for p, (n, g) in plan["pods"].items()} == where
    condition = until(lambda: initially_scheduled(apiserver, "vgg16-0"), "the condition set")
    assert condition["status"] == "True"


def test_a_kubernetes_gang_that_does_not_fit_says_so_on_its_podgroup(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    apiserver.create(node("dgx0"))
    cluster.start()
    apiserver.create(upstream_podgroup("big", 2))
    for i in range(2):
        apiserver.create(upstream_pod(f"big-{i}", 8, "big"))
    condition = until(lambda: initially_scheduled(apiserver, "big"), "the condition set")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "GPUs" in condition["message"]
    assert not cluster.bound("big-0")


def test_a_basic_kubernetes_podgroup_schedules_its_pods_one_by_one(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """A PodGroup whose policy is `basic` is no gang: each of its pods binds on its own."""
    apiserver.create(node("dgx0"))
    cluster.start()
    apiserver.create(upstream_podgroup("loose", None))
    apiserver.create(upstream_pod("loose-0", 2, "loose"))
    until(lambda: cluster.bound("loose-0"), "the first pod bound alone")
    apiserver.create(upstream_pod("loose-1", 2, "loose"))
    until(lambda: cluster.bound("loose-0", "loose-1"), "the second bound on its own too")


def test_each_pod_of_a_gang_gets_the_best_pair_its_node_has(
    apiserver: LiveCluster, cluster: Cluster
) -> None:
    """Four 2-GPU pods of one gang on a DGX-1: the whole node, and each pod an NVLink pair of
    two links (50 GB/s), not the index-order pairs (0-1 and 4-5 have one link, 25 GB/s)."""
    apiserver.create(node("dgx0"))
    cluster.start()
    apiserver.create(upstream_podgroup("pairs", 4))
    names = [f"pairs-{i}" for i in range(4)]
    for name in names:
        apiserver.create(upstream_pod(name, 2, "pairs"))
    where = until(lambda: cluster.bound(*names), "the gang bound")
    assert gpus_of(where) == list(range(8))
    assert [ring_bandwidth(DGX1, gpus) for _, gpus in where.values()] == [50.0] * 4
