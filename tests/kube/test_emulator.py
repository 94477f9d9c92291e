"""The API server emulator against the real clients, so that it cannot drift from what they
accept: the official Python client (`kubernetes`) and the real `kubectl`.

Some tests document the clients' own traps, which the driver must step around:

- `CoreV1Api.create_namespaced_pod_binding` binds the pod, then raises a pydantic
  ValidationError reading the `Status` the server answers as a `V1Binding` (no `target`);
  `_preload_content=False` gets the raw 201 answer.
- `CoreV1Api.create_namespaced_pod_eviction` "returns" a `V1Eviction` whose kind is `Status`.
- A watch from a compacted resourceVersion surfaces as `ApiException(status=410)`; without
  `timeout_seconds`, `Watch.stream` first retries once, silently, from the same version.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3

from tests.kube.emulator import ApiServer

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

JSON = dict[str, Any]
GROUP, VERSION = "scheduling.x-k8s.io", "v1alpha1"
VOLCANO, VOLCANO_VERSION = "scheduling.volcano.sh", "v1beta1"


def pod(name: str, ns: str = "default", gpus: str = "1", **spec: Any) -> JSON:
    """A pod asking for `gpus` (a string: the client's models check quantities' types)."""
    labels = spec.pop("labels", {})
    status = spec.pop("status", None)
    out: JSON = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "pytorch:2",
                    "resources": {"limits": {"nvidia.com/gpu": gpus}},
                }
            ],
            **spec,
        },
    }
    if status is not None:
        out["status"] = status
    return out


def node(name: str, gpus: int = 8, labels: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels or {}},
        "status": {
            "capacity": {"nvidia.com/gpu": str(gpus)},
            "allocatable": {"nvidia.com/gpu": str(gpus)},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def status_of(err: ApiException) -> JSON:
    body: JSON = json.loads(err.body)
    return body


@pytest.fixture
def api_client(kubeconfig: Path) -> Iterator[Any]:
    """The official client, configured the usual way: load_kube_config of the file."""
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    with client.ApiClient(configuration) as c:
        yield c


@pytest.fixture
def core(api_client: Any) -> Any:
    return client.CoreV1Api(api_client)


@pytest.fixture
def custom(api_client: Any) -> Any:
    return client.CustomObjectsApi(api_client)


class Collector:
    """A `Watch().stream(...)` drained in a thread."""

    def __init__(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.events: list[JSON] = []
        self.error: BaseException | None = None
        self.watch = watch.Watch()
        self.thread = threading.Thread(target=self._run, args=(func, args, kwargs), daemon=True)
        self.thread.start()

    def _run(self, func: Callable[..., Any], args: Any, kwargs: Any) -> None:
        try:
            for event in self.watch.stream(func, *args, **kwargs):
                self.events.append({"type": event["type"], "object": event["raw_object"]})
        except BaseException as e:  # handed to the test
            self.error = e

    def types(self) -> list[tuple[str, str]]:
        return [(e["type"], e["object"]["metadata"].get("name", "")) for e in self.events]

    def join(self, timeout: float = 5.0) -> None:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the watch did not end"


# =========================================================================== the Python client


def test_discovery_answers_the_client(api_client: Any) -> None:
    version = client.VersionApi(api_client).get_code()
    assert version.git_version.startswith("v1.32")
    assert client.CoreApi(api_client).get_api_versions().versions == ["v1"]
    groups = {g.name: g for g in client.ApisApi(api_client).get_api_versions().groups}
    assert {"coordination.k8s.io", "policy", "scheduling.k8s.io", GROUP} <= set(groups)
    assert groups[GROUP].preferred_version.group_version == f"{GROUP}/{VERSION}"
    resources = client.CoreV1Api(api_client).get_api_resources().resources
    names = {r.name: r for r in resources}
    assert names["pods"].namespaced and not names["nodes"].namespaced
    assert names["pods/binding"].verbs == ["create"]
    assert names["pods/eviction"].group == "policy"
    pg = client.CustomObjectsApi(api_client).get_api_resources(GROUP, VERSION).resources[0]
    assert (pg.name, pg.kind, pg.short_names) == ("podgroups", "PodGroup", ["pg", "pgs"])
    assert groups[VOLCANO].preferred_version.group_version == f"{VOLCANO}/{VOLCANO_VERSION}"
    vc = client.CustomObjectsApi(api_client).get_api_resources(VOLCANO, VOLCANO_VERSION)
    assert [(r.name, r.kind, r.short_names) for r in vc.resources] == [
        ("podgroups", "PodGroup", ["pg", "podgroup-v1beta1"]),
        ("podgroups/status", "PodGroup", None),
    ]


def test_create_defaults_and_refusals(apiserver: ApiServer, core: Any) -> None:
    created = core.create_namespaced_pod("team-a", pod("p1", "team-a", status={"phase": "Running"}))
    assert created.status.phase == "Pending"  # the status sent on create is dropped
    assert created.spec.scheduler_name == "default-scheduler"
    assert created.spec.containers[0].resources.requests == {"nvidia.com/gpu": "1"}
    assert created.spec.priority == 0 and created.status.qos_class == "BestEffort"
    assert created.metadata.uid and int(created.metadata.resource_version) > 0
    assert apiserver.get("namespaces", "team-a") is not None  # made on first use
    named = core.create_namespaced_pod("default", {**pod(""), "metadata": {"generateName": "w-"}})
    assert named.metadata.name.startswith("w-") and len(named.metadata.name) == 7

    def refused(body: JSON, ns: str = "default") -> JSON:
        with pytest.raises(ApiException) as info:
            core.create_namespaced_pod(ns, body)
        answer = status_of(info.value)
        assert answer["kind"] == "Status" and answer["status"] == "Failure"
        assert answer["code"] == info.value.status
        return answer

    assert refused(pod("p1", "team-a"), ns="team-a")["reason"] == "AlreadyExists"
    no_name = refused({**pod("x"), "metadata": {}})
    assert (no_name["code"], no_name["reason"]) == (422, "Invalid")
    assert no_name["details"]["causes"][0]["field"] == "metadata.name"
    assert refused(pod("Bad_Name"))["code"] == 422
    assert refused({**pod("x"), "spec": {"containers": []}})["details"]["causes"][0]["field"] == (
        "spec.containers"
    )
    assert refused(pod("x", gpus="two"))["code"] == 400  # not a quantity: a decoding error
    half = refused(pod("x", gpus="0.5"))  # extended resources are whole numbers
    assert half["code"] == 422 and "must be an integer" in half["message"]
    assert refused(pod("x", ns="other"), ns="default")["code"] == 400  # namespace mismatch
    unknown_class = refused(pod("x", priorityClassName="nope"))
    assert unknown_class["code"] == 403 and "no PriorityClass" in unknown_class["message"]
    client.SchedulingV1Api(core.api_client).create_priority_class(
        {"metadata": {"name": "training"}, "value": 1000}
    )
    assert (
        core.create_namespaced_pod("default", pod("x", priorityClassName="training")).spec.priority
        == 1000
    )


def test_list_with_label_and_field_selectors(apiserver: ApiServer, core: Any) -> None:
    core.create_node(node("n1", labels={"zone": "a", "gpu": "v100"}))
    core.create_node(node("n2", labels={"zone": "b"}))
    core.create_node(node("n3", labels={"zone": "c", "gpu": "a100"}))

    def nodes(selector: str) -> list[str]:
        return [n.metadata.name for n in core.list_node(label_selector=selector).items]

    assert nodes("zone=a") == ["n1"]
    assert nodes("zone==b") == ["n2"]
    assert nodes("zone!=a") == ["n2", "n3"]
    assert nodes("gpu") == ["n1", "n3"]
    assert nodes("!gpu") == ["n2"]
    assert nodes("zone in (a,b)") == ["n1", "n2"]
    assert nodes("zone notin (a,b),gpu") == ["n3"]
    assert nodes("zone in (a, c),gpu=v100") == ["n1"]
    assert [n.metadata.name for n in core.list_node(field_selector="metadata.name=n2").items] == [
        "n2"
    ]

    core.create_namespaced_pod("a", pod("unbound", "a", schedulerName="toposched"))
    core.create_namespaced_pod("a", pod("other", "a"))
    core.create_namespaced_pod("b", pod("bound", "b", schedulerName="toposched", nodeName="n1"))
    apiserver.set_phase("b", "bound", "Running")

    def pods(**kw: Any) -> list[str]:
        return sorted(p.metadata.name for p in core.list_pod_for_all_namespaces(**kw).items)

    assert pods() == ["bound", "other", "unbound"]
    assert pods(field_selector="spec.schedulerName=toposched,spec.nodeName=") == ["unbound"]
    assert pods(field_selector="spec.nodeName!=") == ["bound"]
    assert pods(field_selector="status.phase=Running") == ["bound"]
    assert pods(field_selector="metadata.namespace=a,status.phase!=Running") == ["other", "unbound"]
    assert [p.metadata.name for p in core.list_namespaced_pod("b").items] == ["bound"]
    with pytest.raises(ApiException) as info:
        core.list_namespaced_pod("a", field_selector="spec.priority=0")
    assert (
        info.value.status == 400 and "field label not supported" in status_of(info.value)["message"]
    )
    listed = core.list_namespaced_pod("a")
    assert listed.metadata.resource_version == str(apiserver.resource_version)


def test_pagination_is_a_consistent_snapshot_until_compacted(
    apiserver: ApiServer, core: Any
) -> None:
    for i in range(5):
        core.create_namespaced_pod("default", pod(f"p{i}"))
    first = core.list_namespaced_pod("default", limit=2)
    assert [p.metadata.name for p in first.items] == ["p0", "p1"]
    assert first.metadata.remaining_item_count == 3
    core.delete_namespaced_pod("p3", "default")  # the snapshot still has it
    rest = core.list_namespaced_pod("default", limit=10, _continue=first.metadata._continue)
    assert [p.metadata.name for p in rest.items] == ["p2", "p3", "p4"]
    assert rest.metadata.resource_version == first.metadata.resource_version
    again = core.list_namespaced_pod("default", limit=2)
    core.create_namespaced_pod("default", pod("p9"))
    apiserver.compact()  # the token's version is now older than the compaction
    with pytest.raises(ApiException) as info:
        core.list_namespaced_pod("default", limit=2, _continue=again.metadata._continue)
    assert info.value.status == 410 and status_of(info.value)["reason"] == "Expired"


def test_patch_update_and_optimistic_concurrency(apiserver: ApiServer, core: Any) -> None:
    core.create_namespaced_pod("default", pod("p", labels={"a": "1", "b": "2"}))
    # a dict body goes as a strategic merge patch: labels merge, null deletes
    patched = core.patch_namespaced_pod(
        "p", "default", {"metadata": {"labels": {"a": "9", "b": None}}}
    )
    assert patched.metadata.labels == {"a": "9"}
    assert apiserver.request_log[-1].content_type == "application/strategic-merge-patch+json"
    # a list body goes as a JSON patch
    ops = [{"op": "add", "path": "/metadata/annotations", "value": {"note": "x"}}]
    assert core.patch_namespaced_pod("p", "default", ops).metadata.annotations == {"note": "x"}
    assert apiserver.request_log[-1].content_type == "application/json-patch+json"
    merged = core.patch_namespaced_pod(
        "p",
        "default",
        {"metadata": {"labels": {"c": "3"}}},
        _content_type="application/merge-patch+json",
    )
    assert merged.metadata.labels == {"a": "9", "c": "3"}
    # a strategic merge patch merges containers by name
    smp = {"spec": {"containers": [{"name": "main", "image": "pytorch:3"}]}}
    assert core.patch_namespaced_pod("p", "default", smp).spec.containers[0].resources.limits
    # a no-op patch writes nothing
    rv = apiserver.resource_version
    core.patch_namespaced_pod("p", "default", {"metadata": {"labels": {"c": "3"}}})
    assert apiserver.resource_version == rv

    stale = core.read_namespaced_pod("p", "default")
    fresh = core.read_namespaced_pod("p", "default")
    fresh.metadata.labels["d"] = "4"
    core.replace_namespaced_pod("p", "default", fresh)
    stale.metadata.labels["e"] = "5"
    with pytest.raises(ApiException) as info:
        core.replace_namespaced_pod("p", "default", stale)
    answer = status_of(info.value)
    assert (info.value.status, answer["reason"]) == (409, "Conflict")
    assert answer["message"].startswith('Operation cannot be fulfilled on pods "p"')
    assert answer["details"] == {"name": "p", "kind": "pods"}
    with pytest.raises(ApiException) as info:  # a patch that names a stale version conflicts too
        core.patch_namespaced_pod(
            "p", "default", {"metadata": {"resourceVersion": stale.metadata.resource_version}}
        )
    assert info.value.status == 409
    with pytest.raises(ApiException) as info:
        core.patch_namespaced_pod("nope", "default", {"metadata": {"labels": {"a": "1"}}})
    assert info.value.status == 404 and status_of(info.value)["message"] == 'pods "nope" not found'


def test_a_pod_spec_cannot_change_and_status_goes_through_its_subresource(
    apiserver: ApiServer, core: Any
) -> None:
    core.create_namespaced_pod("default", pod("p"))
    with pytest.raises(ApiException) as info:  # only pods/binding sets the node
        core.patch_namespaced_pod("p", "default", {"spec": {"nodeName": "n1"}})
    assert (
        info.value.status == 422
        and "pod updates may not change" in status_of(info.value)["message"]
    )
    ignored = core.patch_namespaced_pod("p", "default", {"status": {"phase": "Running"}})
    assert ignored.status.phase == "Pending"  # the main resource leaves status alone
    current = core.read_namespaced_pod_status("p", "default")
    current.status.conditions = [
        client.V1PodCondition(
            type="PodScheduled", status="False", reason="Unschedulable", message="no GPUs"
        )
    ]
    current.spec.node_name = "n1"  # ignored by pods/status
    updated = core.replace_namespaced_pod_status("p", "default", current)
    assert updated.status.conditions[0].reason == "Unschedulable" and updated.spec.node_name is None
    assert apiserver.set_phase("default", "p", "Running")["status"]["phase"] == "Running"


def test_binding_answers_a_status_and_the_generated_method_trips_on_it(
    apiserver: ApiServer, core: Any
) -> None:
    """The trap the driver avoids: create_namespaced_pod_binding binds, then fails to read the
    answer (a Status, not a Binding) as a V1Binding; `_preload_content=False` reads it raw."""
    core.create_namespaced_pod("default", pod("p1"))
    core.create_namespaced_pod("default", pod("p2"))
    uid = core.read_namespaced_pod("p1", "default").metadata.uid
    body = client.V1Binding(
        metadata=client.V1ObjectMeta(name="p1", uid=uid, annotations={"toposched.io/gpus": "0,1"}),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name="n1"),
    )
    with pytest.raises(ValueError, match="target"):  # pydantic's ValidationError is a ValueError
        core.create_namespaced_pod_binding("p1", "default", body)
    bound = apiserver.get("pods", "p1")
    assert bound is not None and bound["spec"]["nodeName"] == "n1"  # yet the server did bind
    assert bound["metadata"]["annotations"] == {"toposched.io/gpus": "0,1"}
    assert [(c["type"], c["status"]) for c in bound["status"]["conditions"]] == [
        ("PodScheduled", "True")
    ]

    raw = core.create_namespaced_pod_binding(
        "p2",
        "default",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "p2"},
            "target": {"kind": "Node", "name": "n2"},
        },
        _preload_content=False,
    )
    assert raw.status == 201
    assert json.loads(raw.data) == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "code": 201,
    }

    with pytest.raises(ApiException) as info:  # already bound
        core.create_namespaced_pod_binding("p1", "default", body, _preload_content=False)
    answer = status_of(info.value)
    assert (info.value.status, answer["reason"]) == (409, "Conflict")
    assert answer["message"] == (
        'Operation cannot be fulfilled on pods/binding "p1": '
        'pod p1 is already assigned to node "n1"'
    )
    missing = {"metadata": {"name": "ghost"}, "target": {"kind": "Node", "name": "n1"}}
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_binding("ghost", "default", missing, _preload_content=False)
    assert info.value.status == 404
    core.create_namespaced_pod("default", pod("p3"))
    stale = {
        "metadata": {"name": "p3", "uid": "not-its-uid"},
        "target": {"kind": "Node", "name": "n1"},
    }
    with pytest.raises(ApiException) as info:  # the Binding's uid is a precondition
        core.create_namespaced_pod_binding("p3", "default", stale, _preload_content=False)
    assert info.value.status == 409 and "Precondition failed" in status_of(info.value)["message"]


def test_a_binding_is_one_modified_event_and_leaves_an_unbound_watch(
    apiserver: ApiServer, core: Any
) -> None:
    core.create_namespaced_pod("default", pod("p", schedulerName="toposched"))
    rv = core.list_namespaced_pod("default").metadata.resource_version
    everything = Collector(
        core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=30
    )
    unbound = Collector(
        core.list_pod_for_all_namespaces,
        field_selector="spec.schedulerName=toposched,spec.nodeName=",
        timeout_seconds=30,
    )
    apiserver.wait_until(lambda: apiserver.watch_count("pods") == 2 and unbound.events)
    body = {
        "metadata": {"name": "p", "annotations": {"a": "b"}},
        "target": {"kind": "Node", "name": "n1"},
    }
    core.create_namespaced_pod_binding("p", "default", body, _preload_content=False)
    apiserver.wait_until(lambda: everything.events and len(unbound.events) == 2)
    assert apiserver.drop_watches() == 2
    everything.join()
    unbound.join()
    assert everything.types() == [("MODIFIED", "p")]
    after = everything.events[0]["object"]
    assert after["spec"]["nodeName"] == "n1" and after["metadata"]["annotations"] == {"a": "b"}
    assert unbound.types() == [("ADDED", "p"), ("DELETED", "p")]  # it stopped matching


def test_watch_resumes_from_a_version_and_410_after_compaction(
    apiserver: ApiServer, core: Any
) -> None:
    core.create_namespaced_pod("default", pod("a"))
    rv = core.list_namespaced_pod("default").metadata.resource_version
    core.create_namespaced_pod("default", pod("b"))
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"x": "y"}}})
    core.delete_namespaced_pod("b", "default")
    seen = Collector(core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=30)
    apiserver.wait_until(lambda: len(seen.events) == 3)
    apiserver.drop_watches()
    seen.join()
    assert seen.types() == [("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]
    versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in seen.events]
    assert versions == sorted(versions) and versions[-1] == apiserver.resource_version

    apiserver.compact()
    with pytest.raises(ApiException) as info:  # with timeout_seconds: no retry
        for _ in watch.Watch().stream(
            core.list_namespaced_pod, "default", resource_version=rv, timeout_seconds=5
        ):
            pass
    assert info.value.status == 410 and info.value.reason.startswith(
        "Expired: too old resource version"
    )
    before = len(apiserver.request_log)
    with pytest.raises(ApiException) as info:  # without: one silent retry from the same version
        for _ in watch.Watch().stream(core.list_namespaced_pod, "default", resource_version=rv):
            pass
    assert info.value.status == 410
    retries = [r for r in apiserver.request_log[before:] if r.query.get("watch")]
    assert [r.query["resourceVersion"] for r in retries] == [rv, rv]

    # on the wire: 200, then one ERROR event whose object is a 410 Expired Status
    http = urllib3.PoolManager()
    answer = http.request(
        "GET", f"{apiserver.url}/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}"
    )
    assert answer.status == 200
    lines = answer.data.decode().splitlines()
    assert len(lines) == 1
    event = json.loads(lines[0])
    assert event["type"] == "ERROR"
    assert {k: event["object"][k] for k in ("kind", "status", "reason", "code")} == {
        "kind": "Status",
        "status": "Failure",
        "reason": "Expired",
        "code": 410,
    }
    # the current version still watches
    now = core.list_namespaced_pod("default").metadata.resource_version
    fresh = Collector(core.list_namespaced_pod, "default", resource_version=now, timeout_seconds=30)
    apiserver.wait_until(lambda: apiserver.watch_count("pods") == 1)
    core.create_namespaced_pod("default", pod("c"))
    apiserver.wait_until(lambda: fresh.events)
    apiserver.drop_watches()
    fresh.join()
    assert fresh.types() == [("ADDED", "c")] and fresh.error is None


def test_watch_from_zero_lists_first_and_bookmarks_carry_only_a_version(
    apiserver: ApiServer, core: Any
) -> None:
    core.create_namespaced_pod("default", pod("a"))
    core.create_namespaced_pod("default", pod("b"))
    seen = Collector(
        core.list_namespaced_pod,
        "default",
        resource_version="0",
        allow_watch_bookmarks=True,
        timeout_seconds=1,
    )
    apiserver.wait_until(lambda: len(seen.events) == 2)
    assert apiserver.bookmark() == 1
    seen.join()  # the timeout ends it, after a last bookmark
    assert seen.types() == [("ADDED", "a"), ("ADDED", "b"), ("BOOKMARK", ""), ("BOOKMARK", "")]
    bookmark = seen.events[-1]["object"]
    assert bookmark == {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {"resourceVersion": str(apiserver.resource_version)},
    }


def test_eviction_honours_a_disruption_budget(apiserver: ApiServer, core: Any) -> None:
    policy = client.PolicyV1Api(core.api_client)
    for name in ("w0", "w1", "solo"):
        labels = {"app": "train"} if name != "solo" else {}
        core.create_namespaced_pod("default", pod(name, labels=labels, nodeName="n1"))
        apiserver.set_phase("default", name, "Running")
    policy.create_namespaced_pod_disruption_budget(
        "default",
        {
            "metadata": {"name": "train"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "train"}}},
        },
    )
    pdb = policy.read_namespaced_pod_disruption_budget("train", "default")
    assert (
        pdb.status.current_healthy,
        pdb.status.desired_healthy,
        pdb.status.disruptions_allowed,
    ) == (2, 2, 0)

    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": "w0"}}
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_eviction("w0", "default", eviction)
    answer = status_of(info.value)
    assert (info.value.status, answer["reason"]) == (429, "TooManyRequests")
    assert answer["details"]["causes"][0]["reason"] == "DisruptionBudget"
    assert apiserver.get("pods", "w0") is not None

    # no budget: the generated method reads the Status answer as a V1Eviction (kind "Status")
    evicted = core.create_namespaced_pod_eviction(
        "solo", "default", {**eviction, "metadata": {"name": "solo"}}
    )
    assert evicted.kind == "Status"
    assert apiserver.get("pods", "solo") is None

    policy.patch_namespaced_pod_disruption_budget("train", "default", {"spec": {"minAvailable": 1}})
    assert (
        policy.read_namespaced_pod_disruption_budget("train", "default").status.disruptions_allowed
        == 1
    )
    answer = core.create_namespaced_pod_eviction("w0", "default", eviction, _preload_content=False)
    assert answer.status == 201 and json.loads(answer.data)["status"] == "Success"
    assert apiserver.get("pods", "w0") is None
    assert (
        policy.read_namespaced_pod_disruption_budget("train", "default").status.disruptions_allowed
        == 0
    )
    with pytest.raises(ApiException) as info:
        core.create_namespaced_pod_eviction("w0", "default", eviction)
    assert info.value.status == 404


def test_events_are_found_by_their_involved_object(core: Any) -> None:
    created = core.create_namespaced_pod("default", pod("p"))
    core.create_namespaced_pod("default", pod("q"))
    for involved, reason in ((created, "FailedScheduling"), (None, "Other")):
        core.create_namespaced_event(
            "default",
            client.CoreV1Event(
                metadata=client.V1ObjectMeta(generate_name="p."),
                involved_object=client.V1ObjectReference(
                    api_version="v1",
                    kind="Pod",
                    name="p" if involved else "q",
                    namespace="default",
                    uid=involved.metadata.uid if involved else None,
                ),
                reason=reason,
                message="0/1 nodes are available",
                type="Warning",
                source=client.V1EventSource(component="toposched"),
            ),
        )
    selector = (
        "involvedObject.name=p,involvedObject.namespace=default,"
        f"involvedObject.uid={created.metadata.uid}"
    )
    found = core.list_namespaced_event("default", field_selector=selector).items
    assert [e.reason for e in found] == ["FailedScheduling"]
    assert [
        e.reason
        for e in core.list_namespaced_event(
            "default", field_selector="involvedObject.kind=Pod,reason=Other"
        ).items
    ] == ["Other"]
    with pytest.raises(ApiException) as info:  # an event lives in its object's namespace
        core.create_namespaced_event(
            "default",
            {
                "metadata": {"name": "e"},
                "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"},
            },
        )
    assert info.value.status == 422


def test_leases_are_plain_optimistic_objects(core: Any) -> None:
    leases = client.CoordinationV1Api(core.api_client)
    body = {
        "metadata": {"name": "toposched"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
    }
    created = leases.create_namespaced_lease("toposched-system", body)
    with pytest.raises(ApiException) as info:
        leases.create_namespaced_lease("toposched-system", body)
    assert info.value.status == 409 and status_of(info.value)["reason"] == "AlreadyExists"
    mine = leases.read_namespaced_lease("toposched", "toposched-system")
    mine.spec.holder_identity = "b"
    leases.replace_namespaced_lease("toposched", "toposched-system", mine)
    created.spec.holder_identity = "c"  # a replica that read before b took it
    with pytest.raises(ApiException) as info:
        leases.replace_namespaced_lease("toposched", "toposched-system", created)
    assert info.value.status == 409
    assert status_of(info.value)["message"].startswith(
        'Operation cannot be fulfilled on leases.coordination.k8s.io "toposched"'
    )
    assert leases.read_namespaced_lease("toposched", "toposched-system").spec.holder_identity == "b"


def test_podgroups_are_a_custom_resource(apiserver: ApiServer, custom: Any) -> None:
    args = (GROUP, VERSION, "team-a", "podgroups")
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": "gang"},
        "spec": {"minMember": 4, "unknownField": 1},
        "status": {"phase": "Running"},
    }
    created = custom.create_namespaced_custom_object(*args, body)
    assert created["spec"] == {"minMember": 4}  # pruned to the CRD's schema
    assert "status" not in created and created["metadata"]["generation"] == 1
    listed = custom.list_namespaced_custom_object(*args)
    assert listed["kind"] == "PodGroupList" and listed["items"][0]["kind"] == "PodGroup"
    patched = custom.patch_namespaced_custom_object(*args, "gang", {"spec": {"minMember": 2}})
    assert patched["spec"]["minMember"] == 2 and patched["metadata"]["generation"] == 2
    status = custom.patch_namespaced_custom_object_status(
        *args, "gang", {"status": {"phase": "Scheduled", "running": 2}, "spec": {"minMember": 9}}
    )
    assert (
        status["status"] == {"phase": "Scheduled", "running": 2}
        and status["spec"]["minMember"] == 2
    )
    assert status["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as info:  # custom resources take no strategic merge patch
        custom.patch_namespaced_custom_object(
            *args,
            "gang",
            {"spec": {"minMember": 3}},
            _content_type="application/strategic-merge-patch+json",
        )
    assert info.value.status == 415
    without_version = {**patched, "metadata": {"name": "gang"}}
    with pytest.raises(ApiException) as info:  # custom resources need a resourceVersion to update
        custom.replace_namespaced_custom_object(*args, "gang", without_version)
    assert info.value.status == 422
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(
            *args, {**body, "metadata": {"name": "bad"}, "spec": {"minMember": "x"}}
        )
    assert (
        info.value.status == 422 and "must be of type integer" in status_of(info.value)["message"]
    )
    assert apiserver.objects("podgroups", "team-a")[0]["status"]["running"] == 2


def test_volcano_podgroups_are_a_custom_resource_of_their_own(
    apiserver: ApiServer, custom: Any
) -> None:
    """Volcano's PodGroup beside scheduler-plugins' of the same name: two objects, each pruned
    to its own CRD's schema, each patched at its own path."""
    args = (VOLCANO, VOLCANO_VERSION, "team-a", "podgroups")
    body = {
        "apiVersion": f"{VOLCANO}/{VOLCANO_VERSION}",
        "kind": "PodGroup",
        "metadata": {"name": "gang"},
        "spec": {
            "minMember": 4,
            "queue": "default",
            "priorityClassName": "high",
            "minResources": {"nvidia.com/gpu": "4"},
            "scheduleTimeoutSeconds": 60,  # scheduler-plugins' field, not Volcano's
        },
    }
    created = custom.create_namespaced_custom_object(*args, body)
    pruned = {k: v for k, v in body["spec"].items() if k != "scheduleTimeoutSeconds"}
    assert created["spec"] == pruned
    theirs = {**body, "apiVersion": f"{GROUP}/{VERSION}", "spec": {"minMember": 2}}
    custom.create_namespaced_custom_object(GROUP, VERSION, "team-a", "podgroups", theirs)
    listed = custom.list_cluster_custom_object(VOLCANO, VOLCANO_VERSION, "podgroups")
    assert [i["spec"]["minMember"] for i in listed["items"]] == [4]
    assert listed["items"][0]["apiVersion"] == f"{VOLCANO}/{VOLCANO_VERSION}"
    patched = custom.patch_namespaced_custom_object(
        *args, "gang", {"metadata": {"annotations": {"toposched.io/placement": "{}"}}}
    )
    assert patched["metadata"]["annotations"] == {"toposched.io/placement": "{}"}
    assert custom.get_namespaced_custom_object(*args, "gang")["metadata"]["annotations"]
    other = apiserver.get("podgroups.scheduling.x-k8s.io", "gang", "team-a") or {}
    assert other["spec"] == {"minMember": 2} and "annotations" not in other["metadata"]
    status = custom.patch_namespaced_custom_object_status(
        *args, "gang", {"status": {"phase": "Inqueue", "conditions": [], "running": 0}}
    )
    assert status["status"]["phase"] == "Inqueue" and status["spec"]["minMember"] == 4
    with pytest.raises(ApiException) as info:
        custom.create_namespaced_custom_object(
            *args, {**body, "metadata": {"name": "bad"}, "spec": {"queue": 7}}
        )
    assert info.value.status == 422 and "must be of type string" in status_of(info.value)["message"]
    collector = Collector(
        custom.list_namespaced_custom_object, *args, timeout_seconds=1, resource_version="0"
    )
    collector.join()
    assert collector.types() == [("ADDED", "gang")]


