"""What the real API server answers toposched's client, and the traps of the official client
that `toposched.kube.api.KubeApi` steps around:

- `CoreV1Api.create_namespaced_pod_binding` binds the pod, then raises a pydantic
  ValidationError reading the `Status` the server answers as a `V1Binding` (no `target`);
  `KubeApi.bind` reads the raw answer.
- `CoreV1Api.create_namespaced_pod_eviction` "returns" a `V1Eviction` whose kind is `Status`;
  a PodDisruptionBudget refuses an eviction with 429.
- A watch from a resourceVersion etcd has compacted is 410 Gone (`Gone`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tests.kube.live import LiveCluster
from tests.kube.test_scheduler_e2e import node
from tests.server import wait_for as until
from toposched.kube import api as kube_api
from toposched.kube.api import ApiError, Gone, KubeApi

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

JSON = dict[str, Any]
NS = "team-a"


def pod(name: str, **spec: Any) -> JSON:
    labels = spec.pop("labels", {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "pytorch:2",
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
            **spec,
        },
    }


@pytest.fixture
def core(apiserver: LiveCluster) -> Iterator[Any]:
    """The official client, configured the usual way (load_kube_config), as the admin."""
    configuration = client.Configuration()
    config.load_kube_config(
        config_file=str(apiserver.admin_kubeconfig), client_configuration=configuration
    )
    with client.ApiClient(configuration) as c:
        yield client.CoreV1Api(c)


def status_of(err: ApiException) -> JSON:
    body: JSON = json.loads(err.body)
    return body


def test_binding_answers_a_status_and_the_generated_method_trips_on_it(
    apiserver: LiveCluster, core: Any
) -> None:
    """The trap KubeApi.bind avoids: create_namespaced_pod_binding binds, then fails to read
    the answer (a Status, not a Binding) as a V1Binding."""
    for name in ("n1", "n2"):
        apiserver.create(node(name))
    n1, n2 = (apiserver.node_name(n) for n in ("n1", "n2"))
    core.create_namespaced_pod(NS, pod("p1"))
    core.create_namespaced_pod(NS, pod("p2"))
    uid = core.read_namespaced_pod("p1", NS).metadata.uid
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name="p1", uid=uid, annotations={"toposched.io/gpus": "0,1"}),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=n1),
    )
    with pytest.raises(ValueError, match="target"):  # pydantic's ValidationError is a ValueError
        core.create_namespaced_pod_binding("p1", NS, body)
    bound = apiserver.api.request("GET", f"/api/v1/namespaces/{NS}/pods/p1")
    assert bound["spec"]["nodeName"] == n1  # yet the server did bind
    assert bound["metadata"]["annotations"] == {"toposched.io/gpus": "0,1"}
    assert [(c["type"], c["status"]) for c in bound["status"]["conditions"]] == [
        ("PodScheduled", "True")
    ]

    admin = KubeApi.connect(str(apiserver.admin_kubeconfig))
    admin.bind(NS, "p2", n2, {}, uid="")  # KubeApi reads the Status as what it is
    assert (
        apiserver.api.request("GET", f"/api/v1/namespaces/{NS}/pods/p2")["spec"]["nodeName"] == n2
    )

    with pytest.raises(ApiError) as info:  # already bound
        admin.bind(NS, "p1", n2, {})
    assert (info.value.status, info.value.reason) == (409, "Conflict")
    assert info.value.message == (
        'Operation cannot be fulfilled on pods/binding "p1": '
        f'pod p1 is already assigned to node "{n1}"'
    )
    with pytest.raises(ApiError) as info:
        admin.bind(NS, "ghost", n1, {})
    assert info.value.status == 404
    core.create_namespaced_pod(NS, pod("p3"))
    with pytest.raises(ApiError) as info:  # the Binding's uid is a precondition
        admin.bind(NS, "p3", n1, {}, uid="not-its-uid")
    assert info.value.status == 409 and "Precondition failed" in info.value.message


def test_eviction_honours_a_disruption_budget(apiserver: LiveCluster, core: Any) -> None:
    apiserver.create(node("n1"))
    policy = client.PolicyV1Api(core.api_client)
    for name in ("w0", "w1", "solo"):
        labels = {"app": "train"} if name != "solo" else {}
        apiserver.create(pod(name, labels=labels, nodeName="n1"))
        apiserver.set_phase(NS, name, "Running")
    policy.create_namespaced_pod_disruption_budget(
        NS,
        {
            "metadata": {"name": "train"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "train"}}},
        },
    )

    def allowed() -> int | None:
        status = policy.read_namespaced_pod_disruption_budget("train", NS).status
        return None if status is None or status.current_healthy != 2 else status.disruptions_allowed

    until(lambda: allowed() == 0, "the disruption controller counts the budget")
    admin = KubeApi.connect(str(apiserver.admin_kubeconfig))
    with pytest.raises(ApiError) as info:
        admin.evict(NS, "w0")
    assert (info.value.status, info.value.reason) == (429, "TooManyRequests")
    assert "disruption budget" in info.value.message
    assert apiserver.get("pods", "w0", NS) is not None

    # no budget: the generated method reads the Status answer as a V1Eviction (kind "Status")
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "solo"}}
    assert core.create_namespaced_pod_eviction("solo", NS, eviction).kind == "Status"
    until(lambda: apiserver.get("pods", "solo", NS) is None, "solo gone (its kubelet ends it)")
    with pytest.raises(ApiError) as info:
        admin.evict(NS, "solo")
    assert info.value.status == 404


def test_a_watch_resumes_from_a_version_and_is_gone_after_compaction(
    apiserver: LiveCluster,
) -> None:
    admin = KubeApi.connect(str(apiserver.admin_kubeconfig))
    path = f"/api/v1/namespaces/{NS}/pods"
    admin.request("POST", path, body=pod("a"))
    _, rv = admin.list(path)
    admin.request("POST", path, body=pod("b"))
    admin.request(
        "PATCH",
        f"{path}/a",
        body={"metadata": {"labels": {"x": "y"}}},
        content_type="application/merge-patch+json",
    )
    admin.request("DELETE", f"{path}/b", body={"gracePeriodSeconds": 0})
    seen: list[tuple[str, str]] = []

    def watch() -> None:
        for event in admin.watch(path, rv, timeout_s=2):
            if event["type"] != "BOOKMARK":
                seen.append((event["type"], event["object"]["metadata"]["name"]))

    thread = threading.Thread(target=watch)
    thread.start()
    thread.join(10)
    # A deletion is two events on the real server: the deletionTimestamp set, then the removal.
    assert seen == [("ADDED", "b"), ("MODIFIED", "a"), ("MODIFIED", "b"), ("DELETED", "b")]
    apiserver.compact()
    with pytest.raises(Gone) as gone:
        list(admin.watch(path, rv, timeout_s=2))
    assert gone.value.status == 410 and gone.value.reason == "Expired"


class Configuration:
    """What the kubeconfig loader leaves on the client's configuration: a hook that installs
    itself again on every call."""

    def __init__(self) -> None:
        self.calls = 0
        self.refresh_api_key_hook: Any = self.loader_hook

    def loader_hook(self, conf: Any) -> None:
        self.calls += 1
        conf.refresh_api_key_hook = self.loader_hook


def test_credentials_are_reloaded_at_most_once_a_second(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr(kube_api.time, "monotonic", lambda: now[0])
    conf = Configuration()
    kube_api._throttle_refresh(conf)
    wrapped = conf.refresh_api_key_hook
    for _ in range(50):
        conf.refresh_api_key_hook(conf)
    assert conf.calls == 1 and conf.refresh_api_key_hook is wrapped
    now[0] += kube_api.REFRESH_EVERY_S
    conf.refresh_api_key_hook(conf)
    conf.refresh_api_key_hook(conf)
    assert conf.calls == 2 and conf.refresh_api_key_hook is wrapped
    none = Configuration()
    none.refresh_api_key_hook = None
    kube_api._throttle_refresh(none)  # no hook (a token that never expires): nothing to wrap
    assert none.refresh_api_key_hook is None


HTML_502 = b"<html><head><title>502 Bad Gateway</title></head><body>nginx</body></html>"


@pytest.mark.parametrize(
    ("status", "body", "content_type", "said"),
    [
        (502, HTML_502, "text/html", "502 Bad Gateway"),
        (404, b"404 page not found\n", "text/plain", "404 page not found"),
        (503, b"", "text/plain", "Service Unavailable"),
    ],
)
def test_an_error_that_is_not_json_is_an_api_error(
    apiserver: LiveCluster, status: int, body: bytes, content_type: str, said: str
) -> None:
    """A load balancer's HTML page, the API server's own text 404 (a group it does not
    serve), an empty answer: each an ApiError with the status and what the body says, never a
    JSONDecodeError. A 2xx answer that is not JSON is one too."""
    api = KubeApi.connect(str(apiserver.kubeconfig()))
    for call in (
        lambda: api.request("GET", "/api/v1/nodes"),
        lambda: api.list("/api/v1/nodes"),
        lambda: list(api.watch("/api/v1/nodes", "0", timeout_s=1)),
        lambda: list(api.text("/api/v1/nodes")),
    ):
        apiserver.proxy.inject(
            "GET", r"^/api/v1/nodes$", status=status, body=body, content_type=content_type
        )
        with pytest.raises(ApiError) as raised:
            call()
        assert raised.value.status == status
        assert said in str(raised.value)
    apiserver.proxy.inject(
        "GET", r"^/api/v1/nodes$", status=200, body=HTML_502, content_type="text/html"
    )
    with pytest.raises(ApiError, match="not JSON") as raised:
        api.request("GET", "/api/v1/nodes")
    assert raised.value.status == 200


def test_the_rate_limit_lets_a_burst_through_then_the_qps(monkeypatch: pytest.MonkeyPatch) -> None:
    """client-go's token bucket: `burst` requests at once, then one each 1/qps seconds."""
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(kube_api.time, "sleep", sleep)
    limit = kube_api.RateLimit(10.0, 3, clock=lambda: now[0])
    assert [limit.wait() for _ in range(3)] == [0.0, 0.0, 0.0]
    waits = [limit.wait() for _ in range(4)]
    assert waits == pytest.approx([0.1, 0.1, 0.1, 0.1])
    now[0] += 10.0  # idle: the bucket fills up to the burst, no more
    assert [limit.wait() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limit.wait() == pytest.approx(0.1)
    with pytest.raises(ValueError, match="qps > 0"):
        kube_api.RateLimit(0, 1)
