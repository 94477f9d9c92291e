"""`toposched kube submit | list | get | explain | logs | delete | top node`, as a user types
them, against the real API server and a running scheduler whose read API sits behind its Service."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Result, run_cli
from tests.kube.live import LiveCluster
from tests.kube.replicas import NAMESPACE, endpoints, run_as_pod
from tests.kube.test_scheduler_e2e import Cluster, node, until
from toposched.kube.objects import MODEL


@pytest.fixture
def cluster(apiserver: LiveCluster, kubeconfig: Path) -> Iterator[Cluster]:
    """Two DGX-1 nodes and the scheduler, run as the Deployment's pod: its read API behind
    the Service of deploy/kubernetes/scheduler.yaml, reached through the API server's proxy."""
    for i in range(2):
        apiserver.create(node(f"dgx{i}"))
    c = Cluster(apiserver, kubeconfig)
    # Stopped whatever fails: a scheduler left running would bind the next tests' pods.
    try:
        started = c.start(pod=(NAMESPACE, "toposched-scheduler-0"))
        replica = run_as_pod(apiserver, started, 0, "dgx1")
        try:
            until(lambda: endpoints(apiserver) == {replica.ip}, "the scheduler behind its Service")
            yield c
        finally:
            replica.stop()
    finally:
        c.stop()


@pytest.fixture
def user(apiserver: LiveCluster) -> Path:
    """A user's kubeconfig: `edit` in the job namespaces (team-a by default), the read API's
    role in toposched-system."""
    return apiserver.user_kubeconfig


def kube(kubeconfig: Path, command: str, *args: str) -> Result:
    """`toposched kube COMMAND --kubeconfig F ARGS` (before any `--` in ARGS)."""
    words = command.split()
    return run_cli("kube", *words, "--kubeconfig", str(kubeconfig), *args)


def ok(done: Result) -> str:
    assert done.code == 0, done.err
    return done.out


def test_submit_watch_and_delete_a_tensorflow_job(
    apiserver: LiveCluster, cluster: Cluster, user: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: tf1\nworkers: 2\ngpus: 4\nenv: {NCCL_DEBUG: WARN}\n")
    made = json.loads(
        ok(
            kube(
                user,
                "submit",
                "-f",
                str(spec),
                "tfjob",
                "--image",
                "tensorflow/tensorflow:2.16.1-gpu",
                "--ps",
                "1",
                "-n",
                "team-a",
                "--json",
                "--",
                "python",
                "train.py",
            )
        )
    )
    assert made["objects"][:2] == ["PodGroup/tf1", "Service/tf1"] and len(made["objects"]) == 5
    where = until(lambda: cluster.bound("tf1-worker-0", "tf1-worker-1"), "the workers bound")
    assert len({n for n, _ in where.values()}) == 1  # 8 GPUs of one gang: one node
    jobs = until(
        lambda: [
            j
            for j in json.loads(ok(kube(user, "list", "--json")))["jobs"]
            if j["state"] == "running"
        ],
        "the job running in the scheduler's list",
    )
    assert [j["name"] for j in jobs] == ["team-a/tf1#1"]
    got = json.loads(ok(kube(user, "get", "tf1", "-n", "team-a", "--json")))
    assert got["name"] == "team-a/tf1#1" and len(got["placement"]) == 2
    assert "tf1" in ok(kube(user, "top node"))
    assert "running" in ok(kube(user, "explain", "tf1", "-n", "team-a"))
    apiserver.set_log("team-a", "tf1-worker-1", "step 1\nstep 2\nstep 3\n")
    assert ok(kube(user, "logs", "tf1", "--worker", "1", "-n", "team-a")) == (
        "step 1\nstep 2\nstep 3\n"
    )
    assert ok(kube(user, "logs", "tf1", "-w", "1", "--tail", "1", "-n", "team-a")) == ("step 3\n")
    gone = json.loads(ok(kube(user, "delete", "tf1", "-n", "team-a", "--json")))
    assert sorted(gone["deleted"]) == sorted(made["objects"])
    for resource in ("pods", "podgroups", "services"):  # the kubelet ends the bound pods
        until(lambda r=resource: apiserver.objects(r, "team-a") == [], f"no {resource} left")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--name", "Bad_Name"], "name 'Bad_Name': lower-case letters"),
        (["--name", "j", "--kind", "caffe"], "unknown job kind 'caffe'"),
        (["--name", "j", "--ps", "2"], "parameter servers (ps=2) are for tensorflow jobs"),
        (["--workers", "2"], "a job on a cluster needs a name"),
        (
            ["tfjob", "--name", "j", "--kind", "mpi"],
            "two job kinds given: tensorflow and --kind mpi",
        ),
        (["--name", "j", "python"], "the command goes after `--`: toposched kube submit [KIND]"),
    ],
)
def test_a_bad_submit_makes_nothing(
    apiserver: LiveCluster, user: Path, args: list[str], words: str
) -> None:
    done = kube(user, "submit", "--image", "img", *args, "--", "python", "train.py")
    assert done.code == 2 and words in done.err, done.err
    assert apiserver.objects("pods", "team-a") == []
    assert apiserver.objects("podgroups", "team-a") == []