def test_a_crd_left_out_is_not_served(tmp_path: Path) -> None:
    """`ApiServer(crds=...)`: a cluster with Volcano's CRD alone. Scheduler-plugins' group is
    absent from discovery and its paths answer 404, for the client as for kubectl."""
    with ApiServer(crds=(f"podgroups.{VOLCANO}",)) as server:
        configuration = client.Configuration()
        config.load_kube_config(
            config_file=str(server.kubeconfig(tmp_path / "kubeconfig")),
            client_configuration=configuration,
        )
        with client.ApiClient(configuration) as api_client:
            groups = {g.name for g in client.ApisApi(api_client).get_api_versions().groups}
            assert VOLCANO in groups and GROUP not in groups
            custom = client.CustomObjectsApi(api_client)
            with pytest.raises(ApiException) as info:
                custom.list_namespaced_custom_object(GROUP, VERSION, "team-a", "podgroups")
            assert info.value.status == 404
            assert (
                custom.list_namespaced_custom_object(
                    VOLCANO, VOLCANO_VERSION, "team-a", "podgroups"
                )["items"]
                == []
            )
        assert server.objects("podgroups") == []  # the name means Volcano's here
        with pytest.raises(KeyError):
            server.create({"apiVersion": f"{GROUP}/{VERSION}", "kind": "PodGroup"})
        with pytest.raises(ValueError, match="no CRD"):
            ApiServer(crds=("widgets.example.com",))


