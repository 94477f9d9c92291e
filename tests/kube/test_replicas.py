"""Two scheduler replicas as deploy/kubernetes/scheduler.yaml runs them (tests/kube/replicas.py):
only the leader schedules and keeps the cluster's state, so every read through the Service must
reach it, before and after a failover."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kube.live import LiveCluster
from tests.kube.replicas import NAMESPACE, Replica, endpoints, run_as_pod
from tests.kube.test_scheduler_e2e import Cluster, node, pod, until
from toposched.kube.api import KubeApi
from toposched.kube.reads import SchedulerApi

READS = 20  # through the Service: a standby behind it answers about half of them


@pytest.fixture
def replicas(apiserver: LiveCluster, cluster: Cluster) -> Iterator[list[Replica]]:
    made: list[Replica] = []
    yield made
    for replica in made:
        replica.stop()


def job_names(read: SchedulerApi) -> list[str]:
    return [job["name"] for job in read.jobs()]


def test_every_read_through_the_service_reaches_the_leader(
    apiserver: LiveCluster, cluster: Cluster, replicas: list[Replica]
) -> None:
    apiserver.create(node("dgx0"))
    first = cluster.start(lease=True, name="first", pod=(NAMESPACE, "toposched-scheduler-0"))
    until(lambda: first.leading, "the first replica leads")
    second = cluster.start(lease=True, name="second", pod=(NAMESPACE, "toposched-scheduler-1"))
    replicas.append(run_as_pod(apiserver, first, 0, "dgx0"))
    replicas.append(run_as_pod(apiserver, second, 1, "dgx0"))
    apiserver.create(pod("train", 2))
    until(lambda: cluster.bound("train"), "train bound by the leader")
    until(lambda: endpoints(apiserver), "the Service has an endpoint")
    read = SchedulerApi(KubeApi.connect(str(apiserver.user_kubeconfig)))
    seen = [job_names(read) for _ in range(READS)]
    missed = sum(1 for names in seen if not any(n.startswith("team-a/train#") for n in names))
    assert missed == 0, f"{missed} of {READS} reads through the Service did not see the job"
    assert endpoints(apiserver) == {replicas[0].ip}

    first.stop.set()  # the leader dies; its pod's container with it
    replicas[0].stop()
    apiserver.delete("pods", replicas[0].name, NAMESPACE)
    until(lambda: second.leading, "the second replica leads once the lease expires", 20.0)
    until(lambda: endpoints(apiserver) == {replicas[1].ip}, "the Service follows the leader")
    names = until(lambda: job_names(read), "the new leader answers reads", 20.0)
    assert any(n.startswith("team-a/train#") for n in names)
