"""The Kubernetes scheduler as a real process (`python -m toposched kube scheduler`) against the
real API server, killed with SIGKILL where it hurts most: between two binds of one gang, and
while it leads. What must hold: the gang ends bound whole as its plan says, no GPU is given to
two live pods, and a second replica takes over the lease and goes on binding."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.kube.live import LiveCluster
from tests.kube.test_scheduler_e2e import GROUP_RESOURCES, gang_group, member, node, pod
from tests.server import free_port
from tests.server import wait_for as until
from toposched.kube.api import KubeApi
from toposched.kube.driver import PLAN

LEASE_NAMESPACE = "toposched-system"
LEASE = "toposched-scheduler"


class Scheduler:
    """One `toposched kube scheduler` process; its output goes to a log file."""

    def __init__(self, kubeconfig: Path, log: Path, *args: str) -> None:
        self.port = free_port()
        self.log = log
        command = [sys.executable, "-m", "toposched", "kube", "scheduler"]
        command += ["--kubeconfig", str(kubeconfig), "--listen", f"127.0.0.1:{self.port}", *args]
        with log.open("wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def healthy(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"the scheduler exited ({self.proc.returncode}):\n{self.output()}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: no cleanup, no lease given back, requests in flight left as they are."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


@pytest.fixture
def start(kubeconfig: Path, tmp_path: Path) -> Iterator[Callable[..., Scheduler]]:
    """Start scheduler processes (waiting for /healthz); every one is killed and reaped after."""
    started: list[Scheduler] = []

    def run(*args: str) -> Scheduler:
        s = Scheduler(kubeconfig, tmp_path / f"scheduler-{len(started)}.log", *args)
        started.append(s)
        until(s.healthy, f"/healthz of scheduler {len(started)}", 20)
        return s

    try:
        yield run
    finally:
        for i, s in enumerate(started):
            s.kill()
            # Shown by pytest when the test failed: what each scheduler said, at its end.
            print(f"--- scheduler {i} ({s.log}) ---\n{s.output()}")


def where(api: LiveCluster, name: str, ns: str = "team-a") -> tuple[str, tuple[int, ...]] | None:
    """(node, GPUs) of a bound pod, None while it is not bound."""
    found = api.get("pods", name, ns)
    if not found or not found["spec"].get("nodeName"):
        return None
    text = (found["metadata"].get("annotations") or {}).get("toposched.io/gpus", "")
    return found["spec"]["nodeName"], tuple(int(g) for g in text.split(",") if g)


def cluster_state(api: LiveCluster) -> str:
    """Nodes and pods as the API server has them: what a failed wait prints."""
    lines = []
    for n in api.objects("nodes"):
        status = n.get("status") or {}
        conditions = [(c["type"], c["status"]) for c in status.get("conditions") or []]
        lines.append(
            f"node {n['metadata']['name']}: taints {(n.get('spec') or {}).get('taints')}, "
            f"allocatable {status.get('allocatable')}, {conditions}"
        )
    leases = api.api.request(
        "GET", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
    )
    for lease in leases.get("items") or []:
        spec = lease.get("spec") or {}
        lines.append(f"lease {lease['metadata']['name']}: renewed {spec.get('renewTime')}")
    for p in api.objects("pods"):
        meta = p["metadata"]
        lines.append(
            f"pod {meta.get('namespace')}/{meta['name']}: node {p['spec'].get('nodeName')}, "
            f"phase {(p.get('status') or {}).get('phase')}, deleting "
            f"{meta.get('deletionTimestamp')}, annotations {meta.get('annotations')}"
        )
    return "\n".join(lines)


def assert_no_gpu_booked_twice(api: LiveCluster) -> dict[str, dict[int, str]]:
    """Every bound, live pod's GPUs, per node: no GPU twice, none beyond the node's 8."""
    owners: dict[str, dict[int, str]] = {}
    for p in api.objects("pods"):
        node_name = p["spec"].get("nodeName")
        if not node_name or p.get("status", {}).get("phase") in ("Succeeded", "Failed"):
            continue
        text = (p["metadata"].get("annotations") or {}).get("toposched.io/gpus", "")
        gpus = [int(g) for g in text.split(",") if g]
        want = int(p["spec"]["containers"][0]["resources"]["limits"].get("nvidia.com/gpu", 0))
        assert len(gpus) == want, f"{p['metadata']['name']}: GPUs {text!r}, wants {want}"
        for gpu in gpus:
            assert 0 <= gpu < 8, f"{p['metadata']['name']}: GPU {gpu} on {node_name}"
            other = owners.setdefault(node_name, {}).setdefault(gpu, p["metadata"]["name"])
            assert other == p["metadata"]["name"], f"{node_name} GPU {gpu}: {other} and {p}"
    return owners


def bindings(api: LiveCluster, name: str) -> int:
    return sum(1 for m, path in api.requests if m == "POST" and path.endswith(f"/{name}/binding"))


@pytest.mark.parametrize(
    ("dying_bind", "kind"),
    [
        ("lands-before-the-successor", "scheduler-plugins"),
        ("lands-after-it", "scheduler-plugins"),
        ("lands-after-it", "volcano"),
    ],
)
def test_a_scheduler_killed_between_two_binds_is_followed_by_one_that_binds_the_rest(
    apiserver: LiveCluster, start: Callable[..., Scheduler], dying_bind: str, kind: str
) -> None:
    """The first scheduler writes the plan on the gang's PodGroup (scheduler-plugins' or
    Volcano's), binds g-0, and hangs in the bind of g-1 (the API server is slow to answer it);
    it is killed there. Its bind of g-1 was received, so the API server may still carry it out:
    right after the kill, or once the successor has bound g-1 itself (then it is refused, 409).
    Either way the successor ends with the gang whole, as planned, and a pod that wants a whole
    node meanwhile takes the other node."""
    # Names no other test gives a node: late in a run, a node made again under an earlier
    # test's name (dgx1) was seen Ready Unknown and tainted unreachable by the real node
    # lifecycle controller within seconds, its lease renewed all along; `whole` had nowhere
    # to go. Why is not known yet.
    for i in range(2):
        apiserver.create(node(f"{kind[:3]}-{dying_bind[6:11]}-{i}"))
    apiserver.create(gang_group(kind, "g", 2))
    apiserver.inject_delay("POST", r"/namespaces/team-a/pods/g-1/binding$", 30.0)
    apiserver.create(member(kind, "g-0", 4, "g"))
    apiserver.create(member(kind, "g-1", 4, "g"))
    first = start()
    until(lambda: where(apiserver, "g-0") and bindings(apiserver, "g-1"), "g-0 bound, g-1 asked")
    group = apiserver.get(GROUP_RESOURCES[kind], "g", "team-a") or {}
    plan = json.loads(group["metadata"]["annotations"][PLAN])["pods"]
    assert set(plan) == {"g-0", "g-1"}
    assert where(apiserver, "g-0") == (plan["g-0"][0], tuple(plan["g-0"][1]))
    assert not where(apiserver, "g-1")
    first.kill()

    planned = {name: (str(n), tuple(gpus)) for name, (n, gpus) in plan.items()}
    if dying_bind == "lands-before-the-successor":
        assert apiserver.clear_delays() == 1  # the dead scheduler's bind is served now
        until(lambda: where(apiserver, "g-1"), "the dead scheduler's bind of g-1 carried out")
    apiserver.create(pod("whole", 8))
    start()
    try:
        until(lambda: where(apiserver, "g-1") and where(apiserver, "whole"), "g-1 and whole bound")
    except AssertionError:
        print(cluster_state(apiserver))
        raise
    if dying_bind == "lands-after-it":
        assert apiserver.clear_delays() == 1  # now served: refused, g-1 is bound already
        time.sleep(0.5)
    time.sleep(0.5)  # and nothing more happens: no eviction, no second binding

    assert where(apiserver, "g-0") == planned["g-0"]
    assert where(apiserver, "g-1") == planned["g-1"]
    assert not set(planned["g-0"][1]) & set(planned["g-1"][1])
    gang_nodes = {planned["g-0"][0], planned["g-1"][0]}
    assert len(gang_nodes) == 1, f"2 x 4 GPUs should share one DGX-1: {plan}"
    whole = where(apiserver, "whole")
    assert whole is not None and whole[0] not in gang_nodes and whole[1] == tuple(range(8))
    owners = assert_no_gpu_booked_twice(apiserver)
    assert sum(len(gpus) for gpus in owners.values()) == 16
    assert bindings(apiserver, "g-0") == 1  # the successor took g-0 from its annotation
    # the dead scheduler's bind of g-1, and the successor's unless it found g-1 bound
    assert bindings(apiserver, "g-1") == (1 if dying_bind == "lands-before-the-successor" else 2)


def lease_holder(api: LiveCluster) -> str:
    lease = api.get("leases", LEASE, LEASE_NAMESPACE) or {}
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def test_a_second_process_takes_the_lease_of_a_killed_leader_and_binds(
    apiserver: LiveCluster, start: Callable[..., Scheduler]
) -> None:
    apiserver.create(node("dgx0"))
    args = ("--leader-elect", "--lease-namespace", LEASE_NAMESPACE)
    replicas = {s.pid: s for s in (start(*args), start(*args))}
    identities = {f"{socket.gethostname()}-{pid}": pid for pid in replicas}
    leader = until(lambda: identities.get(lease_holder(apiserver)), "a replica holding the lease")
    apiserver.create(pod("p1", 3))
    until(lambda: where(apiserver, "p1"), "p1 bound by the leader")

    replicas[leader].kill()
    killed = time.monotonic()
    apiserver.create(pod("p2", 5))
    (follower,) = set(replicas) - {leader}
    until(lambda: where(apiserver, "p2"), "p2 bound by the follower", 40)
    took = time.monotonic() - killed
    assert identities[lease_holder(apiserver)] == follower
    assert took < 40, took
    lease = apiserver.get("leases", LEASE, LEASE_NAMESPACE) or {}
    assert lease["spec"].get("leaseTransitions", 0) >= 1
    time.sleep(0.5)

    p1, p2 = where(apiserver, "p1"), where(apiserver, "p2")
    assert p1 is not None and p2 is not None and p1[0] == p2[0] == "dgx0"
    assert not set(p1[1]) & set(p2[1])  # the follower rebuilt p1's GPUs before binding p2
    assert_no_gpu_booked_twice(apiserver)
    assert bindings(apiserver, "p1") == 1 and bindings(apiserver, "p2") == 1
    assert replicas[follower].proc.poll() is None, replicas[follower].output()


def test_a_delayed_request_holds_up_only_itself(apiserver: LiveCluster) -> None:
    """The proxy's delay: the delayed request waits; the others go on, and it is passed on
    when the delays are cleared."""
    apiserver.create(node("slow"))
    api = KubeApi.connect(str(apiserver.kubeconfig()))
    apiserver.inject_delay("get", r"/nodes/toposched-e2e-slow$", 5.0)
    done: list[float] = []
    began = time.monotonic()

    def slow() -> None:
        api.request("GET", "/api/v1/nodes/toposched-e2e-slow")
        done.append(time.monotonic() - began)

    thread = threading.Thread(target=slow)
    thread.start()
    until(lambda: ("GET", "/api/v1/nodes/toposched-e2e-slow") in apiserver.requests, "the GET")
    assert api.list("/api/v1/nodes")[0]
    apiserver.create(node("dgx0"))
    assert not done
    assert apiserver.clear_delays() == 1
    thread.join(5)
    assert done and done[0] < 4.0
    api.request("GET", "/api/v1/nodes/toposched-e2e-slow")  # times=1: the next one is not held
    assert time.monotonic() - began < 4.0


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "spread_by_model 0.1"),
        (("--param", "toposched.spread_by_model=null"), "spread_by_model off"),
    ],
    ids=["default", "off"],
)
def test_the_scheduler_says_whether_it_places_gangs_by_the_model(
    start: Callable[..., Scheduler], args: tuple[str, ...], said: str
) -> None:
    """Model placement is on by default for gangs that name their model (read from the
    shipped catalog unless --catalog is given), so the scheduler says so as it starts."""
    s = start(*args)
    line = "toposched kube scheduler: policy toposched, scheduler name toposched, " + said
    until(lambda: line in s.output().splitlines(), f"the line {line!r}")