def test_errors_are_statuses(apiserver: ApiServer) -> None:
    http = urllib3.PoolManager()

    def call(
        method: str, path: str, body: bytes | None = None, ctype: str = "application/json"
    ) -> tuple[int, JSON]:
        r = http.request(method, apiserver.url + path, body=body, headers={"Content-Type": ctype})
        return r.status, json.loads(r.data)

    code, answer = call("GET", "/api/v1/widgets")
    assert (code, answer["reason"], answer["kind"]) == (404, "NotFound", "Status")
    assert call("GET", "/apis/example.com/v1")[0] == 404
    assert call("PUT", "/api/v1/namespaces/default/pods")[1]["reason"] == "MethodNotAllowed"
    assert call("GET", "/api/v1/namespaces/default/pods/p/binding")[0] == 405
    code, answer = call("POST", "/api/v1/namespaces/default/pods", b"{not json")
    assert (code, answer["reason"]) == (400, "BadRequest")
    code, answer = call("POST", "/api/v1/namespaces/default/configmaps", b'{"data": {}}')
    assert (code, answer["reason"]) == (422, "Invalid")
    code, answer = call("GET", "/api/v1/namespaces/default/pods/nope")
    assert answer == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "nope" not found',
        "reason": "NotFound",
        "details": {"name": "nope", "kind": "pods"},
        "code": 404,
    }
    r = http.request(
        "GET",
        apiserver.url + "/api/v1/nodes",
        headers={"Accept": "application/vnd.kubernetes.protobuf"},
    )
    assert r.status == 406
    apiserver.inject_error("POST", r"/binding$", 500)
    code, answer = call("POST", "/api/v1/namespaces/default/pods/p/binding", b"{}")
    assert (code, answer["reason"]) == (500, "InternalError")
    assert (
        call(
            "POST",
            "/api/v1/namespaces/default/pods/p/binding",
            b'{"metadata":{"name":"p"},"target":{"name":"n"}}',
        )[0]
        == 404
    )
    assert ("POST", "/api/v1/namespaces/default/pods/p/binding") in apiserver.requests