def test_submit_names_the_model_the_job_trains(apiserver: LiveCluster, user: Path) -> None:
    args = ("--image", "img", "--name", "m", "--model", "imagenet", "--", "python", "t.py")
    ok(kube(user, "submit", *args))
    (group,) = apiserver.objects("podgroups", "team-a")
    assert group["metadata"]["annotations"][MODEL] == "imagenet"


def test_a_job_file_field_a_cluster_cannot_honour_is_refused(
    apiserver: LiveCluster, user: Path, tmp_path: Path
) -> None:
    spec = tmp_path / "job.yaml"
    spec.write_text("name: j\nworkers: 2\nelastic: 1:2\ncommand: python train.py\n")
    done = kube(user, "submit", "-f", str(spec), "--image", "img")
    assert done.code == 2 and "elastic: not available on a cluster yet" in done.err
    assert apiserver.objects("pods", "team-a") == []


def test_reading_a_job_that_does_not_exist_says_so(
    apiserver: LiveCluster, cluster: Cluster, user: Path
) -> None:
    for command in ("get", "delete", "logs"):
        done = kube(user, command, "nope")
        assert done.code == 3, (command, done.err)
        assert "nope" in done.err


def test_the_read_api_pages_jobs_as_the_server_does(
    apiserver: LiveCluster, cluster: Cluster, user: Path
) -> None:
    """`limit` and `continue` as on the standalone server; `kube list` walks every page."""
    from tests.kube.test_scheduler_e2e import pod
    from toposched.kube.api import KubeApi
    from toposched.kube.reads import SchedulerApi

    for name in ("a", "b", "c"):
        apiserver.create(pod(name, 1))
    until(lambda: cluster.bound("a", "b", "c"), "three pods bound")
    # The standalone server's own client reads it, page by page.
    read = SchedulerApi(KubeApi.connect(str(user))).client
    first = read.job_page(limit=2)
    assert [j["name"][:8] for j in first.jobs] == ["team-a/a", "team-a/b"]
    assert "command" not in first.jobs[0]  # list rows are slim, as the server's
    assert first.continue_ is not None
    rest = read.job_page(limit=2, continue_=first.continue_)
    assert [j["name"][:8] for j in rest.jobs] == ["team-a/c"]
    assert rest.continue_ is None
    assert [j["name"] for j in read.all_jobs(page_size=1)] == [
        j["name"] for j in first.jobs + rest.jobs
    ]
    listed = json.loads(ok(kube(user, "list", "--json")))
    assert len(listed["jobs"]) == 3 and listed["metadata"] == {"continue": None}


def test_the_api_servers_own_refusal_reads_as_its_status(
    apiserver: LiveCluster, user: Path
) -> None:
    """The read API's client reads a Kubernetes Status from the proxy in front of it as kubectl
    shows it (code, reason, message), not as a toposched server's error: here RBAC's, which
    lets users proxy to the scheduler's Service alone."""
    from toposched.common.apierror import ApiError
    from toposched.kube.api import KubeApi
    from toposched.kube.reads import SchedulerApi

    read = SchedulerApi(KubeApi.connect(str(user)), service="no-such-scheduler")
    with pytest.raises(ApiError) as raised:
        read.jobs()
    err = raised.value
    assert (err.status, err.reason) == (403, "Forbidden"), str(err)
    assert str(err) == f"403 Forbidden: {err.message}"
    assert 'services "no-such-scheduler:http" is forbidden' in err.message