def test_concurrent_writers_and_open_watches_agree(apiserver: ApiServer) -> None:
    """Watches with selectors, held open while threads write: replaying each stream gives the
    server's final state for that selector, in strictly increasing resourceVersions."""
    http = urllib3.PoolManager(maxsize=16)
    url = apiserver.url
    start = apiserver.resource_version
    selectors = [("", ""), ("w=0", ""), ("", "spec.nodeName=")]  # (label, field)
    streams: dict[tuple[str, str], list[JSON]] = {s: [] for s in selectors}

    def watch_all(selector: tuple[str, str]) -> None:
        query = {"watch": "1", "resourceVersion": str(start), "timeoutSeconds": "30"}
        query.update(labelSelector=selector[0], fieldSelector=selector[1])
        r = http.request("GET", f"{url}/api/v1/pods", fields=query, preload_content=False)
        buffer = b""
        for chunk in r.stream(4096):
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                streams[selector].append(json.loads(line))
        r.release_conn()

    def write(worker: int) -> None:
        base = f"{url}/api/v1/namespaces/ns{worker % 2}/pods"
        for i in range(15):
            name = f"w{worker}-{i}"
            body = pod(name, f"ns{worker % 2}", labels={"w": str(worker % 2)})
            assert http.request("POST", base, body=json.dumps(body)).status == 201
            patch = {"metadata": {"labels": {"w": str((worker + i) % 2)}}}
            headers = {"Content-Type": "application/merge-patch+json"}
            assert (
                http.request(
                    "PATCH", f"{base}/{name}", body=json.dumps(patch), headers=headers
                ).status
                == 200
            )
            if i % 3 == 0:
                binding = {"metadata": {"name": name}, "target": {"kind": "Node", "name": "n1"}}
                assert (
                    http.request("POST", f"{base}/{name}/binding", body=json.dumps(binding)).status
                    == 201
                )
            if i % 4 == 0:
                assert http.request("DELETE", f"{base}/{name}").status == 200

    watchers = [threading.Thread(target=watch_all, args=(s,)) for s in selectors]
    for t in watchers:
        t.start()
    apiserver.wait_until(lambda: apiserver.watch_count("pods") == len(selectors))
    writers = [threading.Thread(target=write, args=(w,)) for w in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join(30)
    apiserver.drop_watches()
    for t in watchers:
        t.join(10)
    for selector, events in streams.items():
        state: dict[tuple[str, str], JSON] = {}
        versions = [int(e["object"]["metadata"]["resourceVersion"]) for e in events]
        assert events and versions == sorted(set(versions)), selector
        for e in events:
            key = (e["object"]["metadata"]["namespace"], e["object"]["metadata"]["name"])
            if e["type"] == "DELETED":
                del state[key]
            else:
                state[key] = e["object"]
        label, fields = selector
        expected = apiserver.objects("pods", label_selector=label, field_selector=fields)
        assert {(o["metadata"]["namespace"], o["metadata"]["name"]): o for o in expected} == state


def test_graceful_pod_deletion_is_an_option() -> None:
    with ApiServer(graceful_pod_deletion=True) as api:
        api.create(pod("bound", nodeName="n1"))
        api.create(pod("pending"))
        api.set_phase("default", "bound", "Running")
        http = urllib3.PoolManager()
        for name in ("bound", "pending"):
            assert (
                http.request("DELETE", f"{api.url}/api/v1/namespaces/default/pods/{name}").status
                == 200
            )
        terminating = api.get("pods", "bound")
        assert (
            terminating is not None and terminating["metadata"]["deletionGracePeriodSeconds"] == 30
        )
        assert api.get("pods", "pending") is None  # never bound: gone at once
        assert api.delete("pods", "bound") is not None and api.get("pods", "bound") is None


# =========================================================================== the real kubectl

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"

MANIFESTS = """\
apiVersion: v1
kind: Node
metadata:
  name: dgx0
  labels: {toposched.io/gpu-schedule: topology}
status:
  capacity: {nvidia.com/gpu: "8"}
  allocatable: {nvidia.com/gpu: "8"}
  conditions: [{type: Ready, status: "True"}]
  nodeInfo: {kubeletVersion: v1.32.4}
---
apiVersion: v1
kind: Pod
metadata:
  name: trainer-0
  labels: {scheduling.x-k8s.io/pod-group: gang}
spec:
  schedulerName: toposched
  containers:
  - name: main
    image: pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime
    resources:
      limits: {nvidia.com/gpu: 4}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: gang
spec:
  minMember: 2
"""


Kubectl = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def kubectl(kubeconfig: Path, tmp_path: Path) -> Kubectl:
    return kubectl_for(kubeconfig, tmp_path)


def kubectl_for(kubeconfig: Path, tmp_path: Path) -> Kubectl:
    """`kubectl` with this kubeconfig; the test is skipped where kubectl is not installed."""
    if not Path(KUBECTL).exists():
        pytest.skip(
            f"kubectl is not installed at {KUBECTL}: the kubectl checks of the emulator need it"
        )

    def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        command = [
            KUBECTL,
            "--kubeconfig",
            str(kubeconfig),
            "--cache-dir",
            str(tmp_path / "cache"),
            *args,
        ]
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=30,
            env={"HOME": str(tmp_path), "PATH": "/usr/bin:/bin"},
        )
        if ok:
            assert done.returncode == 0, f"{' '.join(args)}: {done.stderr}"
        return done

    return run


def test_kubectl_applies_gets_labels_annotates_and_deletes(
    apiserver: ApiServer, kubectl: Kubectl, tmp_path: Path
) -> None:
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(MANIFESTS)
    applied = kubectl("apply", "-f", str(manifests))
    assert applied.stdout.split("\n")[:3] == [
        "node/dgx0 created",
        "pod/trainer-0 created",
        "podgroup.scheduling.x-k8s.io/gang created",
    ]
    assert "unchanged" in kubectl("apply", "-f", str(manifests)).stdout
    # kubectl leaves validation to the server (OpenAPI v3 declares fieldValidation)
    typo = tmp_path / "typo.yaml"
    typo.write_text(
        MANIFESTS.split("---")[2].replace("minMember: 2", "minMember: 2\n  minMembers: 3")
    )
    refused = kubectl("apply", "-f", str(typo), ok=False)
    assert (
        refused.returncode == 1
        and 'strict decoding error: unknown field "spec.minMembers"' in refused.stderr
    )
    assert any(r.query.get("fieldValidation") == "Strict" for r in apiserver.request_log)
    node_status = apiserver.get("nodes", "dgx0")
    assert node_status is not None and node_status["status"]["allocatable"] == {
        "nvidia.com/gpu": "8"
    }

    pods = json.loads(kubectl("get", "pods", "-o", "json").stdout)
    assert [p["metadata"]["name"] for p in pods["items"]] == ["trainer-0"]
    assert pods["items"][0]["spec"]["containers"][0]["resources"]["requests"] == {
        "nvidia.com/gpu": "4"
    }
    table = kubectl("get", "nodes").stdout.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert table[1].split()[:3] == ["dgx0", "Ready", "<none>"] and table[1].split()[-1] == "v1.32.4"
    wide = kubectl("get", "pods", "-o", "wide").stdout.splitlines()
    assert wide[1].split()[:3] == ["trainer-0", "0/1", "Pending"] and "<none>" in wide[1]
    groups = kubectl("get", "podgroups").stdout.splitlines()
    assert groups[0].split()[:3] == ["NAME", "PHASE", "MINMEMBER"] and groups[1].split()[:2] == [
        "gang",
        "2",
    ]
    assert (
        kubectl("get", "pg", "gang", "-o", "name").stdout.strip()
        == "podgroup.scheduling.x-k8s.io/gang"
    )

    kubectl("label", "node", "dgx0", "rack=r1")
    assert (apiserver.get("nodes", "dgx0") or {})["metadata"]["labels"] == {
        "toposched.io/gpu-schedule": "topology",
        "rack": "r1",
    }
    kubectl("annotate", "pod", "trainer-0", "toposched.io/note=hello")
    assert (apiserver.get("pods", "trainer-0") or {})["metadata"]["annotations"][
        "toposched.io/note"
    ] == "hello"
    assert (
        "trainer-0"
        in kubectl("get", "pods", "-l", "scheduling.x-k8s.io/pod-group=gang", "-o", "name").stdout
    )
    assert (
        "No resources found"
        in kubectl("get", "pods", "--field-selector", "spec.nodeName=dgx0").stderr
    )

    kubectl("delete", "pod", "trainer-0")
    assert apiserver.get("pods", "trainer-0") is None
    gone = kubectl("get", "pod", "trainer-0", ok=False)
    assert gone.returncode == 1 and 'pods "trainer-0" not found' in gone.stderr
    assert not apiserver.server_errors


VOLCANO_MANIFEST = """\
apiVersion: scheduling.volcano.sh/v1beta1
kind: PodGroup
metadata:
  name: gang
spec:
  minMember: 4
  queue: research
"""


def test_kubectl_tells_volcano_podgroups_from_scheduler_plugins_ones(
    apiserver: ApiServer, kubectl: Kubectl, tmp_path: Path
) -> None:
    """Both CRDs, one PodGroup named `gang` of each: `podgroups` and `pg` stay
    scheduler-plugins', Volcano's answers to its full name and its own short name."""
    manifests = tmp_path / "manifests.yaml"
    manifests.write_text(MANIFESTS + "---\n" + VOLCANO_MANIFEST)
    applied = kubectl("apply", "-f", str(manifests)).stdout.splitlines()
    assert applied[-2:] == [
        "podgroup.scheduling.x-k8s.io/gang created",
        "podgroup.scheduling.volcano.sh/gang created",
    ]
    table = kubectl("get", "podgroups.scheduling.volcano.sh").stdout.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "MINMEMBER", "RUNNINGS", "AGE"]
    assert table[1].split()[:2] == ["gang", "4"]
    wide = kubectl("get", "podgroups.scheduling.volcano.sh", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-1] == "QUEUE" and wide[1].split()[-1] == "research"
    assert (
        kubectl("get", "podgroup-v1beta1", "gang", "-o", "name").stdout.strip()
        == "podgroup.scheduling.volcano.sh/gang"
    )
    assert (
        kubectl("get", "pg", "gang", "-o", "name").stdout.strip()
        == "podgroup.scheduling.x-k8s.io/gang"
    )
    kubectl("annotate", "podgroups.scheduling.volcano.sh", "gang", "toposched.io/placement={}")
    volcano = apiserver.get("podgroups.scheduling.volcano.sh", "gang") or {}
    plugins = apiserver.get("podgroups.scheduling.x-k8s.io", "gang") or {}
    assert volcano["metadata"]["annotations"]["toposched.io/placement"] == "{}"
    assert "toposched.io/placement" not in (plugins["metadata"].get("annotations") or {})
    got = json.loads(kubectl("get", "podgroups.scheduling.volcano.sh", "gang", "-o", "json").stdout)
    assert got["spec"] == {"minMember": 4, "queue": "research"}
    assert not apiserver.server_errors


def test_kubectl_on_a_cluster_with_only_volcanos_crd(tmp_path: Path) -> None:
    with ApiServer(crds=(f"podgroups.{VOLCANO}",)) as server:
        kubectl = kubectl_for(server.kubeconfig(tmp_path / "kubeconfig"), tmp_path)
        manifest = tmp_path / "volcano.yaml"
        manifest.write_text(VOLCANO_MANIFEST)
        kubectl("apply", "-f", str(manifest))
        assert (
            kubectl("get", "podgroups", "-o", "name").stdout.strip()
            == "podgroup.scheduling.volcano.sh/gang"
        )
        missing = kubectl("get", "podgroups.scheduling.x-k8s.io", ok=False)
        assert missing.returncode == 1
        assert "doesn't have a resource type" in missing.stderr
        assert not server.server_errors


def test_kubectl_describe_shows_the_events_of_a_pod(apiserver: ApiServer, kubectl: Kubectl) -> None:
    created = apiserver.create(pod("trainer-0", schedulerName="toposched"))
    other = apiserver.create(pod("trainer-1"))
    for target, reason, message in (
        (created, "FailedScheduling", "0/4 nodes: the gang gang needs 8 GPUs on one NVLink ring"),
        (other, "Elsewhere", "about another pod"),
    ):
        apiserver.create(
            {
                "apiVersion": "v1",
                "kind": "Event",
                "metadata": {
                    "generateName": f"{target['metadata']['name']}.",
                    "namespace": "default",
                },
                "involvedObject": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": target["metadata"]["name"],
                    "namespace": "default",
                    "uid": target["metadata"]["uid"],
                },
                "reason": reason,
                "message": message,
                "type": "Warning",
                "source": {"component": "toposched"},
                "firstTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "lastTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "count": 1,
            }
        )
    described = kubectl("describe", "pod", "trainer-0").stdout
    assert "Status:           Pending" in described or "Status:" in described
    events = described.split("Events:", 1)[1]
    assert "FailedScheduling" in events and "toposched" in events
    assert "needs 8 GPUs on one NVLink ring" in events
    assert "Elsewhere" not in events
    selectors = [
        r.query.get("fieldSelector", "")
        for r in apiserver.request_log
        if r.path.endswith("/events")
    ]
    assert any("involvedObject.uid=" + created["metadata"]["uid"] in s for s in selectors)
    listed = kubectl("get", "events").stdout
    assert "pod/trainer-0" in listed and "FailedScheduling" in listed
