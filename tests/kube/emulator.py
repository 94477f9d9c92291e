"""An in-process Kubernetes API server emulator for the scheduler's tests.

No kube-apiserver, k3s, kind or envtest runs on the test machines, so the Kubernetes driver is
tested against this: a stdlib HTTP server on 127.0.0.1 speaking the Kubernetes REST API in
JSON, with the conventions a scheduler depends on kept as the real server keeps them, and
checked against the real `kubectl` and the official Python client (tests/kube/test_emulator.py)
so that it cannot drift from what real clients accept.

    with ApiServer() as api:
        api.kubeconfig(tmp_path / "kubeconfig")   # plain http, any token
        api.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, ...})
        ...                                        # run the client under test
        api.objects("pods", "default")             # copies; under api.lock

The Python-side handle (every method takes `api.lock`, an RLock, and returns copies; the
writes go through the same code as HTTP requests, so they are validated, defaulted and seen
by watches; errors raise `ApiError` with `.code`, `.reason`, `.status`):

    ApiServer(*, graceful_pod_deletion=False, watch_timeout_s=1800.0, version="v1.32.4",
              crds=CUSTOM)                 # the CRDs installed (both PodGroups by default)
    start() / stop() / with ApiServer() as api; api.url; api.kubeconfig(path, namespace)
    create(obj, namespace=None) -> dict            # kind from apiVersion/kind, like a POST
    get(resource, name, namespace=None) -> dict | None
    objects(resource, namespace=None, *, label_selector="", field_selector="") -> list[dict]
    update(obj, subresource=None) -> dict          # like a PUT ("status" for /status)
    patch(resource, name, patch, namespace=None, *, patch_type=MERGE_PATCH,
          subresource=None) -> dict
    delete(resource, name, namespace=None) -> dict | None   # at once, no grace period
    set_phase(namespace, name, phase) -> dict      # what a kubelet writes (phase, Ready)
    compact() -> int; drop_watches(*, bookmark=False) -> int; bookmark() -> int
    watch_count(resource=None) -> int; resource_version -> int
    inject_error(method, path_regex, code=500, reason=..., message=..., times=1)
    inject_delay(method, path_regex, seconds, times=1); clear_delays() -> int
    wait_until(check, timeout=5.0, interval=0.01)
    requests -> [(method, path)]; request_log -> [RequestRecord(method, path, query,
    content_type, body)]; server_errors -> tracebacks of the emulator's own failures

`resource` is a plural, singular, kind, short name or `plural.group` ("pods", "pg", "leases",
"podgroups.scheduling.volcano.sh"): a name two resources share means the first installed one,
in discovery order, as kubectl picks; a namespace of None means "default" for get/patch/delete
and all namespaces for objects.

What is faithful (the real API server's behaviour, as of Kubernetes 1.32):

- One global resourceVersion (a string of an integer), bumped by every write; lists carry the
  list's resourceVersion. A write that changes nothing (a no-op update or patch) is not a write:
  no new resourceVersion, no event.
- list: labelSelector (`a=b`, `a==b`, `a!=b`, `a`, `!a`, `a in (x,y)`, `a notin (x,y)`),
  fieldSelector (`=`, `==`, `!=`) on the fields the real server supports for that resource
  (400 `field label not supported` for others), `limit`/`continue` (consistent snapshots;
  410 once compacted), `resourceVersionMatch=Exact`; all namespaces at `/api/v1/pods`.
- watch: newline-delimited JSON events over a chunked response (the events queued when the
  stream writes go out in one chunk, several lines to a chunk, as a real server's buffered
  writes may; a client splits lines, not chunks). resourceVersion absent or "0"
  starts with ADDED for every existing object; from N replays what happened after N; older than
  the compaction point: 200 with one ERROR event carrying a 410 `Expired` Status. With
  selectors, an object that stops matching is sent as DELETED and one that starts matching as
  ADDED (the watch cache does this: a scheduler watching `spec.nodeName=` sees a bound pod go).
  BOOKMARKs (`allowWatchBookmarks`) carry only kind, apiVersion and metadata.resourceVersion;
  one is sent just before a watch's timeout ends it, and on `api.bookmark()`.
  `sendInitialEvents=true` ends the initial ADDEDs with the `k8s.io/initial-events-end`
  bookmark.
- create (201; generateName; uid, creationTimestamp, namespace defaulting; 409 AlreadyExists;
  422 Invalid for a missing or malformed name; 400 for a body that is not JSON; 500 for a
  body that carries a resourceVersion, as real), update
  (optimistic concurrency: 409 Conflict on a stale resourceVersion; custom resources require
  one), patch (merge, strategic merge, JSON patch; custom resources refuse strategic merge with
  415, as the real server does), delete (200 with the object; preconditions), deletecollection.
- Status subresources: a write to the main resource leaves status as it was, a write to
  `/status` changes only status (for pods, labels and annotations too, as the real
  pods/status strategy allows). Pods and custom resources lose the status sent on create
  (pods start `Pending`); nodes keep theirs (capacity, allocatable, conditions).
- Pods: defaults (schedulerName `default-scheduler`, restartPolicy, dnsPolicy,
  terminationGracePeriodSeconds, container requests defaulted from limits, imagePullPolicy,
  the not-ready/unreachable tolerations, qosClass), validation that a scheduler meets
  (containers with name and image; resource quantities: 400 for a malformed one, 422 for a
  fractional extended resource like `nvidia.com/gpu` or one whose request differs from its
  limit), the Priority admission (spec.priority from spec.priorityClassName or the global
  default class; 403 for an unknown class) and the pod-update rule: the spec of an existing pod
  cannot change except images, activeDeadlineSeconds, tolerations and removing scheduling
  gates (422) -- in particular spec.nodeName can only be set through `pods/binding`.
- `pods/binding` (and the older `bindings` collection): 201 with a `Status`, not a Binding;
  sets spec.nodeName, merges the Binding's annotations and sets `PodScheduled=True` in one
  update (one MODIFIED event); 409 if already bound or being deleted; preconditions on the
  Binding's uid/resourceVersion; 404 for a missing pod; the node is not checked (nor is it by
  the real server).
- `pods/eviction` (policy/v1): deletes the pod unless the one PodDisruptionBudget matching it
  would be violated (429 TooManyRequests with the DisruptionBudget cause; 500 if more than one
  matches, as real). Pending, terminal or terminating pods are evicted regardless, an
  unhealthy pod whenever the budget is met (the default unhealthyPodEvictionPolicy).
  PodDisruptionBudget status (currentHealthy, desiredHealthy, expectedPods,
  disruptionsAllowed) is kept current as the disruption controller would, immediately: a pod
  is healthy when Running, not being deleted and not Ready=False; expected pods are the
  matching pods that are not Succeeded/Failed. minAvailable/maxUnavailable as integers or
  percentages (rounded up).
- Errors are `Status` objects with the real reasons and messages (NotFound, AlreadyExists,
  Conflict, Invalid, BadRequest, Forbidden, MethodNotAllowed, TooManyRequests, Expired,
  UnsupportedMediaType, NotAcceptable); 404 for unknown paths and resources; 405 for verbs a
  path does not serve.
- Resource quantities (pod requests/limits/overhead, node capacity/allocatable) are written
  back in canonical form, always strings: 4 -> "4", "0.5" -> "500m", "2000" -> "2k",
  "1024Mi" -> "1Gi".
- Discovery: /version (v1.32.4: the gcloud `kubectl` dispatcher picks its kubectl by it),
  /api, /api/v1, /apis, /apis/<group>, /apis/<group>/<version>, in the legacy form: kubectl
  1.32 asks for aggregated discovery (`as=APIGroupDiscoveryList`) with `application/json` as
  its last choice, and takes an `application/json` answer as the legacy form.
- `kubectl get` asks for `as=Table`: lists and gets answer Tables with the real default
  columns for the served resources (each PodGroup CRD's printer columns for its podgroups);
  `as=PartialObjectMetadata(List)` is served too; 406 when nothing acceptable is asked for.
- Built in at start, as a real cluster has them: namespaces default, kube-system, kube-public,
  kube-node-lease; priority classes system-cluster-critical and system-node-critical.

Resources: core v1 namespaces, nodes, pods (+status, binding, eviction, log: the text a test
gives with `set_log`), events, configmaps, services (+proxy: to the URL a test gives with
`proxy_service`, GET only); coordination.k8s.io/v1 leases; policy/v1 poddisruptionbudgets
(+status); scheduling.k8s.io/v1 priorityclasses; scheduling.x-k8s.io/v1alpha1 podgroups
(+status, the scheduler-plugins CRD, short names pg and pgs); scheduling.volcano.sh/v1beta1
podgroups (+status, Volcano's CRD, short names pg and podgroup-v1beta1). `crds` names the CRDs
installed (`CUSTOM`, both, by default): one left out is absent from discovery and its paths
answer 404, as on a cluster without it.

Corners cut (differences from a real API server):

- No authentication or authorization: any token, or none, is accepted; plain http only.
- No admission beyond Priority and DefaultTolerationSeconds: a namespace that does not exist
  is created on first use (the real NamespaceLifecycle admission answers 404), no
  ServiceAccount admission, no quotas, no LimitRanges, no webhooks.
- Validation is partial: names (RFC 1123), the pod rules above, binding targets, event
  namespaces, priority class values. No CRD schema validation (podgroups take any spec), no
  label/annotation syntax checks, no fieldValidation (the parameter is ignored).
- No finalizers, no garbage collection (ownerReferences are kept, never acted on), no
  cascading namespace deletion; propagationPolicy is ignored.
- No field managers, managedFields or server-side apply (apply-patch+yaml answers 415).
- Pod grace periods are ignored by default: a delete removes the pod at once. With
  `ApiServer(graceful_pod_deletion=True)`, a bound, non-terminal pod deleted with a grace
  period > 0 gets deletionTimestamp/deletionGracePeriodSeconds (a MODIFIED event) and stays
  until the test removes it (`api.delete(...)`, which is always immediate) -- there is no
  kubelet.
- No controllers but the disruption one above; nothing sets pod phases (use
  `api.set_phase`), nodes are never marked NotReady, Event TTLs do not apply.
- Strategic merge patch knows the merge keys of the pod and node lists (containers, env,
  volumes, ports, conditions, ...) rather than reading them from the OpenAPI schema;
  `$patch`, `$setElementOrder`, `$deleteFromPrimitiveList` and `$retainKeys` are handled.
- OpenAPI: /openapi/v3 serves, per group-version, only a PATCH operation per kind that declares
  the `fieldValidation` parameter (kubectl 1.32's `apply` refuses to run without OpenAPI: with
  v3 saying the server validates, it leaves validation to the server and sends
  fieldValidation=Strict); no schemas (`kubectl explain` finds nothing), /openapi/v2 is 404.
- fieldValidation=Strict refuses (400) only unknown top-level and metadata fields, and unknown
  fields of the PodGroup schemas; otherwise those are dropped silently, as the real decoder
  and CRD pruning do; unknown fields deeper in built-in objects are kept, not dropped.
- No CustomResourceDefinition objects (the CRDs are only in discovery), no events.k8s.io API
  (kubectl describe reads core/v1 events), no protobuf, no YAML bodies, no dryRun (400), no
  watch of Tables, no legacy /api/v1/watch/ paths, no HTTP/2, no exec/log/attach/portforward
  subresources, no Warning headers.
- A list with resourceVersion=N (not older than N) answers the current state, as the real
  server does from its watch cache; only watches, continue tokens and
  resourceVersionMatch=Exact can be 410 Gone. A watch from a resourceVersion in the future
  waits for it rather than failing after a few seconds.
- Timestamps have one-second resolution (RFC 3339, UTC).
"""

from __future__ import annotations

import base64
import contextlib
import copy
import datetime as dt
import functools
import json
import math
import queue
import random
import re
import select
import socket
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from fractions import Fraction
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, TypeVar
from urllib.error import HTTPError
from urllib.parse import parse_qs, quote, unquote, urlencode, urlsplit
from urllib.request import urlopen

JSON = dict[str, Any]
T = TypeVar("T")

KUBE_VERSION = "v1.32.4"

# --------------------------------------------------------------------------- resources

_VERBS = ("create", "delete", "deletecollection", "get", "list", "patch", "update", "watch")

_OBJECT_META_FIELDS = ("metadata.name", "metadata.namespace")
_POD_FIELDS = (
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.nominatedNodeName",
)
_EVENT_FIELDS = (
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
)


@dataclass(frozen=True)
class Resource:
    """One served resource, as discovery describes it."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    subresources: tuple[str, ...] = ()
    custom: bool = False  # a custom resource: merge patch only, resourceVersion on update
    generation: bool = False  # metadata.generation counts spec changes
    fields: tuple[str, ...] = ()  # field selectors beyond metadata.name/namespace
    verbs: tuple[str, ...] = _VERBS

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        """`pods`, `leases.coordination.k8s.io`: how errors name the resource."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def has_status(self) -> bool:
        return "status" in self.subresources

    def field_labels(self) -> tuple[str, ...]:
        base = _OBJECT_META_FIELDS if self.namespaced else ("metadata.name",)
        return base + self.fields


def _podgroups(group: str, version: str, *short_names: str) -> Resource:
    """A PodGroup CRD (scheduler-plugins' and Volcano's are alike to the API server)."""
    return Resource(
        group,
        version,
        "podgroups",
        "podgroup",
        "PodGroup",
        True,
        short_names,
        subresources=("status",),
        custom=True,
        generation=True,
    )


RESOURCES: tuple[Resource, ...] = (
    Resource(
        "",
        "v1",
        "namespaces",
        "namespace",
        "Namespace",
        False,
        ("ns",),
        subresources=("status",),
        fields=("status.phase",),
        verbs=("create", "delete", "get", "list", "patch", "update", "watch"),
    ),
    Resource(
        "",
        "v1",
        "nodes",
        "node",
        "Node",
        False,
        ("no",),
        subresources=("status",),
        fields=("spec.unschedulable",),
    ),
    Resource(
        "",
        "v1",
        "pods",
        "pod",
        "Pod",
        True,
        ("po",),
        ("all",),
        subresources=("status", "binding", "eviction", "log"),
        fields=_POD_FIELDS,
    ),
    Resource("", "v1", "events", "event", "Event", True, ("ev",), fields=_EVENT_FIELDS),
    Resource("", "v1", "configmaps", "configmap", "ConfigMap", True, ("cm",)),
    Resource(
        "", "v1", "services", "service", "Service", True, ("svc",), ("all",), ("status", "proxy")
    ),
    Resource("coordination.k8s.io", "v1", "leases", "lease", "Lease", True),
    Resource(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        True,
        ("pdb",),
        subresources=("status",),
        generation=True,
    ),
    Resource(
        "scheduling.k8s.io",
        "v1",
        "priorityclasses",
        "priorityclass",
        "PriorityClass",
        False,
        ("pc",),
    ),
    _podgroups("scheduling.x-k8s.io", "v1alpha1", "pg", "pgs"),
    # After scheduler-plugins': a real server lists CRD groups of equal priority by their
    # APIService names (version.group), so with both installed `podgroups` and `pg` mean
    # scheduler-plugins' to kubectl, and Volcano's is `podgroups.scheduling.volcano.sh`.
    _podgroups("scheduling.volcano.sh", "v1beta1", "pg", "podgroup-v1beta1"),
)

_BY_PATH: dict[tuple[str, str, str], Resource] = {
    (r.group, r.version, r.plural): r for r in RESOURCES
}
_BY_KIND: dict[tuple[str, str], Resource] = {(r.api_version, r.kind): r for r in RESOURCES}
PODS = _BY_PATH[("", "v1", "pods")]
PDBS = _BY_PATH[("policy", "v1", "poddisruptionbudgets")]
NAMESPACES = _BY_PATH[("", "v1", "namespaces")]
PRIORITY_CLASSES = _BY_PATH[("scheduling.k8s.io", "v1", "priorityclasses")]
CUSTOM = tuple(r.qualified for r in RESOURCES if r.custom)


def resolve(resource: str, among: Iterable[Resource] = RESOURCES) -> Resource:
    """A resource by plural, singular, kind, short name or `plural.group`: the first of
    `among` (in discovery order) that has that name, as kubectl picks."""
    wanted = resource.lower()
    for r in among:
        names = {r.plural, r.singular, r.kind.lower(), r.qualified, *r.short_names}
        if wanted in names:
            return r
    raise KeyError(f"the emulator serves no resource {resource!r}")


# --------------------------------------------------------------------------- errors


class ApiError(Exception):
    """A failure the server answers with a `Status` (`status`); `code` is the HTTP code."""

    def __init__(self, code: int, reason: str, message: str, details: JSON | None = None):
        super().__init__(f"{code} {reason}: {message}")
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details

    @property
    def status(self) -> JSON:
        out: JSON = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        }
        if self.details is not None:
            out["details"] = self.details
        out["code"] = self.code
        return out


def _details(res: Resource, name: str, kind: str | None = None) -> JSON:
    out: JSON = {"name": name}
    if res.group:
        out["group"] = res.group
    out["kind"] = kind or res.plural
    return out


def not_found(res: Resource, name: str) -> ApiError:
    return ApiError(404, "NotFound", f'{res.qualified} "{name}" not found', _details(res, name))


def already_exists(res: Resource, name: str) -> ApiError:
    msg = f'{res.qualified} "{name}" already exists'
    return ApiError(409, "AlreadyExists", msg, _details(res, name))


def conflict(res: Resource, name: str, why: str, qualified: str | None = None) -> ApiError:
    msg = f'Operation cannot be fulfilled on {qualified or res.qualified} "{name}": {why}'
    return ApiError(409, "Conflict", msg, _details(res, name))


_MANY_PDBS = (
    "This pod has more than one PodDisruptionBudget, which the eviction subresource does not "
    "support."
)
_STALE = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


def bad_request(message: str) -> ApiError:
    return ApiError(400, "BadRequest", message)


def forbidden(res: Resource, name: str, why: str) -> ApiError:
    msg = f'{res.qualified} "{name}" is forbidden: {why}'
    return ApiError(403, "Forbidden", msg, _details(res, name))


def method_not_allowed() -> ApiError:
    return ApiError(
        405,
        "MethodNotAllowed",
        "the server does not allow this method on the requested resource",
        {},
    )


def path_not_found() -> ApiError:
    return ApiError(404, "NotFound", "the server could not find the requested resource", {})


_FIELD_ERRORS = {
    "required": ("FieldValueRequired", "Required value"),
    "invalid": ("FieldValueInvalid", "Invalid value"),
    "forbidden": ("FieldValueForbidden", "Forbidden"),
    "unsupported": ("FieldValueNotSupported", "Unsupported value"),
}
_NO_VALUE = object()


@dataclass
class FieldError:
    """One cause of a 422 Invalid, formatted as k8s.io/apimachinery's field.Error."""

    path: str
    type: str  # a key of _FIELD_ERRORS
    detail: str = ""
    value: Any = _NO_VALUE

    def message(self) -> str:
        text = _FIELD_ERRORS[self.type][1]
        if self.value is not _NO_VALUE:
            shown = json.dumps(self.value) if isinstance(self.value, str) else repr(self.value)
            text += f": {shown}"
        if self.detail:
            text += f": {self.detail}"
        return text

    def cause(self) -> JSON:
        return {
            "reason": _FIELD_ERRORS[self.type][0],
            "message": self.message(),
            "field": self.path,
        }


def invalid(kind: str, name: str, errors: list[FieldError], group: str = "") -> ApiError:
    texts = [f"{e.path}: {e.message()}" for e in errors]
    joined = texts[0] if len(texts) == 1 else "[" + ", ".join(texts) + "]"
    details: JSON = {"name": name}
    if group:
        details["group"] = group
    details["kind"] = kind
    details["causes"] = [e.cause() for e in errors]
    qualified = f"{kind}.{group}" if group else kind
    return ApiError(422, "Invalid", f'{qualified} "{name}" is invalid: {joined}', details)


# The fields each kind declares at its top level (others are dropped on decode, or refused with
# fieldValidation=Strict), ObjectMeta's, and the PodGroup CRD's structural schema (unknown
# fields pruned, types checked) as kubernetes-sigs/scheduler-plugins declares it.
_TOP_FIELDS: dict[str, set[str]] = {
    "pods": {"spec", "status"},
    "nodes": {"spec", "status"},
    "namespaces": {"spec", "status"},
    "poddisruptionbudgets": {"spec", "status"},
    "podgroups": {"spec", "status"},
    "leases": {"spec"},
    "configmaps": {"data", "binaryData", "immutable"},
    "services": {"spec", "status"},
    "priorityclasses": {"value", "globalDefault", "description", "preemptionPolicy"},
    "events": {
        "involvedObject",
        "reason",
        "message",
        "source",
        "firstTimestamp",
        "lastTimestamp",
        "count",
        "type",
        "eventTime",
        "series",
        "action",
        "related",
        "reportingComponent",
        "reportingInstance",
    },
}
_META_FIELDS = {
    "name",
    "generateName",
    "namespace",
    "selfLink",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
}
_CUSTOM_SCHEMAS: dict[str, dict[str, dict[str, str]]] = {
    "podgroups.scheduling.x-k8s.io": {
        "spec": {
            "minMember": "integer",
            "minResources": "object",
            "scheduleTimeoutSeconds": "integer",
        },
        "status": {
            "phase": "string",
            "occupiedBy": "string",
            "running": "integer",
            "succeeded": "integer",
            "failed": "integer",
            "scheduleStartTime": "string",
        },
    },
    # Volcano's scheduling.volcano.sh/v1beta1 PodGroup, as volcano-sh/apis declares it.
    "podgroups.scheduling.volcano.sh": {
        "spec": {
            "minMember": "integer",
            "minTaskMember": "object",
            "queue": "string",
            "priorityClassName": "string",
            "minResources": "object",
            "networkTopology": "object",
        },
        "status": {
            "phase": "string",
            "conditions": "array",
            "running": "integer",
            "succeeded": "integer",
            "failed": "integer",
        },
    },
}
_JSON_TYPES: dict[str, type | tuple[type, ...]] = {
    "integer": int,
    "string": str,
    "object": dict,
    "array": list,
    "number": (int, float),
}


# --------------------------------------------------------------------------- small helpers

_ATOMS = frozenset((str, int, float, bool, type(None)))


def _clone(value: T) -> T:
    """A deep copy of JSON data, several times cheaper than copy.deepcopy (which this
    emulator's every write used to spend most of its time in): the leaves (strings, numbers)
    are shared, not visited. Anything that is not JSON goes through copy.deepcopy."""
    kind = type(value)
    if kind is dict:
        return {  # type: ignore[return-value]
            k: v if type(v) in _ATOMS else _clone(v)
            for k, v in value.items()  # type: ignore[attr-defined]
        }
    if kind is list:
        return [v if type(v) in _ATOMS else _clone(v) for v in value]  # type: ignore[attr-defined,return-value]
    if kind in _ATOMS:
        return value
    return copy.deepcopy(value)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0)


_last_stamp: tuple[int, str] = (-1, "")  # (second, its timestamp): most writes share one


def _timestamp(when: dt.datetime | None = None) -> str:
    global _last_stamp
    if when is not None:
        return when.strftime("%Y-%m-%dT%H:%M:%SZ")
    second = int(time.time())
    cached = _last_stamp
    if cached[0] != second:
        cached = _last_stamp = (second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)))
    return cached[1]


def _parse_time(text: Any) -> dt.datetime | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def human_duration(seconds: float) -> str:
    """k8s.io/apimachinery/pkg/util/duration.HumanDuration, as `AGE` columns print."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    minutes = s // 60
    if minutes < 10:
        return f"{minutes}m" if s % 60 == 0 else f"{minutes}m{s % 60}s"
    if minutes < 180:
        return f"{minutes}m"
    hours = s // 3600
    if hours < 8:
        return f"{hours}h" if minutes % 60 == 0 else f"{hours}h{minutes % 60}m"
    if hours < 48:
        return f"{hours}h"
    if hours < 24 * 8:
        return f"{hours // 24}d" if hours % 24 == 0 else f"{hours // 24}d{hours % 24}h"
    if hours < 24 * 365 * 2:
        return f"{hours // 24}d"
    years, days = hours // 24 // 365, (hours // 24) % 365
    if hours < 24 * 365 * 8:
        return f"{years}y" if days == 0 else f"{years}y{days}d"
    return f"{years}y"


def _age(text: Any) -> str:
    when = _parse_time(text)
    if when is None:
        return "<unknown>"
    return human_duration((_now() - when).total_seconds())


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used"
    " for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_SUFFIXES: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9),
    "u": Fraction(1, 10**6),
    "m": Fraction(1, 1000),
    "k": Fraction(10**3),
    "M": Fraction(10**6),
    "G": Fraction(10**9),
    "T": Fraction(10**12),
    "P": Fraction(10**15),
    "E": Fraction(10**18),
    "Ki": Fraction(2**10),
    "Mi": Fraction(2**20),
    "Gi": Fraction(2**30),
    "Ti": Fraction(2**40),
    "Pi": Fraction(2**50),
    "Ei": Fraction(2**60),
}


def parse_quantity(value: Any) -> Fraction:
    """A resource.Quantity (`500m`, `4Gi`, `8`, `1e3`, a JSON number); ValueError if not one."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(value)
    return _parse_quantity(value)


# Quantities repeat (every pod of a gang asks the same "8") and Fraction arithmetic is slow, so
# both are cached: typed, so that 4 and 4.0 stay apart; only ints, floats and strings (all
# hashable) reach the caches.
@functools.lru_cache(maxsize=4096, typed=True)
def _parse_quantity(value: int | float | str) -> Fraction:
    text = str(value).strip()
    m = _QUANTITY.match(text)
    if not m:
        raise ValueError(value)
    number, suffix = m.groups()
    if number.count(".") > 1 or number in (".", "+", "-"):
        raise ValueError(value)
    amount = Fraction(number)
    if suffix in _SUFFIXES:
        return amount * _SUFFIXES[suffix]
    em = re.fullmatch(r"[eE]([-+]?[0-9]+)", suffix)
    if em:
        return amount * Fraction(10) ** int(em.group(1))
    raise ValueError(value)


_BINARY = {60: "Ei", 50: "Pi", 40: "Ti", 30: "Gi", 20: "Mi", 10: "Ki", 0: ""}
_DECIMAL = {18: "E", 15: "P", 12: "T", 9: "G", 6: "M", 3: "k", 0: "", -3: "m", -6: "u", -9: "n"}


def canonical_quantity(value: Any) -> str:
    """How resource.Quantity serialises a quantity: `4` -> "4", "0.5" -> "500m", "2000" ->
    "2k", "1024Mi" -> "1Gi", "1e3" -> "1e3" (the format of the input, the largest suffix that
    keeps the mantissa whole; below a nano it rounds up). ValueError if not a quantity."""
    parse_quantity(value)  # ValueError for what is not a quantity, before the cache
    return _canonical_quantity(value)


@functools.lru_cache(maxsize=4096, typed=True)
def _canonical_quantity(value: int | float | str) -> str:
    amount = _parse_quantity(value)
    match = _QUANTITY.match(str(value).strip())
    suffix = match.group(2) if match else ""
    if amount == 0:
        return "0"
    sign, amount = ("-" if amount < 0 else ""), abs(amount)
    if suffix.endswith("i") and amount.denominator == 1:
        whole = int(amount)
        power = next(p for p in _BINARY if whole % (1 << p) == 0)
        return f"{sign}{whole >> power}{_BINARY[power]}"
    if (amount * 10**9).denominator != 1:
        amount = Fraction(math.ceil(amount * 10**9), 10**9)
    exponent = next(e for e in _DECIMAL if (amount / Fraction(10) ** e).denominator == 1)
    mantissa = int(amount / Fraction(10) ** exponent)
    if suffix[:1] in ("e", "E"):
        return f"{sign}{mantissa}" + (f"e{exponent}" if exponent else "")
    return f"{sign}{mantissa}{_DECIMAL[exponent]}"


def _canonical_map(values: Any, kind: str) -> Any:
    if not isinstance(values, dict):
        return values
    out = {}
    for k, v in values.items():
        _quantity_or_400(v, kind)  # 400 if not a quantity
        out[k] = canonical_quantity(v)
    return out


def _set_changed(target: JSON, key: str, value: Any) -> None:
    """target[key] = value, unless it is already equal: what a write takes over unchanged from
    the stored object (a status write's spec) is shared with it, and must stay untouched."""
    if target.get(key) != value:
        target[key] = value


def _strip_rv(obj: JSON) -> JSON:
    out = dict(obj)
    out["metadata"] = {
        k: v for k, v in (obj.get("metadata") or {}).items() if k != "resourceVersion"
    }
    return out


def _key(obj: JSON) -> tuple[str, str]:
    md = obj["metadata"]
    return (md.get("namespace") or "", md["name"])


def _order(key: tuple[str, str]) -> str:
    """The order of etcd's keys (`<namespace>/<name>`), which lists and continue tokens use."""
    return f"{key[0]}/{key[1]}"


def _labels(obj: JSON | None) -> dict[str, str]:
    if not obj:
        return {}
    return (obj.get("metadata") or {}).get("labels") or {}


def _dig(obj: Any, *path: str) -> Any:
    for p in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(p)
    return obj


# --------------------------------------------------------------------------- selectors


@dataclass(frozen=True)
class _Requirement:
    key: str
    op: str  # in notin exists !exists = != gt lt
    values: tuple[str, ...] = ()

    def matches(self, labels: dict[str, str]) -> bool:
        has = self.key in labels
        value = labels.get(self.key)
        if self.op in ("in", "="):
            return has and value in self.values
        if self.op in ("notin", "!="):
            return not has or value not in self.values
        if self.op == "exists":
            return has
        if self.op == "!exists":
            return not has
        try:
            number = int(value) if value is not None else None
        except ValueError:
            return False
        if number is None:
            return False
        bound = int(self.values[0])
        return number > bound if self.op == "gt" else number < bound


_LABEL_KEY = re.compile(
    r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, []
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


class LabelSelector:
    """A label selector in its string form (labels.Parse)."""

    def __init__(self, requirements: Iterable[_Requirement] = ()):
        self.requirements = tuple(requirements)

    @classmethod
    def parse(cls, text: str) -> LabelSelector:
        text = text.strip()
        if not text:
            return cls()
        reqs = []
        for raw in _split_top(text):
            term = raw.strip()
            reqs.append(cls._term(term, text))
        return cls(reqs)

    @staticmethod
    def _term(term: str, whole: str) -> _Requirement:
        def fail(why: str) -> ApiError:
            return bad_request(f"unable to parse requirement: {why}")

        def key_ok(key: str) -> str:
            if not _LABEL_KEY.match(key) or len(key.split("/")[-1]) > 63:
                raise fail(f'<nil>: Invalid value: "{key}": name part must be a valid label key')
            return key

        def value_ok(value: str) -> str:
            if not _LABEL_VALUE.match(value) or len(value) > 63:
                raise fail(
                    f'<nil>: Invalid value: "{value}": a valid label must be an empty string or '
                    "consist of alphanumeric characters"
                )
            return value

        if not term:
            raise bad_request(
                f"unable to parse requirement: found '', expected: identifier in {whole!r}"
            )
        if term.startswith("!"):
            return _Requirement(key_ok(term[1:].strip()), "!exists")
        m = re.fullmatch(r"(\S+)\s+(in|notin)\s*\((.*)\)", term)
        if m:
            values = tuple(value_ok(v.strip()) for v in m.group(3).split(","))
            if all(v == "" for v in values):
                raise fail(f"for 'in', 'notin' operators, values set can't be empty in {whole!r}")
            return _Requirement(key_ok(m.group(1)), m.group(2), values)
        for token, op in (("!=", "!="), ("==", "="), ("=", "="), (">", "gt"), ("<", "lt")):
            if token in term:
                key, value = term.split(token, 1)
                key, value = key.strip(), value.strip()
                if op in ("gt", "lt") and not re.fullmatch(r"-?[0-9]+", value):
                    raise fail(
                        f"for 'Gt', 'Lt' operators, the value must be an integer in {whole!r}"
                    )
                return _Requirement(key_ok(key), op, (value_ok(value),))
        return _Requirement(key_ok(term), "exists")

    def matches(self, labels: dict[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)


def selector_matches(selector: Any, labels: dict[str, str]) -> bool:
    """A metav1.LabelSelector object: null matches nothing, {} everything."""
    if not isinstance(selector, dict):
        return False
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and not (key in labels and labels[key] in values):
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def _unescape_field(value: str) -> str:
    out, i = [], 0
    while i < len(value):
        if value[i] == "\\" and i + 1 < len(value):
            out.append(value[i + 1])
            i += 2
        else:
            out.append(value[i])
            i += 1
    return "".join(out)


def _split_unescaped(text: str, sep: str) -> list[str]:
    parts, current, i = [], [], 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            current.append(text[i : i + 2])
            i += 2
            continue
        if text[i] == sep:
            parts.append("".join(current))
            current = []
        else:
            current.append(text[i])
        i += 1
    parts.append("".join(current))
    return parts


def field_value(res: Resource, obj: JSON, name: str) -> str:
    """The string a field selector compares, for a field the resource supports."""
    if name == "metadata.name":
        return str(_dig(obj, "metadata", "name") or "")
    if name == "metadata.namespace":
        return str(_dig(obj, "metadata", "namespace") or "")
    if res.plural == "events" and name == "source":
        return str(_dig(obj, "source", "component") or "")
    if res.plural == "events" and name == "reportingComponent":
        return str(obj.get("reportingComponent") or "")
    value = _dig(obj, *name.split("."))
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        if name in ("spec.hostNetwork", "spec.unschedulable"):
            return "false"
        return ""
    return str(value)


class FieldSelector:
    """A field selector (`a=b,c!=d`) over the fields the resource supports."""

    def __init__(self, res: Resource, terms: Iterable[tuple[str, str, str]] = ()):
        self.res = res
        self.terms = tuple(terms)

    @classmethod
    def parse(cls, res: Resource, text: str) -> FieldSelector:
        terms = []
        if text.strip():
            for raw in _split_unescaped(text, ","):
                term = raw.strip()
                for token, op in (("!=", "!="), ("==", "="), ("=", "=")):  # noqa: B007
                    idx = term.find(token)
                    if idx > 0:
                        key, value = term[:idx].strip(), term[idx + len(token) :]
                        break
                else:
                    raise bad_request(f"invalid selector: '{text}'; can't understand '{term}'")
                if key not in res.field_labels():
                    raise bad_request(f"field label not supported: {key}")
                terms.append((key, op, _unescape_field(value)))
        return cls(res, terms)

    def matches(self, obj: JSON) -> bool:
        for key, op, value in self.terms:
            equal = field_value(self.res, obj, key) == value
            if equal != (op == "="):
                return False
        return True


# --------------------------------------------------------------------------- patches


class PatchError(Exception):
    pass


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return _clone(patch)
    out = _clone(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# Lists merged by key in a strategic merge patch (patchMergeKey in the Go types), and lists
# of scalars merged as sets (patchStrategy=merge); other lists are replaced.
_SMP_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "volumes": "name",
    "env": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "conditions": "type",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "addresses": "type",
    "containerStatuses": "name",
    "initContainerStatuses": "name",
    "podIPs": "ip",
}
_SMP_SETS = {"finalizers"}


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """A strategic merge patch, with the merge keys of the served types (see _SMP_MERGE_KEYS)."""
    if not isinstance(patch, dict):
        return _clone(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: _clone(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    out = _clone(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    if isinstance(retain, list):
        out = {k: v for k, v in out.items() if k in retain or k in patch}
    orders: dict[str, list[Any]] = {}
    for k, v in patch.items():
        if k in ("$patch", "$retainKeys"):
            continue
        if k.startswith("$setElementOrder/"):
            orders[k.split("/", 1)[1]] = v
            continue
        if k.startswith("$deleteFromPrimitiveList/"):
            name = k.split("/", 1)[1]
            if isinstance(out.get(name), list):
                out[name] = [x for x in out[name] if x not in (v or [])]
            continue
        if v is None:
            out.pop(k, None)
        elif isinstance(v, list) and k in _SMP_MERGE_KEYS:
            out[k] = _smp_list(out.get(k), v, _SMP_MERGE_KEYS[k])
        elif isinstance(v, list) and k in _SMP_SETS:
            current = list(out.get(k) or [])
            out[k] = current + [x for x in v if x not in current]
        elif isinstance(v, dict):
            merged = strategic_merge_patch(out.get(k), v)
            if merged is None:
                out.pop(k, None)
            else:
                out[k] = merged
        else:
            out[k] = _clone(v)
    for name, order in orders.items():
        if isinstance(out.get(name), list):
            out[name] = _smp_order(out[name], order, _SMP_MERGE_KEYS.get(name))
    return out


def _smp_list(current: Any, patch: list[Any], key: str) -> list[Any]:
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [_clone(x) for x in patch if not (isinstance(x, dict) and "$patch" in x)]
    out = [_clone(x) for x in current] if isinstance(current, list) else []
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            out.append(_clone(item))
            continue
        idx = next(
            (i for i, x in enumerate(out) if isinstance(x, dict) and x.get(key) == item[key]), None
        )
        if item.get("$patch") == "delete":
            if idx is not None:
                out.pop(idx)
            continue
        if idx is None:
            out.append({k: _clone(v) for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out


def _smp_order(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    def ident(x: Any) -> Any:
        return x.get(key) if key and isinstance(x, dict) else json.dumps(x, sort_keys=True)

    wanted = [ident(o) for o in order]
    ranked = {w: i for i, w in enumerate(wanted)}
    placed = sorted((x for x in items if ident(x) in ranked), key=lambda x: ranked[ident(x)])
    return placed + [x for x in items if ident(x) not in ranked]


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise PatchError(f"JSON pointer must start with '/': {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str]) -> Any:
    for p in parts:
        if isinstance(doc, dict):
            if p not in doc:
                raise PatchError(f"missing path: {p}")
            doc = doc[p]
        elif isinstance(doc, list):
            try:
                doc = doc[int(p)]
            except (ValueError, IndexError) as e:
                raise PatchError(f"invalid index: {p}") from e
        else:
            raise PatchError(f"cannot traverse {p}")
    return doc


def _remove(doc: Any, parts: list[str]) -> Any:
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise PatchError(f"Unable to remove nonexistent key: {last}: missing value")
        return parent.pop(last)
    try:
        return parent.pop(int(last))
    except (ValueError, IndexError) as e:
        raise PatchError(f"Unable to remove index {last}") from e


def _add(doc: Any, parts: list[str], value: Any) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            try:
                idx = int(last)
            except ValueError as e:
                raise PatchError(f"invalid index: {last}") from e
            if idx < 0 or idx > len(parent):
                raise PatchError(f"add operation does not apply: index {idx} out of bounds")
            parent.insert(idx, value)
    else:
        raise PatchError(f"cannot add to {last}")
    return doc


def json_patch(doc: Any, ops: Any) -> Any:
    """RFC 6902 JSON patch."""
    if not isinstance(ops, list):
        raise ValueError("json patch must be a list of operations")
    doc = _clone(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ValueError(f"invalid operation {op!r}")
        kind, parts = op["op"], _pointer(op["path"])
        if kind == "add":
            doc = _add(doc, parts, _clone(op.get("value")))
        elif kind == "remove":
            _remove(doc, parts)
        elif kind == "replace":
            _walk(doc, parts)  # must exist
            if not parts:
                doc = _clone(op.get("value"))
            else:
                parent = _walk(doc, parts[:-1])
                if isinstance(parent, list):
                    parent[int(parts[-1])] = _clone(op.get("value"))
                else:
                    parent[parts[-1]] = _clone(op.get("value"))
        elif kind in ("move", "copy"):
            source = _pointer(op.get("from", ""))
            value = _clone(_walk(doc, source))
            if kind == "move":
                _remove(doc, source)
            doc = _add(doc, parts, value)
        elif kind == "test":
            if _walk(doc, parts) != op.get("value"):
                raise PatchError(f"testing value {op['path']} failed: test failed")
        else:
            raise ValueError(f"Unexpected kind: {kind}")
    return doc


MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


# --------------------------------------------------------------------------- watches


@dataclass
class _Change:
    rv: int
    type: str  # ADDED MODIFIED DELETED
    res: Resource
    obj: JSON  # the state after (for DELETED: the last state, with the deletion's rv)
    old: JSON | None  # the state before
    # The event lines of `obj` already encoded, by event type: every watch that is sent the
    # change gets the same bytes, so a change is encoded once, not once per watch.
    lines: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)

    def line(self, etype: str) -> bytes:
        found = self.lines.get(etype)
        if found is None:
            found = self.lines[etype] = _event_line(etype, self.obj)
        return found


def _event_line(etype: str, obj: JSON) -> bytes:
    return json.dumps({"type": etype, "object": obj}, separators=(",", ":")).encode() + b"\n"


class _Watch:
    """One open watch: the server thread that writes it reads `queue` (None ends it)."""

    def __init__(
        self,
        res: Resource,
        namespace: str | None,
        labels: LabelSelector,
        fields: FieldSelector,
        bookmarks: bool,
        start_rv: int,
    ):
        self.res = res
        self.namespace = namespace
        self.labels = labels
        self.fields = fields
        self.bookmarks = bookmarks
        self.start_rv = start_rv
        self.queue: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

    def passes(self, obj: JSON | None) -> bool:
        if obj is None:
            return False
        if self.namespace is not None and _dig(obj, "metadata", "namespace") != self.namespace:
            return False
        return self.labels.matches(_labels(obj)) and self.fields.matches(obj)

    def deliver(self, ch: _Change) -> None:
        if ch.rv <= self.start_rv or ch.res is not self.res:
            return
        now = ch.type != "DELETED" and self.passes(ch.obj)
        before = ch.type != "ADDED" and self.passes(ch.old)
        if ch.type == "DELETED":
            if before:
                self.queue.put(ch.line("DELETED"))
        elif now and before:
            self.queue.put(ch.line("MODIFIED"))
        elif now:
            self.queue.put(ch.line("ADDED"))
        elif before and ch.old is not None:
            # it stopped matching: the watch cache sends the previous state, at the new rv
            gone = _clone(ch.old)
            gone["metadata"]["resourceVersion"] = str(ch.rv)
            self.send("DELETED", gone)

    def send(self, etype: str, obj: JSON) -> None:
        self.queue.put(_event_line(etype, obj))

    def bookmark_line(self, rv: int, annotations: dict[str, str] | None = None) -> bytes:
        md: JSON = {"resourceVersion": str(rv)}
        if annotations:
            md["annotations"] = annotations
        obj = {"kind": self.res.kind, "apiVersion": self.res.api_version, "metadata": md}
        return _event_line("BOOKMARK", obj)

    def bookmark(self, rv: int, annotations: dict[str, str] | None = None) -> None:
        self.queue.put(self.bookmark_line(rv, annotations))

    def close(self) -> None:
        self.queue.put(None)


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class _Column:
    name: str
    type: str
    get: Callable[[JSON], Any]
    priority: int = 0
    format: str = ""
    description: str = ""


def _none(value: Any) -> Any:
    return value if value not in (None, "") else "<none>"


def _pod_status(pod: JSON) -> str:
    if _dig(pod, "metadata", "deletionTimestamp"):
        return "Terminating"
    status = pod.get("status") or {}
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for cs in status.get("containerStatuses") or []:
        waiting = _dig(cs, "state", "waiting", "reason")
        terminated = _dig(cs, "state", "terminated", "reason")
        if waiting:
            reason = waiting
        elif terminated:
            reason = terminated
    return str(reason)


def _pod_ready(pod: JSON) -> str:
    total = len(_dig(pod, "spec", "containers") or [])
    ready = sum(1 for cs in _dig(pod, "status", "containerStatuses") or [] if cs.get("ready"))
    return f"{ready}/{total}"


def _node_status(node: JSON) -> str:
    ready = [c for c in _dig(node, "status", "conditions") or [] if c.get("type") == "Ready"]
    state = "Unknown"
    if ready:
        state = {"True": "Ready", "False": "NotReady"}.get(ready[0].get("status"), "Unknown")
    if _dig(node, "spec", "unschedulable"):
        state += ",SchedulingDisabled"
    return state


def _node_roles(node: JSON) -> str:
    roles = set()
    for k, v in _labels(node).items():
        if k.startswith("node-role.kubernetes.io/"):
            roles.add(k.split("/", 1)[1])
        elif k == "kubernetes.io/role":
            roles.add(v)
    return ",".join(sorted(r for r in roles if r)) or "<none>"


def _node_address(node: JSON, kind: str) -> str:
    for a in _dig(node, "status", "addresses") or []:
        if a.get("type") == kind:
            return str(a.get("address"))
    return "<none>"


def _int_or_str(value: Any) -> str:
    return "N/A" if value is None else str(value)


_AGE = _Column("Age", "string", lambda o: _age(_dig(o, "metadata", "creationTimestamp")))
_NAME = _Column("Name", "string", lambda o: o["metadata"]["name"], format="name")

_TABLES: dict[str, list[_Column]] = {
    "pods": [
        _NAME,
        _Column("Ready", "string", _pod_ready),
        _Column("Status", "string", _pod_status),
        _Column(
            "Restarts",
            "string",
            lambda p: str(
                sum(
                    cs.get("restartCount", 0) for cs in _dig(p, "status", "containerStatuses") or []
                )
            ),
        ),
        _AGE,
        _Column("IP", "string", lambda p: _none(_dig(p, "status", "podIP")), 1),
        _Column("Node", "string", lambda p: _none(_dig(p, "spec", "nodeName")), 1),
        _Column(
            "Nominated Node", "string", lambda p: _none(_dig(p, "status", "nominatedNodeName")), 1
        ),
        _Column("Readiness Gates", "string", lambda p: "<none>", 1),
    ],
    "nodes": [
        _NAME,
        _Column("Status", "string", _node_status),
        _Column("Roles", "string", _node_roles),
        _AGE,
        _Column(
            "Version", "string", lambda n: _dig(n, "status", "nodeInfo", "kubeletVersion") or ""
        ),
        _Column("Internal-IP", "string", lambda n: _node_address(n, "InternalIP"), 1),
        _Column("External-IP", "string", lambda n: _node_address(n, "ExternalIP"), 1),
        _Column(
            "OS-Image",
            "string",
            lambda n: _dig(n, "status", "nodeInfo", "osImage") or "<unknown>",
            1,
        ),
        _Column(
            "Kernel-Version",
            "string",
            lambda n: _dig(n, "status", "nodeInfo", "kernelVersion") or "<unknown>",
            1,
        ),
        _Column(
            "Container-Runtime",
            "string",
            lambda n: _dig(n, "status", "nodeInfo", "containerRuntimeVersion") or "<unknown>",
            1,
        ),
    ],
    "events": [
        _Column(
            "Last Seen",
            "string",
            lambda e: _age(e.get("lastTimestamp") or e.get("eventTime") or e.get("firstTimestamp")),
        ),
        _Column("Type", "string", lambda e: e.get("type") or ""),
        _Column("Reason", "string", lambda e: e.get("reason") or ""),
        _Column(
            "Object",
            "string",
            lambda e: (
                f"{str(_dig(e, 'involvedObject', 'kind') or '').lower()}/"
                f"{_dig(e, 'involvedObject', 'name') or ''}"
            ),
        ),
        _Column("Message", "string", lambda e: (e.get("message") or "").strip()),
        _Column("Subobject", "string", lambda e: _dig(e, "involvedObject", "fieldPath") or "", 1),
        _Column(
            "Source",
            "string",
            lambda e: ", ".join(
                x for x in (_dig(e, "source", "component"), _dig(e, "source", "host")) if x
            ),
            1,
        ),
        _Column("First Seen", "string", lambda e: _age(e.get("firstTimestamp")), 1),
        _Column("Count", "integer", lambda e: int(e.get("count") or 1), 1),
        _Column("Name", "string", lambda e: e["metadata"]["name"], 1, "name"),
    ],
    "namespaces": [
        _NAME,
        _Column("Status", "string", lambda n: _dig(n, "status", "phase") or ""),
        _AGE,
    ],
    "configmaps": [
        _NAME,
        _Column(
            "Data", "integer", lambda c: len(c.get("data") or {}) + len(c.get("binaryData") or {})
        ),
        _AGE,
    ],
    "leases": [
        _NAME,
        _Column("Holder", "string", lambda le: _dig(le, "spec", "holderIdentity") or ""),
        _AGE,
    ],
    "poddisruptionbudgets": [
        _NAME,
        _Column("Min Available", "string", lambda p: _int_or_str(_dig(p, "spec", "minAvailable"))),
        _Column(
            "Max Unavailable", "string", lambda p: _int_or_str(_dig(p, "spec", "maxUnavailable"))
        ),
        _Column(
            "Allowed Disruptions",
            "integer",
            lambda p: int(_dig(p, "status", "disruptionsAllowed") or 0),
        ),
        _AGE,
    ],
    "priorityclasses": [
        _NAME,
        _Column("Value", "integer", lambda p: int(p.get("value") or 0)),
        _Column("Global-Default", "boolean", lambda p: bool(p.get("globalDefault"))),
        _AGE,
        _Column("Preemption Policy", "string", lambda p: p.get("preemptionPolicy") or "", 1),
    ],
    # the scheduler-plugins PodGroup CRD's additionalPrinterColumns
    "podgroups.scheduling.x-k8s.io": [
        _NAME,
        _Column("Phase", "string", lambda g: _dig(g, "status", "phase")),
        _Column("MinMember", "integer", lambda g: _dig(g, "spec", "minMember")),
        _Column("Running", "integer", lambda g: _dig(g, "status", "running")),
        _Column("Succeeded", "integer", lambda g: _dig(g, "status", "succeeded")),
        _Column("Failed", "integer", lambda g: _dig(g, "status", "failed")),
        _AGE,
    ],
    # Volcano's PodGroup CRD's additionalPrinterColumns
    "podgroups.scheduling.volcano.sh": [
        _NAME,
        _Column("STATUS", "string", lambda g: _dig(g, "status", "phase")),
        _Column("minMember", "integer", lambda g: _dig(g, "spec", "minMember")),
        _Column("RUNNINGS", "integer", lambda g: _dig(g, "status", "running")),
        _Column("AGE", "date", _AGE.get),
        _Column("QUEUE", "string", lambda g: _dig(g, "spec", "queue"), 1),
    ],
}


def _partial(obj: JSON, version: str = "v1") -> JSON:
    return {
        "kind": "PartialObjectMetadata",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": _clone(obj.get("metadata") or {}),
    }


def to_table(
    res: Resource, items: list[JSON], list_meta: JSON | None, include: str, version: str
) -> JSON:
    columns = _TABLES.get(res.qualified) or _TABLES.get(res.plural) or [_NAME, _AGE]
    rows = []
    for obj in items:
        row: JSON = {"cells": [c.get(obj) for c in columns]}
        if include == "Object":
            row["object"] = obj
        elif include != "None":
            row["object"] = _partial(obj, version)
        rows.append(row)
    table: JSON = {
        "kind": "Table",
        "apiVersion": f"meta.k8s.io/{version}",
        "metadata": list_meta or {},
        "columnDefinitions": [
            {
                "name": c.name,
                "type": c.type,
                "format": c.format,
                "description": c.description or c.name,
                "priority": c.priority,
            }
            for c in columns
        ],
        "rows": rows,
    }
    return table


# --------------------------------------------------------------------------- the server


@dataclass
class RequestRecord:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, str]
    content_type: str
    body: Any  # the decoded JSON, the raw bytes if not JSON, None if empty


@dataclass
class _Injected:
    method: str
    pattern: re.Pattern[str]
    error: ApiError
    times: int


@dataclass
class _Delay:
    method: str
    pattern: re.Pattern[str]
    seconds: float
    times: int


@dataclass
class _Answer:
    code: int
    body: Any  # JSON, or bytes (text/plain)
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)


class ApiServer:
    """The emulator: `with ApiServer() as api:` starts it on 127.0.0.1 and a free port.

    Every Python-side method takes `lock` (re-entrant; tests may hold it to read several
    objects consistently) and returns copies."""

    def __init__(
        self,
        *,
        graceful_pod_deletion: bool = False,
        watch_timeout_s: float = 1800.0,
        version: str = KUBE_VERSION,
        crds: Iterable[str] = CUSTOM,
    ):
        self.graceful_pod_deletion = graceful_pod_deletion
        self.watch_timeout_s = watch_timeout_s
        self.version = version
        unknown = set(crds) - set(CUSTOM)
        if unknown:
            raise ValueError(f"the emulator has no CRD {sorted(unknown)}; it has {CUSTOM}")
        # The CRDs installed: the others are absent from discovery, and 404 as on a cluster
        # without them.
        self.served = tuple(r for r in RESOURCES if not r.custom or r.qualified in crds)
        self._groups: dict[str, list[str]] = {}
        for r in self.served:
            if r.group and r.version not in self._groups.setdefault(r.group, []):
                self._groups[r.group].append(r.version)
        self.lock = threading.RLock()
        self.request_log: list[RequestRecord] = []
        self.server_errors: list[str] = []  # tracebacks of 500s the emulator itself caused
        self._rv = 0
        self._compacted = 0
        self._store: dict[Resource, dict[tuple[str, str], JSON]] = {r: {} for r in RESOURCES}
        self._history: list[_Change] = []
        self._watches: list[_Watch] = []
        self._injected: list[_Injected] = []
        self._delays: list[_Delay] = []
        self._proxies: dict[tuple[str, str], str] = {}  # (namespace, service) -> upstream URL
        self._logs: dict[tuple[str, str], str] = {}  # (namespace, pod) -> its container's output
        self._sleeping: set[threading.Event] = set()  # one per request sleeping on a delay
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._connections: set[socket.socket] = set()
        self.url = ""
        for ns in ("default", "kube-system", "kube-public", "kube-node-lease"):
            self._create(NAMESPACES, None, {"metadata": {"name": ns}})
        for name, value in (
            ("system-cluster-critical", 2000000000),
            ("system-node-critical", 2000001000),
        ):
            self._create(
                PRIORITY_CLASSES,
                None,
                {
                    "metadata": {"name": name},
                    "value": value,
                    "description": "Used for system critical pods that must not be moved "
                    "from their current node.",
                },
                system=True,
            )

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ApiServer:
        if self._httpd is not None:
            return self
        server = _HttpServer(("127.0.0.1", 0), _Handler)
        server.api = self
        self._httpd = server
        host, port = server.server_address[:2]
        self.url = f"http://{host}:{port}"
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self.clear_delays()
        self.drop_watches()
        self._httpd.shutdown()
        self._httpd.server_close()
        with self.lock:
            connections = list(self._connections)
        for conn in connections:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> ApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubeconfig(self, path: str | Path, namespace: str = "default") -> Path:
        """Write a kubeconfig for this server (plain http, a token nobody checks)."""
        path = Path(path)
        path.write_text(
            "apiVersion: v1\n"
            "kind: Config\n"
            "clusters:\n"
            "- name: emulator\n"
            "  cluster:\n"
            f"    server: {self.url}\n"
            "users:\n"
            "- name: emulator\n"
            "  user:\n"
            "    token: emulator-token\n"
            "contexts:\n"
            "- name: emulator\n"
            "  context:\n"
            "    cluster: emulator\n"
            "    user: emulator\n"
            f"    namespace: {namespace}\n"
            "current-context: emulator\n"
        )
        return path

    # ------------------------------------------------------------------ Python-side handle

    @property
    def resource_version(self) -> int:
        with self.lock:
            return self._rv

    @property
    def requests(self) -> list[tuple[str, str]]:
        """(method, path) of every request so far, the query left out (see request_log)."""
        with self.lock:
            return [(r.method, r.path) for r in self.request_log]

    def create(self, obj: JSON, namespace: str | None = None) -> JSON:
        """Create as a POST would (defaults, validation, admission); the kind comes from
        apiVersion/kind, the namespace from the object or `namespace` or `default`."""
        res = self._kind(obj)
        ns = None
        if res.namespaced:
            ns = namespace or _dig(obj, "metadata", "namespace") or "default"
        return _clone(self._create(res, ns, _clone(obj)))

    def get(self, resource: str, name: str, namespace: str | None = None) -> JSON | None:
        """A copy of the object, or None."""
        res = resolve(resource, self.served)
        with self.lock:
            found = self._store[res].get(((namespace or "default") if res.namespaced else "", name))
            return _clone(found) if found is not None else None

    def objects(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> list[JSON]:
        """Copies of the objects, sorted by namespace and name; namespace None or "" is all."""
        res = resolve(resource, self.served)
        labels = LabelSelector.parse(label_selector)
        fields = FieldSelector.parse(res, field_selector)
        with self.lock:
            out = []
            for key in sorted(self._store[res], key=_order):
                obj = self._store[res][key]
                if namespace and key[0] != namespace:
                    continue
                if labels.matches(_labels(obj)) and fields.matches(obj):
                    out.append(_clone(obj))
            return out

    def update(self, obj: JSON, subresource: str | None = None) -> JSON:
        """Replace as a PUT would (`subresource="status"` for /status)."""
        res = self._kind(obj)
        md = obj.get("metadata") or {}
        ns = (md.get("namespace") or "default") if res.namespaced else None
        return _clone(self._update(res, ns, md.get("name", ""), _clone(obj), subresource))

    def patch(
        self,
        resource: str,
        name: str,
        patch: Any,
        namespace: str | None = None,
        *,
        patch_type: str = MERGE_PATCH,
        subresource: str | None = None,
    ) -> JSON:
        """Patch as a PATCH would; `patch_type` is the content type."""
        res = resolve(resource, self.served)
        ns = (namespace or "default") if res.namespaced else None
        return _clone(
            self._patch(res, ns, name, json.dumps(patch).encode(), patch_type, subresource)
        )

    def delete(self, resource: str, name: str, namespace: str | None = None) -> JSON | None:
        """Remove the object at once (no grace period); the deleted object, or None."""
        res = resolve(resource, self.served)
        ns = (namespace or "default") if res.namespaced else None
        try:
            return _clone(self._delete(res, ns, name, {}, force=True))
        except ApiError as e:
            if e.code == 404:
                return None
            raise

    def proxy_service(self, namespace: str, service: str, upstream: str) -> None:
        """Serve `services/{service}/proxy/...` by forwarding to `upstream` (a base URL): the
        endpoints a real API server would find behind the Service."""
        with self.lock:
            self._proxies[(namespace, service)] = upstream.rstrip("/")

    def set_log(self, namespace: str, pod: str, text: str) -> None:
        """What `pods/{pod}/log` answers: what a kubelet would have of the container."""
        with self.lock:
            self._logs[(namespace, pod)] = text

    def set_phase(self, namespace: str, name: str, phase: str) -> JSON:
        """What a kubelet would write: the pod's phase and its Ready conditions."""
        with self.lock:
            current = self._store[PODS].get((namespace or "default", name))
            if current is None:
                raise not_found(PODS, name)
            # What is sent is the stored pod with a new status: the top level and metadata are
            # copied (the write changes them), the rest is shared with the stored pod, which
            # nothing changes in place.
            pod = dict(current)
            pod["metadata"] = dict(current["metadata"])
            status = pod["status"] = _clone(current.get("status") or {})
            status["phase"] = phase
            now = _timestamp()
            conditions = [
                c
                for c in status.get("conditions") or []
                if c.get("type") not in ("Ready", "ContainersReady", "Initialized")
            ]
            ready = "True" if phase == "Running" else "False"
            for ctype in ("Initialized", "Ready", "ContainersReady"):
                cond: JSON = {
                    "type": ctype,
                    "status": "True" if ctype == "Initialized" else ready,
                    "lastProbeTime": None,
                    "lastTransitionTime": now,
                }
                if ready == "False" and ctype != "Initialized" and phase in ("Succeeded", "Failed"):
                    cond["reason"] = "PodCompleted"
                conditions.append(cond)
            status["conditions"] = conditions
            if phase in ("Running", "Succeeded", "Failed"):
                status.setdefault("startTime", now)
            return _clone(self._update(PODS, namespace, name, pod, "status"))

    def compact(self) -> int:
        """Forget history: a watch, continue token or exact list from an older
        resourceVersion than now gets 410 Gone. Returns the compaction point."""
        with self.lock:
            self._compacted = self._rv
            self._history.clear()
            return self._compacted

    def drop_watches(self, *, bookmark: bool = False) -> int:
        """End every open watch stream cleanly, as the server does at a watch's timeout
        (with a last BOOKMARK where allowed if `bookmark`). Returns how many."""
        with self.lock:
            watches, self._watches = self._watches, []
            for w in watches:
                if bookmark and w.bookmarks:
                    w.bookmark(self._rv)
                w.close()
            return len(watches)

    def bookmark(self) -> int:
        """Send a BOOKMARK at the current resourceVersion to every watch that allows them."""
        with self.lock:
            sent = 0
            for w in self._watches:
                if w.bookmarks:
                    w.bookmark(self._rv)
                    sent += 1
            return sent

    def watch_count(self, resource: str | None = None) -> int:
        """Open watches (of `resource`)."""
        with self.lock:
            if resource is None:
                return len(self._watches)
            res = resolve(resource, self.served)
            return sum(1 for w in self._watches if w.res is res)

    def inject_error(
        self,
        method: str,
        path_regex: str,
        code: int = 500,
        reason: str = "InternalError",
        message: str = "Internal error occurred: injected by the test",
        times: int = 1,
    ) -> None:
        """Answer the next `times` requests whose method and path (re.search, no query)
        match with this error Status instead of serving them."""
        with self.lock:
            self._injected.append(
                _Injected(
                    method.upper(),
                    re.compile(path_regex),
                    ApiError(code, reason, message, {}),
                    times,
                )
            )

    def inject_delay(self, method: str, path_regex: str, seconds: float, times: int = 1) -> None:
        """Serve the next `times` requests whose method and path (re.search, no query) match
        only after sleeping `seconds`. The request is logged when it arrives; the sleep holds no
        lock (other requests and watches go on) and does not watch the client: a request whose
        client is gone, even killed, is still served when the sleep ends, as a real API server
        may complete a request it has received (the answer then goes nowhere). An error
        injected for the same request is answered after the sleep."""
        with self.lock:
            self._delays.append(_Delay(method.upper(), re.compile(path_regex), seconds, times))

    def clear_delays(self) -> int:
        """Drop the delays not yet used and end the sleeps in progress (those requests are
        served at once). Returns how many requests were sleeping. `stop()` does this too."""
        with self.lock:
            self._delays = []
            sleeping = list(self._sleeping)
            self._sleeping.clear()
        for wake in sleeping:
            wake.set()
        return len(sleeping)

    def wait_until(self, check: Callable[[], T], timeout: float = 5.0, interval: float = 0.01) -> T:
        """Poll `check` until it returns something truthy; AssertionError on timeout."""
        deadline = time.monotonic() + timeout
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout}s waiting for {check}")
            time.sleep(interval)

    # ------------------------------------------------------------------ store

    def _kind(self, obj: JSON) -> Resource:
        found = _BY_KIND.get((str(obj.get("apiVersion")), str(obj.get("kind"))))
        if found is None or found not in self.served:
            raise KeyError(f"the emulator serves no {obj.get('apiVersion')}/{obj.get('kind')}")
        return found

    def _ns_key(self, res: Resource, namespace: str | None, name: str) -> tuple[str, str]:
        return ((namespace or "") if res.namespaced else "", name)

    def _current(self, res: Resource, namespace: str | None, name: str) -> JSON:
        found = self._store[res].get(self._ns_key(res, namespace, name))
        if found is None:
            raise not_found(res, name)
        return found

    def _commit(self, res: Resource, etype: str, obj: JSON, old: JSON | None) -> JSON:
        """Store `obj` (which the store owns from now on: the caller built it for this write
        and keeps no reference it will change) and tell the watches. Returns the stored
        object itself, not a copy: stored objects are never changed in place (a write
        replaces them), so the HTTP side can encode it as it is; the Python-side methods,
        whose callers may change what they get, return copies."""
        self._rv += 1
        if etype == "DELETED":
            obj = _clone(obj)  # the stored one, still the previous state in the history
        obj["metadata"]["resourceVersion"] = str(self._rv)
        key = _key(obj)
        if etype == "DELETED":
            self._store[res].pop(key, None)
        else:
            self._store[res][key] = obj
        change = _Change(self._rv, etype, res, obj, old)
        self._history.append(change)
        for w in self._watches:
            w.deliver(change)
        return obj

    def _decode(
        self,
        res: Resource,
        body: Any,
        namespace: str | None,
        kind: str | None = None,
        version: str | None = None,
    ) -> JSON:
        kind, version = kind or res.kind, version or res.api_version
        if not isinstance(body, dict):
            raise bad_request(
                f"the object provided is unrecognized (must be of type {kind}): couldn't get "
                "version/kind; json parse error: the body is not a JSON object"
            )
        obj = body
        if obj.get("apiVersion") not in (None, "", version):
            raise bad_request(
                f"the API version in the data ({obj['apiVersion']}) does not match the expected "
                f"API version ({version})"
            )
        if obj.get("kind") not in (None, "", kind):
            raise bad_request(
                f"the object provided is unrecognized (must be of type {kind}): "
                f'{obj["kind"]} in version "{version}" cannot be handled as a {kind}'
            )
        obj["apiVersion"], obj["kind"] = version, kind
        md = obj.get("metadata")
        if md is None:
            md = obj["metadata"] = {}
        if not isinstance(md, dict):
            raise bad_request(
                f"the object provided is unrecognized (must be of type {kind}): metadata is not "
                "an object"
            )
        if res.namespaced:
            if md.get("namespace") and namespace is not None and md["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            if namespace is not None:
                md["namespace"] = namespace
        else:
            md.pop("namespace", None)
        return obj

    def _create(
        self,
        res: Resource,
        namespace: str | None,
        body: Any,
        system: bool = False,
        strict: bool = False,
    ) -> JSON:
        obj = self._decode(res, body, namespace)
        self._prune(res, obj, strict)
        md = obj["metadata"]
        with self.lock:
            if not md.get("name"):
                prefix = md.get("generateName")
                if not prefix:
                    raise invalid(
                        res.kind,
                        "",
                        [
                            FieldError(
                                "metadata.name", "required", "name or generateName is required"
                            )
                        ],
                        res.group,
                    )
                while True:
                    md["name"] = prefix + "".join(random.choices(_GENERATE_ALPHABET, k=5))
                    if self._ns_key(res, namespace, md["name"]) not in self._store[res]:
                        break
            self._validate_name(res, md["name"])
            if md.get("resourceVersion"):
                why = "resourceVersion should not be set on objects to be created"
                raise ApiError(
                    500,
                    "InternalError",
                    f"Internal error occurred: {why}",
                    {"causes": [{"message": why}]},
                )
            for f in (
                "uid",
                "resourceVersion",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generation",
                "managedFields",
                "selfLink",
            ):
                md.pop(f, None)
            md["creationTimestamp"] = _timestamp()
            md["uid"] = str(uuid.uuid4())
            if res.generation:
                md["generation"] = 1
            self._prepare_create(res, obj)
            self._validate(res, obj, None)
            self._canonicalize(res, obj)
            if res is PODS:
                obj["status"]["qosClass"] = _qos_class(obj)
            self._admit(res, obj, system)
            if self._ns_key(res, namespace, md["name"]) in self._store[res]:
                raise already_exists(res, md["name"])
            if res.namespaced and namespace and ("", namespace) not in self._store[NAMESPACES]:
                self._create(NAMESPACES, None, {"metadata": {"name": namespace}})
            out = self._commit(res, "ADDED", obj, None)
            self._after_write(res, out)
            return out

    @staticmethod
    def _canonicalize(res: Resource, obj: JSON) -> None:
        """Resource quantities as the server writes them back (canonical strings)."""
        if res is PODS:
            spec = obj.get("spec") or {}
            for list_name in ("initContainers", "containers"):
                for c in spec.get(list_name) or []:
                    resources = c.get("resources") if isinstance(c, dict) else None
                    if isinstance(resources, dict):
                        for part in ("limits", "requests"):
                            if part in resources:
                                _set_changed(
                                    resources, part, _canonical_map(resources[part], "Pod")
                                )
            if "overhead" in spec:
                _set_changed(spec, "overhead", _canonical_map(spec["overhead"], "Pod"))
        elif res.plural == "nodes" and isinstance(obj.get("status"), dict):
            for part in ("capacity", "allocatable"):
                if part in obj["status"]:
                    _set_changed(obj["status"], part, _canonical_map(obj["status"][part], "Node"))

    @staticmethod
    def _prune(res: Resource, obj: JSON, strict: bool) -> None:
        """Drop the fields the kind does not declare (400 with fieldValidation=Strict)."""
        unknown = []
        for k in list(obj):
            if k not in ("apiVersion", "kind", "metadata") and k not in _TOP_FIELDS[res.plural]:
                unknown.append(k)
                del obj[k]
        md = obj.get("metadata") or {}
        for k in list(md):
            if k not in _META_FIELDS:
                unknown.append(f"metadata.{k}")
                del md[k]
        for part, fields in _CUSTOM_SCHEMAS.get(res.qualified, {}).items():
            if isinstance(obj.get(part), dict):
                for k in list(obj[part]):
                    if k not in fields:
                        unknown.append(f"{part}.{k}")
                        del obj[part][k]
        if unknown and strict:
            raise bad_request(
                f'{res.kind} in version "{res.version}" cannot be handled as a {res.kind}: strict '
                "decoding error: " + ", ".join(f'unknown field "{u}"' for u in unknown)
            )

    def _validate_name(self, res: Resource, name: str) -> None:
        if res is NAMESPACES:
            ok, msg = bool(_DNS_LABEL.match(name)) and len(name) <= 63, _LABEL_MSG
        else:
            ok, msg = bool(_DNS_SUBDOMAIN.match(name)) and len(name) <= 253, _SUBDOMAIN_MSG
        if not ok:
            raise invalid(
                res.kind, name, [FieldError("metadata.name", "invalid", msg, name)], res.group
            )

    def _update(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        body: Any,
        subresource: str | None,
        strict: bool = False,
    ) -> JSON:
        obj = self._decode(res, body, namespace)
        self._prune(res, obj, strict)
        md = obj["metadata"]
        if md.get("name") != name:
            raise bad_request(
                f"the name of the object ({md.get('name', '')}) does not match the name on the "
                f"URL ({name})"
            )
        with self.lock:
            old = self._current(res, namespace, name)
            rv = md.get("resourceVersion")
            if rv:
                if rv != old["metadata"]["resourceVersion"]:
                    raise conflict(res, name, _STALE)
            elif res.custom:
                raise invalid(
                    res.kind,
                    name,
                    [
                        FieldError(
                            "metadata.resourceVersion",
                            "invalid",
                            "must be specified for an update",
                            0,
                        )
                    ],
                    res.group,
                )
            return self._replace(res, old, obj, subresource)

    def _replace(self, res: Resource, old: JSON, new: JSON, subresource: str | None) -> JSON:
        """Write `new` over the stored `old`. `new` is the caller's own (a parsed body, a copy,
        a patch's result), so it is changed and stored as it is, not copied."""
        md, old_md = new["metadata"], old["metadata"]
        if md.get("uid") and md["uid"] != old_md["uid"]:
            raise invalid(
                res.kind,
                old_md["name"],
                [FieldError("metadata.uid", "invalid", "field is immutable", md["uid"])],
                res.group,
            )
        for f in (
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "namespace",
        ):
            if f in old_md:
                md[f] = old_md[f]
            else:
                md.pop(f, None)
        md["resourceVersion"] = old_md["resourceVersion"]
        if subresource == "status":
            # Only the status (for pods, labels and annotations too) comes from `new`: the rest
            # is the stored object's, shared rather than copied (stored objects are never
            # changed in place; the top level and metadata, which this write changes, are new).
            merged = dict(old)
            merged["metadata"] = dict(old_md)
            if "status" in new:
                merged["status"] = new["status"]
            else:
                merged.pop("status", None)
            if res is PODS:  # the pods/status strategy lets labels and annotations through
                for f in ("labels", "annotations"):
                    if f in md:
                        merged["metadata"][f] = md[f]
                    else:
                        merged["metadata"].pop(f, None)
            new = merged
        else:
            if res.has_status:
                if "status" in old:
                    new["status"] = _clone(old["status"])
                else:
                    new.pop("status", None)
            self._prepare_update(res, old, new)
            self._validate(res, new, old)
        self._canonicalize(res, new)
        if res.generation:

            def body(o: JSON) -> JSON:
                return {
                    k: v
                    for k, v in o.items()
                    if k not in ("metadata", "status", "kind", "apiVersion")
                }

            if body(new) != body(old):
                new["metadata"]["generation"] = int(old_md.get("generation") or 0) + 1
        if _strip_rv(new) == _strip_rv(old):
            return old  # no change: no write, no event
        out = self._commit(res, "MODIFIED", new, old)
        self._after_write(res, out)
        return out

    def _patch(
        self,
        res: Resource,
        namespace: str | None,
        name: str,
        raw: bytes,
        content_type: str,
        subresource: str | None,
        strict: bool = False,
    ) -> JSON:
        accepted = (
            [JSON_PATCH, MERGE_PATCH] if res.custom else [JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH]
        )
        if content_type not in accepted:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types "
                f"include: {', '.join([*accepted, APPLY_PATCH])}",
                {},
            )
        try:
            patch = json.loads(raw or b"null")
        except ValueError as e:
            raise bad_request(f"error decoding patch: {e}") from None
        with self.lock:
            old = self._current(res, namespace, name)
            try:
                if content_type == JSON_PATCH:
                    patched = json_patch(old, patch)
                elif content_type == MERGE_PATCH:
                    if not isinstance(patch, dict):
                        raise bad_request(
                            "error decoding patch: the merge patch is not a JSON object"
                        )
                    patched = merge_patch(old, patch)
                else:
                    if not isinstance(patch, dict):
                        raise bad_request(
                            "error decoding patch: the strategic merge patch is not a JSON object"
                        )
                    patched = strategic_merge_patch(old, patch)
            except ValueError as e:
                raise bad_request(str(e)) from None
            except PatchError as e:
                raise ApiError(422, "Invalid", str(e), {}) from None
            if not isinstance(patched, dict) or not isinstance(patched.get("metadata"), dict):
                raise ApiError(422, "Invalid", "the patched object has no metadata", {})
            self._prune(res, patched, strict)
            md = patched["metadata"]
            if md.get("name") != name:
                raise bad_request(
                    f"the name of the object ({md.get('name', '')}) does not match the name on "
                    f"the URL ({name})"
                )
            if patched.get("kind") != res.kind or patched.get("apiVersion") != res.api_version:
                raise bad_request("the patch may not change apiVersion or kind")
            rv = md.get("resourceVersion")
            if rv and rv != old["metadata"]["resourceVersion"]:
                raise conflict(res, name, _STALE)
            if res.namespaced and md.get("namespace") != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            return self._replace(res, old, patched, subresource)

    def _delete(
        self, res: Resource, namespace: str | None, name: str, options: JSON, force: bool = False
    ) -> JSON:
        with self.lock:
            old = self._current(res, namespace, name)
            pre = options.get("preconditions") or {}
            if pre.get("uid") and pre["uid"] != old["metadata"]["uid"]:
                raise conflict(
                    res,
                    name,
                    f"Precondition failed: UID in precondition: {pre['uid']}, UID in object meta:"
                    f" {old['metadata']['uid']}",
                )
            if (
                pre.get("resourceVersion")
                and pre["resourceVersion"] != old["metadata"]["resourceVersion"]
            ):
                raise conflict(
                    res,
                    name,
                    "Precondition failed: ResourceVersion in precondition: "
                    f"{pre['resourceVersion']}, ResourceVersion in object meta: "
                    f"{old['metadata']['resourceVersion']}",
                )
            if res is PODS and self.graceful_pod_deletion and not force:
                grace = options.get("gracePeriodSeconds")
                if grace is None:
                    grace = _dig(old, "spec", "terminationGracePeriodSeconds")
                grace = 30 if grace is None else int(grace)
                phase = _dig(old, "status", "phase")
                if (
                    grace > 0
                    and _dig(old, "spec", "nodeName")
                    and phase not in ("Succeeded", "Failed")
                ):
                    if old["metadata"].get("deletionTimestamp"):
                        return old
                    new = _clone(old)
                    new["metadata"]["deletionTimestamp"] = _timestamp(
                        _now() + dt.timedelta(seconds=grace)
                    )
                    new["metadata"]["deletionGracePeriodSeconds"] = grace
                    new["spec"]["terminationGracePeriodSeconds"] = grace
                    out = self._commit(res, "MODIFIED", new, old)
                    self._after_write(res, out)
                    return out
            out = self._commit(res, "DELETED", old, old)
            self._after_write(res, out)
            return out

    # ------------------------------------------------------------------ strategies

    def _prepare_create(self, res: Resource, obj: JSON) -> None:
        if res is PODS:
            obj["status"] = {"phase": "Pending"}
            self._default_pod(obj)
            tolerations = obj["spec"].setdefault("tolerations", [])
            for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"):
                if not any(
                    t.get("key") == key and t.get("effect") in (None, "", "NoExecute")
                    for t in tolerations
                ):
                    tolerations.append(
                        {
                            "key": key,
                            "operator": "Exists",
                            "effect": "NoExecute",
                            "tolerationSeconds": 300,
                        }
                    )
        elif res.custom and res.has_status:
            obj.pop("status", None)
        elif res is NAMESPACES:
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
        elif res is PRIORITY_CLASSES:
            obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
        elif res is PDBS:
            obj.pop("status", None)
            obj["status"] = {
                "disruptionsAllowed": 0,
                "currentHealthy": 0,
                "desiredHealthy": 0,
                "expectedPods": 0,
            }

    def _prepare_update(self, res: Resource, old: JSON, new: JSON) -> None:
        if res is PODS:
            self._default_pod(new)
            self._canonicalize(res, new)  # "4" and 4 are the same quantity
            allowed = _clone(new.get("spec") or {})
            old_spec = old.get("spec") or {}
            for list_name in ("containers", "initContainers"):
                olds = old_spec.get(list_name) or []
                for i, c in enumerate(allowed.get(list_name) or []):
                    if i < len(olds) and isinstance(c, dict):
                        c["image"] = olds[i].get("image")
            for f in ("activeDeadlineSeconds", "tolerations"):
                if f in old_spec:
                    allowed[f] = _clone(old_spec[f])
                else:
                    allowed.pop(f, None)
            gates = allowed.get("schedulingGates") or []
            if all(g in (old_spec.get("schedulingGates") or []) for g in gates):
                if "schedulingGates" in old_spec:
                    allowed["schedulingGates"] = _clone(old_spec["schedulingGates"])
                else:
                    allowed.pop("schedulingGates", None)
            if allowed != old_spec:
                changed = sorted(
                    k for k in set(allowed) | set(old_spec) if allowed.get(k) != old_spec.get(k)
                )
                raise invalid(
                    "Pod",
                    old["metadata"]["name"],
                    [
                        FieldError(
                            "spec",
                            "forbidden",
                            "pod updates may not change fields other than "
                            "`spec.containers[*].image`,"
                            "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,"
                            "`spec.tolerations` (only additions to existing tolerations),"
                            "`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it "
                            "was previously negative)\n  changed: "
                            + ", ".join(f"spec.{k}" for k in changed),
                        )
                    ],
                )

    @staticmethod
    def _default_pod(pod: JSON) -> None:
        spec = pod.get("spec")
        if not isinstance(spec, dict):
            spec = pod["spec"] = {}
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("dnsPolicy", "ClusterFirst")
        spec.setdefault("securityContext", {})
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("enableServiceLinks", True)
        for list_name in ("initContainers", "containers"):
            for c in spec.get(list_name) or []:
                if not isinstance(c, dict):
                    continue
                c.setdefault("terminationMessagePath", "/dev/termination-log")
                c.setdefault("terminationMessagePolicy", "File")
                image = str(c.get("image") or "")
                tag = image.rsplit("/", 1)[-1]
                latest = "@" not in image and (":" not in tag or tag.endswith(":latest"))
                c.setdefault("imagePullPolicy", "Always" if latest else "IfNotPresent")
                resources = c.get("resources")
                if not isinstance(resources, dict):
                    resources = c["resources"] = {}
                limits = resources.get("limits")
                if isinstance(limits, dict) and limits:
                    requests = resources.setdefault("requests", {})
                    if isinstance(requests, dict):
                        for k, v in limits.items():
                            requests.setdefault(k, v)
                for port in c.get("ports") or []:
                    if isinstance(port, dict):
                        port.setdefault("protocol", "TCP")

    def _validate(self, res: Resource, obj: JSON, old: JSON | None) -> None:
        name = obj["metadata"]["name"]
        errors: list[FieldError] = []
        if res is PODS:
            spec = obj.get("spec") or {}
            containers = spec.get("containers")
            if not containers:
                errors.append(FieldError("spec.containers", "required"))
            for list_name in ("initContainers", "containers"):
                for i, c in enumerate(spec.get(list_name) or []):
                    base = f"spec.{list_name}[{i}]"
                    if not isinstance(c, dict):
                        raise bad_request(
                            f'Pod in version "v1" cannot be handled as a Pod: {base} is not an '
                            "object"
                        )
                    if not c.get("name"):
                        errors.append(FieldError(f"{base}.name", "required"))
                    if not c.get("image"):
                        errors.append(FieldError(f"{base}.image", "required"))
                    errors.extend(
                        _validate_resources(c.get("resources") or {}, f"{base}.resources")
                    )
        elif res.plural == "nodes":
            for part in ("capacity", "allocatable"):
                for value in (_dig(obj, "status", part) or {}).values():
                    _quantity_or_400(value, "Node")
        elif res.plural == "events":
            involved_ns = _dig(obj, "involvedObject", "namespace") or ""
            ns = obj["metadata"].get("namespace") or ""
            if (involved_ns and involved_ns != ns) or (
                not involved_ns and ns not in ("", "default")
            ):
                errors.append(
                    FieldError(
                        "involvedObject.namespace",
                        "invalid",
                        "does not match event.namespace",
                        involved_ns,
                    )
                )
        elif res.qualified in _CUSTOM_SCHEMAS:
            for part, fields in _CUSTOM_SCHEMAS[res.qualified].items():
                section = obj.get(part)
                if section is not None and not isinstance(section, dict):
                    errors.append(
                        FieldError(
                            part,
                            "invalid",
                            f'{part} in body must be of type object: "{type(section).__name__}"',
                            section,
                        )
                    )
                    continue
                for k, v in (section or {}).items():
                    kind = fields[k]
                    if v is not None and (
                        isinstance(v, bool) or not isinstance(v, _JSON_TYPES[kind])
                    ):
                        shown = {
                            str: "string",
                            int: "integer",
                            float: "number",
                            list: "array",
                            dict: "object",
                            bool: "boolean",
                        }.get(type(v), "null")
                        errors.append(
                            FieldError(
                                f"{part}.{k}",
                                "invalid",
                                f'{part}.{k} in body must be of type {kind}: "{shown}"',
                                shown,
                            )
                        )
        elif res is PRIORITY_CLASSES:
            value = obj.get("value")
            if isinstance(value, bool) or not isinstance(value, int):
                errors.append(FieldError("value", "required"))
            elif value > 1_000_000_000 and not name.startswith("system-"):
                errors.append(
                    FieldError(
                        "value",
                        "forbidden",
                        "maximum allowed value of a user defined priority is 1000000000",
                    )
                )
        if errors:
            raise invalid(res.kind, name, errors, res.group)

    def _admit(self, res: Resource, obj: JSON, system: bool) -> None:
        if res is PRIORITY_CLASSES and not system and obj["metadata"]["name"].startswith("system-"):
            raise forbidden(
                res,
                obj["metadata"]["name"],
                'priority class names with the "system-" prefix are reserved',
            )
        if res is not PODS:
            return
        spec = obj["spec"]
        name = spec.get("priorityClassName")
        classes = self._store[PRIORITY_CLASSES]
        if name:
            pc = classes.get(("", name))
            if pc is None:
                raise forbidden(
                    PODS, obj["metadata"]["name"], f"no PriorityClass with name {name} was found"
                )
        else:
            pc = next((c for c in classes.values() if c.get("globalDefault")), None)
            if pc is not None:
                spec["priorityClassName"] = pc["metadata"]["name"]
        value = int(pc.get("value", 0)) if pc else 0
        if spec.get("priority") is not None and spec["priority"] != value:
            raise forbidden(
                PODS,
                obj["metadata"]["name"],
                f"the integer value of priority ({spec['priority']}) must not be provided in pod "
                f"spec; priority admission controller computed {value} from the given "
                "PriorityClass name",
            )
        spec["priority"] = value
        spec.setdefault(
            "preemptionPolicy", (pc or {}).get("preemptionPolicy") or "PreemptLowerPriority"
        )

    def _after_write(self, res: Resource, obj: JSON) -> None:
        if res is PODS or res is PDBS:
            self._sync_pdbs(obj["metadata"]["namespace"])

    # ------------------------------------------------------------------ disruption budgets

    @staticmethod
    def _pod_healthy(pod: JSON) -> bool:
        if _dig(pod, "status", "phase") != "Running" or _dig(pod, "metadata", "deletionTimestamp"):
            return False
        ready = [c for c in _dig(pod, "status", "conditions") or [] if c.get("type") == "Ready"]
        return not ready or ready[0].get("status") != "False"

    def _pdb_status(self, pdb: JSON) -> JSON:
        ns = pdb["metadata"]["namespace"]
        selector = _dig(pdb, "spec", "selector")
        pods = [
            p
            for (pns, _), p in self._store[PODS].items()
            if pns == ns and selector_matches(selector, _labels(p))
        ]
        expected = sum(1 for p in pods if _dig(p, "status", "phase") not in ("Succeeded", "Failed"))
        healthy = sum(1 for p in pods if self._pod_healthy(p))
        spec = pdb.get("spec") or {}
        if spec.get("minAvailable") is not None:
            desired = _scaled(spec["minAvailable"], expected)
        elif spec.get("maxUnavailable") is not None:
            desired = max(0, expected - _scaled(spec["maxUnavailable"], expected))
        else:
            desired = 0
        allowed = max(0, healthy - desired)
        generation = pdb["metadata"].get("generation", 1)
        old = pdb.get("status") or {}
        status_word = "True" if allowed > 0 else "False"
        old_cond = next(
            (c for c in old.get("conditions") or [] if c.get("type") == "DisruptionAllowed"), None
        )
        since = (
            old_cond.get("lastTransitionTime")
            if old_cond and old_cond.get("status") == status_word
            else _timestamp()
        )
        return {
            "observedGeneration": generation,
            "disruptionsAllowed": allowed,
            "currentHealthy": healthy,
            "desiredHealthy": desired,
            "expectedPods": expected,
            "conditions": [
                {
                    "type": "DisruptionAllowed",
                    "status": status_word,
                    "reason": "SufficientPods" if allowed > 0 else "InsufficientPods",
                    "message": "",
                    "observedGeneration": generation,
                    "lastTransitionTime": since,
                }
            ],
        }

    def _sync_pdbs(self, namespace: str) -> None:
        for (ns, _), pdb in list(self._store[PDBS].items()):
            if ns != namespace:
                continue
            status = self._pdb_status(pdb)
            if status != pdb.get("status"):
                new = _clone(pdb)
                new["status"] = status
                self._commit(PDBS, "MODIFIED", new, pdb)

    # ------------------------------------------------------------------ pod subresources

    def _bind(self, namespace: str, name: str, body: Any, via_pod: bool = True) -> JSON:
        if not isinstance(body, dict):
            raise bad_request("the object provided is unrecognized (must be of type Binding)")
        binding = self._decode(PODS, body, namespace, "Binding", "v1")
        md = binding["metadata"]
        if via_pod and md.get("name") != name:
            raise bad_request("name in URL does not match name in Binding object")
        name = md.get("name") or name
        target = binding.get("target") if isinstance(binding.get("target"), dict) else {}
        errors = []
        if target.get("kind") not in (None, "", "Node"):
            errors.append(
                FieldError("target.kind", "unsupported", 'supported values: "Node"', target["kind"])
            )
        if not target.get("name"):
            errors.append(FieldError("target.name", "required"))
        if errors:
            raise invalid("Binding", name, errors)
        with self.lock:
            pod = self._current(PODS, namespace, name)
            if md.get("uid") and md["uid"] != pod["metadata"]["uid"]:
                raise conflict(
                    PODS,
                    name,
                    f"Precondition failed: UID in precondition: {md['uid']}, UID in object meta: "
                    f"{pod['metadata']['uid']}",
                )
            if (
                md.get("resourceVersion")
                and md["resourceVersion"] != pod["metadata"]["resourceVersion"]
            ):
                raise conflict(PODS, name, _STALE)
            if pod["metadata"].get("deletionTimestamp"):
                raise conflict(
                    PODS,
                    name,
                    f"pod {name} is being deleted, cannot be assigned to a host",
                    "pods/binding",
                )
            if _dig(pod, "spec", "nodeName"):
                raise conflict(
                    PODS,
                    name,
                    f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"',
                    "pods/binding",
                )
            if _dig(pod, "spec", "schedulingGates"):
                raise ApiError(
                    500,
                    "InternalError",
                    f"Internal error occurred: pod {name} has non-empty .spec.schedulingGates",
                    {"causes": [{"message": f"pod {name} has non-empty .spec.schedulingGates"}]},
                )
            # The pod's spec and status as they were, with the node, the annotations and the
            # condition; what the binding leaves alone is shared with the stored pod.
            new = dict(pod)
            new["metadata"] = dict(pod["metadata"])
            new["spec"] = {**pod["spec"], "nodeName": target["name"]}
            if md.get("annotations"):
                annotations = new["metadata"].setdefault("annotations", {})
                new["metadata"]["annotations"] = {**annotations, **md["annotations"]}
            status = new["status"] = _clone(pod["status"]) if "status" in pod else {}
            conditions = status.setdefault("conditions", [])
            existing = next((c for c in conditions if c.get("type") == "PodScheduled"), None)
            if existing is None:
                conditions.append(
                    {
                        "type": "PodScheduled",
                        "status": "True",
                        "lastProbeTime": None,
                        "lastTransitionTime": _timestamp(),
                    }
                )
            elif existing.get("status") != "True":
                existing.update({"status": "True", "lastTransitionTime": _timestamp()})
                existing.pop("reason", None)
                existing.pop("message", None)
            out = self._commit(PODS, "MODIFIED", new, pod)
            self._after_write(PODS, out)
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "code": 201,
            }

    def _evict(self, namespace: str, name: str, body: Any) -> JSON:
        if not isinstance(body, dict):
            raise bad_request("the object provided is unrecognized (must be of type Eviction)")
        if body.get("kind") not in (None, "", "Eviction") or body.get("apiVersion") not in (
            None,
            "",
            "policy/v1",
            "policy/v1beta1",
        ):
            raise bad_request("the object provided is unrecognized (must be of type Eviction)")
        md = body.get("metadata") or {}
        if md.get("name") != name:
            raise bad_request("name in URL does not match name in Eviction object")
        if md.get("namespace") and md["namespace"] != namespace:
            raise bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        options = body.get("deleteOptions") or {}
        success = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }
        with self.lock:
            pod = self._current(PODS, namespace, name)
            phase = _dig(pod, "status", "phase")
            if pod["metadata"].get("deletionTimestamp") or phase in (
                "Succeeded",
                "Failed",
                "Pending",
            ):
                self._delete(PODS, namespace, name, options)
                return success
            pdbs = [
                p
                for (ns, _), p in sorted(self._store[PDBS].items())
                if ns == namespace and selector_matches(_dig(p, "spec", "selector"), _labels(pod))
            ]
            if len(pdbs) > 1:
                raise ApiError(
                    500,
                    "InternalError",
                    "Internal error occurred: This pod has more than one PodDisruptionBudget, "
                    "which the eviction subresource does not support.",
                    {"causes": [{"message": _MANY_PDBS}]},
                )
            if pdbs:
                status = self._pdb_status(pdbs[0])
                unhealthy_ok = (
                    not self._pod_healthy(pod)
                    and status["currentHealthy"] >= status["desiredHealthy"]
                )
                if not unhealthy_ok and status["disruptionsAllowed"] <= 0:
                    raise ApiError(
                        429,
                        "TooManyRequests",
                        "Cannot evict pod as it would violate the pod's disruption budget.",
                        {
                            "causes": [
                                {
                                    "reason": "DisruptionBudget",
                                    "message": "The disruption budget "
                                    f"{pdbs[0]['metadata']['name']} "
                                    f"needs {status['desiredHealthy']} healthy pods and has "
                                    f"{status['currentHealthy']} currently",
                                }
                            ]
                        },
                    )
            self._delete(PODS, namespace, name, options)
            return success

    # ------------------------------------------------------------------ list and watch

    def _snapshot(self, res: Resource, rv: int) -> dict[tuple[str, str], JSON]:
        items = dict(self._store[res])
        for ch in reversed(self._history):
            if ch.rv <= rv:
                break
            if ch.res is not res:
                continue
            key = _key(ch.obj)
            if ch.type == "ADDED":
                items.pop(key, None)
            elif ch.old is not None:
                items[key] = ch.old
        return items

    def _list(
        self, res: Resource, namespace: str | None, query: dict[str, str]
    ) -> tuple[list[JSON], JSON]:
        labels = LabelSelector.parse(query.get("labelSelector", ""))
        fields = FieldSelector.parse(res, query.get("fieldSelector", ""))
        rv_param = query.get("resourceVersion", "")
        match = query.get("resourceVersionMatch", "")
        token = query.get("continue", "")
        limit = _int_param(query, "limit")
        with self.lock:
            start = ""
            if token:
                if rv_param:
                    raise bad_request(
                        "specifying resource version is not allowed when using continue"
                    )
                try:
                    decoded = json.loads(base64.b64decode(token + "=" * (-len(token) % 4)))
                    snapshot_rv, start = int(decoded["rv"]), str(decoded["start"])
                except (ValueError, KeyError, TypeError):
                    raise bad_request(
                        "continue key is not valid: incorrect encoded start resourceVersion "
                        "(version meta.k8s.io/v1)"
                    ) from None
                if snapshot_rv < self._compacted:
                    raise ApiError(
                        410,
                        "Expired",
                        "The provided continue parameter is too old to display a consistent list "
                        "result. You can start a new list without the continue parameter, or use "
                        "the continue token in this response to retrieve the remainder of the "
                        "results. Continuing with the provided token results in an inconsistent "
                        "list - objects that were created, modified, or deleted between the time "
                        "the first chunk was returned and now may show up in the list.",
                        {},
                    )
                store = self._snapshot(res, snapshot_rv)
            elif match:
                if match not in ("Exact", "NotOlderThan"):
                    raise bad_request(f"resourceVersionMatch: Unsupported value: {match!r}")
                if not rv_param:
                    raise invalid(
                        "ListOptions",
                        "",
                        [
                            FieldError(
                                "resourceVersionMatch",
                                "forbidden",
                                "resourceVersionMatch is forbidden unless resourceVersion is "
                                "provided",
                            )
                        ],
                        "meta.k8s.io",
                    )
                wanted = _rv_param(rv_param)
                if wanted > self._rv:
                    raise ApiError(
                        504,
                        "Timeout",
                        f"Too large resource version: {wanted}, current: {self._rv}",
                        {
                            "causes": [
                                {
                                    "reason": "ResourceVersionTooLarge",
                                    "message": "Too large resource version",
                                }
                            ],
                            "retryAfterSeconds": 1,
                        },
                    )
                if match == "Exact":
                    if wanted < self._compacted:
                        raise ApiError(
                            410,
                            "Expired",
                            "The resourceVersion for the provided list is too old.",
                            {},
                        )
                    snapshot_rv, store = wanted, self._snapshot(res, wanted)
                else:
                    snapshot_rv, store = self._rv, self._store[res]
            else:
                if rv_param and rv_param != "0" and _rv_param(rv_param) > self._rv:
                    raise ApiError(
                        504,
                        "Timeout",
                        f"Too large resource version: {rv_param}, current: {self._rv}",
                        {
                            "causes": [
                                {
                                    "reason": "ResourceVersionTooLarge",
                                    "message": "Too large resource version",
                                }
                            ],
                            "retryAfterSeconds": 1,
                        },
                    )
                snapshot_rv, store = self._rv, self._store[res]
            keys = sorted((k for k in store if not start or _order(k) > start), key=_order)
            items = []
            for k in keys:
                obj = store[k]
                if namespace is not None and k[0] != namespace:
                    continue
                if labels.matches(_labels(obj)) and fields.matches(obj):
                    items.append((k, _clone(obj)))
            meta: JSON = {"resourceVersion": str(snapshot_rv)}
            if limit and len(items) > limit:
                last = items[limit - 1][0]
                cont = {"v": "meta.k8s.io/v1", "rv": snapshot_rv, "start": _order(last) + "\u0000"}
                meta["continue"] = (
                    base64.b64encode(json.dumps(cont, separators=(",", ":")).encode())
                    .decode()
                    .rstrip("=")
                )
                meta["remainingItemCount"] = len(items) - limit
                items = items[:limit]
            return [o for _, o in items], meta

    def _watch(self, res: Resource, namespace: str | None, query: dict[str, str]) -> _Watch:
        labels = LabelSelector.parse(query.get("labelSelector", ""))
        fields = FieldSelector.parse(res, query.get("fieldSelector", ""))
        bookmarks = query.get("allowWatchBookmarks", "") in ("true", "1", "True")
        rv_param = query.get("resourceVersion", "")
        initial = query.get("sendInitialEvents", "")
        with self.lock:
            w = _Watch(res, namespace, labels, fields, bookmarks, self._rv)
            if initial == "true" or rv_param in ("", "0"):
                for key in sorted(self._store[res], key=_order):
                    obj = self._store[res][key]
                    if w.passes(obj):
                        w.send("ADDED", obj)
                if initial == "true":
                    w.bookmark(self._rv, {"k8s.io/initial-events-end": "true"})
            else:
                start = _rv_param(rv_param)
                if start < self._compacted:
                    error = ApiError(
                        410, "Expired", f"too old resource version: {start} ({self._compacted})"
                    )
                    w.queue.put(_event_line("ERROR", error.status))
                    w.close()
                    return w
                w.start_rv = start
                for ch in self._history:
                    w.deliver(ch)
            self._watches.append(w)
            return w

    def _unwatch(self, w: _Watch) -> None:
        with self.lock:
            if w in self._watches:
                self._watches.remove(w)

    def _deletecollection(
        self, res: Resource, namespace: str | None, query: dict[str, str], options: JSON
    ) -> JSON:
        with self.lock:
            items, _ = self._list(
                res,
                namespace,
                {k: v for k, v in query.items() if k in ("labelSelector", "fieldSelector")},
            )
            deleted = [
                self._delete(res, o["metadata"].get("namespace"), o["metadata"]["name"], options)
                for o in items
            ]
            return {
                "kind": f"{res.kind}List",
                "apiVersion": res.api_version,
                "metadata": {"resourceVersion": str(self._rv)},
                "items": deleted,
            }

    # ------------------------------------------------------------------ discovery

    def _api_resources(self, group: str, version: str) -> JSON:
        resources = []
        for r in self.served:
            if (r.group, r.version) != (group, version):
                continue
            entry: JSON = {
                "name": r.plural,
                "singularName": r.singular,
                "namespaced": r.namespaced,
                "kind": r.kind,
                "verbs": list(r.verbs),
            }
            if r.short_names:
                entry["shortNames"] = list(r.short_names)
            if r.categories:
                entry["categories"] = list(r.categories)
            resources.append(entry)
            for sub in r.subresources:
                item: JSON = {
                    "name": f"{r.plural}/{sub}",
                    "singularName": "",
                    "namespaced": r.namespaced,
                }
                if sub == "status":
                    item.update(kind=r.kind, verbs=["get", "patch", "update"])
                elif sub == "binding":
                    item.update(kind="Binding", verbs=["create"])
                elif sub == "eviction":
                    item.update(group="policy", version="v1", kind="Eviction", verbs=["create"])
                elif sub == "log":
                    item.update(kind="Pod", verbs=["get"])
                elif sub == "proxy":
                    item.update(kind="ServiceProxyOptions", verbs=["get"])
                resources.append(item)
        if (group, version) == ("", "v1"):
            resources.insert(
                0,
                {
                    "name": "bindings",
                    "singularName": "binding",
                    "namespaced": True,
                    "kind": "Binding",
                    "verbs": ["create"],
                },
            )
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }

    def _openapi_v3(self, gv_path: str) -> JSON:
        """Just enough OpenAPI v3 for kubectl: the root lists each group-version, whose
        document has, for every kind, a PATCH operation that declares the `fieldValidation`
        parameter (so kubectl leaves validation to the server and sends fieldValidation) and
        no request body (so kubectl apply computes its patches from its built-in types, as
        for an object it finds no schema for). No schemas: `kubectl explain` finds nothing."""
        gvs = {
            ("api/v1" if not g else f"apis/{g}/{v}"): (g, v)
            for g, v in {(r.group, r.version) for r in self.served}
        }
        if not gv_path:
            return {
                "paths": {
                    p: {"serverRelativeURL": f"/openapi/v3/{p}?hash=EMULATOR"} for p in sorted(gvs)
                }
            }
        if gv_path not in gvs:
            raise path_not_found()
        group, version = gvs[gv_path]
        paths: JSON = {}
        for r in self.served:
            if (r.group, r.version) != (group, version):
                continue
            base = "/api/v1" if not group else f"/apis/{group}/{version}"
            item = (
                f"{base}/namespaces/{{namespace}}/{r.plural}/{{name}}"
                if r.namespaced
                else f"{base}/{r.plural}/{{name}}"
            )
            paths[item] = {
                "patch": {
                    "operationId": f"patch{r.kind}",
                    "parameters": [
                        {
                            "name": "fieldValidation",
                            "in": "query",
                            "schema": {"type": "string", "uniqueItems": True},
                        },
                        {
                            "name": "fieldManager",
                            "in": "query",
                            "schema": {"type": "string", "uniqueItems": True},
                        },
                    ],
                    "responses": {"200": {"description": "OK"}},
                    "x-kubernetes-action": "patch",
                    "x-kubernetes-group-version-kind": {
                        "group": group,
                        "version": version,
                        "kind": r.kind,
                    },
                }
            }
        return {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": self.version},
            "paths": paths,
            "components": {"schemas": {}},
        }

    def _api_group(self, group: str) -> JSON:
        versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in self._groups[group]]
        return {"name": group, "versions": versions, "preferredVersion": versions[0]}

    def _version(self) -> JSON:
        major, minor = self.version.lstrip("v").split(".")[:2]
        return {
            "major": major,
            "minor": minor,
            "gitVersion": self.version,
            "gitCommit": "0000000000000000000000000000000000000000",
            "gitTreeState": "clean",
            "buildDate": "2025-04-22T16:03:10Z",
            "goVersion": "go1.23.6",
            "compiler": "gc",
            "platform": "linux/amd64",
        }

    # ------------------------------------------------------------------ HTTP routing

    def _record(
        self, method: str, path: str, query: dict[str, str], content_type: str, body: Any
    ) -> None:
        """Log the request, sleep if a delay is injected for it (outside the lock), and raise
        the error injected for it, if any."""
        seconds: float | None = None
        wake: threading.Event | None = None
        error: ApiError | None = None
        with self.lock:
            self.request_log.append(RequestRecord(method, path, dict(query), content_type, body))
            for d in self._delays:
                if d.times > 0 and d.method == method and d.pattern.search(path):
                    d.times -= 1
                    self._delays = [i for i in self._delays if i.times > 0]
                    seconds = d.seconds
                    wake = threading.Event()
                    self._sleeping.add(wake)
                    break
            for inj in self._injected:
                if inj.times > 0 and inj.method == method and inj.pattern.search(path):
                    inj.times -= 1
                    self._injected = [i for i in self._injected if i.times > 0]
                    error = inj.error
                    break
        if wake is not None and seconds is not None:
            wake.wait(seconds)
            with self.lock:
                self._sleeping.discard(wake)
        if error is not None:
            raise error

    def _route(
        self, method: str, path: str, query: dict[str, str], headers: Any, raw: bytes
    ) -> _Answer | _Watch:
        path = "/" + path.strip("/")  # /api/ and /version/ are /api and /version
        parts = [unquote(p) for p in path.strip("/").split("/")] if path.strip("/") else []
        if path in ("/healthz", "/readyz", "/livez"):
            return _Answer(200, b"ok", "text/plain; charset=utf-8")
        if method not in ("GET", "POST", "PUT", "PATCH", "DELETE"):
            raise method_not_allowed()
        if path == "/version":
            return self._get_only(method, self._version())
        if parts[:2] == ["openapi", "v3"]:
            return self._get_only(method, self._openapi_v3("/".join(parts[2:])))
        if not parts or parts[0] not in ("api", "apis"):
            raise path_not_found()
        if parts[0] == "api":
            if len(parts) == 1:
                host = (
                    f"{self._httpd.server_address[0]}:{self._httpd.server_address[1]}"
                    if self._httpd
                    else ""
                )
                return self._get_only(
                    method,
                    {
                        "kind": "APIVersions",
                        "versions": ["v1"],
                        "serverAddressByClientCIDRs": [
                            {"clientCIDR": "0.0.0.0/0", "serverAddress": host}
                        ],
                    },
                )
            group, version, rest = "", parts[1], parts[2:]
            if version != "v1":
                raise path_not_found()
        else:
            if len(parts) == 1:
                groups = [self._api_group(g) for g in self._groups]
                return self._get_only(
                    method, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}
                )
            if parts[1] not in self._groups:
                raise path_not_found()
            if len(parts) == 2:
                return self._get_only(
                    method, {"kind": "APIGroup", "apiVersion": "v1", **self._api_group(parts[1])}
                )
            group, version, rest = parts[1], parts[2], parts[3:]
            if version not in self._groups[group]:
                raise path_not_found()
        if not rest:
            return self._get_only(method, self._api_resources(group, version))
        namespace: str | None = None
        if (
            rest[0] == "namespaces"
            and len(rest) >= 3
            and (group != "" or rest[2] not in ("status", "finalize"))
        ):
            namespace, rest = rest[1], rest[2:]
        if (group, rest[0]) == ("", "bindings") and namespace is not None and len(rest) == 1:
            if method != "POST":
                raise method_not_allowed()
            body = self._json_body(raw, "Binding")
            name = _dig(body, "metadata", "name") or ""
            return _Answer(201, self._bind(namespace, name, body, via_pod=False))
        if group == "" and namespace and len(rest) >= 3 and rest[0:3:2] == ["services", "proxy"]:
            return self._proxy(method, namespace, rest[1], "/".join(rest[3:]), query)
        if group == "" and namespace and len(rest) == 3 and rest[0:3:2] == ["pods", "log"]:
            return self._log(method, namespace, rest[1], query)
        res = _BY_PATH.get((group, version, rest[0]))
        if (
            res is None
            or res not in self.served
            or len(rest) > 3
            or (namespace is not None and not res.namespaced)
        ):
            raise path_not_found()
        if namespace is not None and not namespace:
            raise path_not_found()
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if sub is not None and sub not in res.subresources:
            raise path_not_found()
        if name is None:
            return self._collection(method, res, namespace, query, headers, raw)
        if res.namespaced and namespace is None:
            raise path_not_found()
        return self._object(method, res, namespace, name, sub, query, headers, raw)

    def _proxy(
        self, method: str, namespace: str, service: str, rest: str, query: dict[str, str]
    ) -> _Answer:
        """GET through a Service to its endpoints (the port name after `:` is ignored)."""
        if method != "GET":
            raise method_not_allowed()
        name = service.split(":")[-2] if service.count(":") == 2 else service.split(":")[0]
        with self.lock:
            if self.get("services", name, namespace) is None:
                raise not_found(_BY_PATH[("", "v1", "services")], name)
            upstream = self._proxies.get((namespace, name))
        if upstream is None:
            why = f'no endpoints available for service "{name}"'
            raise ApiError(503, "ServiceUnavailable", why)
        url = f"{upstream}/{quote(rest)}" + (f"?{urlencode(query)}" if query else "")
        try:
            with urlopen(url, timeout=10) as answer:
                return _Answer(answer.status, answer.read(), answer.headers["Content-Type"])
        except HTTPError as err:
            return _Answer(err.code, err.read(), err.headers["Content-Type"] or "text/plain")

    def _log(self, method: str, namespace: str, name: str, query: dict[str, str]) -> _Answer:
        """A pod's output, as the kubelet serves it through the API server (plain text)."""
        if method != "GET":
            raise method_not_allowed()
        with self.lock:
            pod = self.get("pods", name, namespace)
            if pod is None:
                raise not_found(PODS, name)
            if not (pod.get("spec") or {}).get("nodeName"):
                raise bad_request(f"pod {name} does not have a host assigned")
            text = self._logs.get((namespace, name), "")
        tail = query.get("tailLines")
        if tail is not None:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[len(lines) - int(tail) :]) if int(tail) else ""
        return _Answer(200, text.encode(), "text/plain")

    @staticmethod
    def _get_only(method: str, body: JSON) -> _Answer:
        if method != "GET":
            raise method_not_allowed()
        return _Answer(200, body)

    @staticmethod
    def _json_body(raw: bytes, kind: str) -> Any:
        try:
            return json.loads(raw)
        except ValueError as e:
            raise bad_request(
                f"the object provided is unrecognized (must be of type {kind}): couldn't get "
                f"version/kind; json parse error: {e}"
            ) from None

    def _check_body_type(self, headers: Any) -> None:
        ctype = (headers.get("Content-Type") or "application/json").split(";")[0].strip().lower()
        if ctype not in ("application/json", "*/*", ""):
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted media types "
                f'include: application/json (the emulator serves JSON only, not "{ctype}")',
                {},
            )

    def _collection(
        self,
        method: str,
        res: Resource,
        namespace: str | None,
        query: dict[str, str],
        headers: Any,
        raw: bytes,
    ) -> _Answer | _Watch:
        if query.get("dryRun"):
            raise bad_request("the emulator does not support dryRun")
        if method == "GET":
            if query.get("watch") in ("1", "true", "True"):
                return self._watch(res, namespace, query)
            form = _negotiate(headers.get("Accept"))
            items, meta = self._list(res, namespace, query)
            return _Answer(200, self._render_list(res, items, meta, form, query), _form_type(form))
        if method == "POST":
            if res.namespaced and namespace is None:
                raise method_not_allowed()
            self._check_body_type(headers)
            body = self._json_body(raw, res.kind)
            return _Answer(201, self._create(res, namespace, body, strict=_strict(query)))
        if method == "DELETE":
            options = self._json_body(raw, "DeleteOptions") if raw.strip() else {}
            return _Answer(
                200,
                self._deletecollection(
                    res, namespace, query, options if isinstance(options, dict) else {}
                ),
            )
        raise method_not_allowed()

    def _object(
        self,
        method: str,
        res: Resource,
        namespace: str | None,
        name: str,
        sub: str | None,
        query: dict[str, str],
        headers: Any,
        raw: bytes,
    ) -> _Answer:
        if query.get("dryRun"):
            raise bad_request("the emulator does not support dryRun")
        if sub in ("binding", "eviction"):
            if method != "POST":
                raise method_not_allowed()
            self._check_body_type(headers)
            body = self._json_body(raw, "Binding" if sub == "binding" else "Eviction")
            assert namespace is not None
            if sub == "binding":
                return _Answer(201, self._bind(namespace, name, body))
            return _Answer(201, self._evict(namespace, name, body))
        if method == "GET":
            form = _negotiate(headers.get("Accept"))
            with self.lock:
                obj = _clone(self._current(res, namespace, name))
            if form[0] == "table":
                return _Answer(
                    200,
                    to_table(
                        res,
                        [obj],
                        {"resourceVersion": obj["metadata"]["resourceVersion"]},
                        query.get("includeObject", "Metadata"),
                        form[1],
                    ),
                    _form_type(form),
                )
            if form[0] == "meta":
                return _Answer(200, _partial(obj, form[1]), _form_type(form))
            return _Answer(200, obj)
        if method == "PUT":
            self._check_body_type(headers)
            return _Answer(
                200,
                self._update(
                    res, namespace, name, self._json_body(raw, res.kind), sub, _strict(query)
                ),
            )
        if method == "PATCH":
            ctype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
            return _Answer(200, self._patch(res, namespace, name, raw, ctype, sub, _strict(query)))
        if method == "DELETE" and sub is None:
            options = {}
            if raw.strip():
                options = self._json_body(raw, "DeleteOptions")
            if query.get("gracePeriodSeconds"):
                options["gracePeriodSeconds"] = _int_param(query, "gracePeriodSeconds")
            return _Answer(
                200,
                self._delete(res, namespace, name, options if isinstance(options, dict) else {}),
            )
        raise method_not_allowed()

    def _render_list(
        self,
        res: Resource,
        items: list[JSON],
        meta: JSON,
        form: tuple[str, str],
        query: dict[str, str],
    ) -> JSON:
        if form[0] == "table":
            return to_table(res, items, meta, query.get("includeObject", "Metadata"), form[1])
        if form[0] == "meta":
            return {
                "kind": "PartialObjectMetadataList",
                "apiVersion": f"meta.k8s.io/{form[1]}",
                "metadata": meta,
                "items": [_partial(o, form[1]) for o in items],
            }
        if not res.custom:  # typed lists do not repeat kind and apiVersion in their items
            for o in items:
                o.pop("kind", None)
                o.pop("apiVersion", None)
        return {
            "kind": f"{res.kind}List",
            "apiVersion": res.api_version,
            "metadata": meta,
            "items": items,
        }


def _strict(query: dict[str, str]) -> bool:
    return query.get("fieldValidation") == "Strict"


def _int_param(query: dict[str, str], name: str) -> int:
    text = query.get(name, "")
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise bad_request(f"invalid {name} {text!r}: not an integer") from None


def _rv_param(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise bad_request(f"invalid resource version: {text!r}")
    return value


def _scaled(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        try:
            return math.ceil(total * int(value[:-1]) / 100)
        except ValueError:
            return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _quantity_or_400(value: Any, kind: str) -> Fraction:
    try:
        return parse_quantity(value)
    except ValueError:
        raise bad_request(
            f'{kind} in version "v1" cannot be handled as a {kind}: quantities must match the '
            "regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
        ) from None


_STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage", "storage")


def _validate_resources(resources: JSON, base: str) -> list[FieldError]:
    errors: list[FieldError] = []
    parsed: dict[str, dict[str, Fraction]] = {}
    for part in ("limits", "requests"):
        values = resources.get(part) or {}
        if not isinstance(values, dict):
            continue
        parsed[part] = {}
        for name, value in values.items():
            q = _quantity_or_400(value, "Pod")
            parsed[part][name] = q
            path = f"{base}.{part}[{name}]"
            if q < 0:
                errors.append(
                    FieldError(path, "invalid", "must be greater than or equal to 0", str(value))
                )
            extended = (
                "/" in name
                and not name.startswith("kubernetes.io/")
                and name not in _STANDARD_RESOURCES
            )
            if extended and q.denominator != 1:
                errors.append(FieldError(path, "invalid", "must be an integer", str(value)))
    limits, requests = parsed.get("limits", {}), parsed.get("requests", {})
    for name, q in requests.items():
        extended = (
            "/" in name
            and not name.startswith("kubernetes.io/")
            and name not in _STANDARD_RESOURCES
        )
        if extended and name not in limits:
            errors.append(
                FieldError(
                    f"{base}.limits",
                    "required",
                    "Limit must be set for non overcommitable resources",
                )
            )
        elif extended and limits[name] != q:
            errors.append(
                FieldError(
                    f"{base}.requests[{name}]",
                    "invalid",
                    f"must be equal to {name} limit of {resources['limits'][name]}",
                    str(resources["requests"][name]),
                )
            )
        elif name in limits and q > limits[name]:
            errors.append(
                FieldError(
                    f"{base}.requests",
                    "invalid",
                    f"must be less than or equal to {name} limit of {resources['limits'][name]}",
                    str(resources["requests"][name]),
                )
            )
    return errors


def _qos_class(pod: JSON) -> str:
    spec = pod.get("spec") or {}
    containers = list(spec.get("containers") or []) + list(spec.get("initContainers") or [])
    requests: dict[str, Fraction] = {}
    limits: dict[str, Fraction] = {}
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        c_limits = {}
        for k, v in (res.get("requests") or {}).items():
            if k in ("cpu", "memory") and parse_quantity(v) != 0:
                requests[k] = requests.get(k, Fraction(0)) + parse_quantity(v)
        for k, v in (res.get("limits") or {}).items():
            if k in ("cpu", "memory") and parse_quantity(v) != 0:
                c_limits[k] = parse_quantity(v)
                limits[k] = limits.get(k, Fraction(0)) + parse_quantity(v)
        if set(c_limits) != {"cpu", "memory"}:
            guaranteed = False
    if not requests and not limits:
        return "BestEffort"
    if guaranteed and requests == limits:
        return "Guaranteed"
    return "Burstable"


def _negotiate(accept: str | None) -> tuple[str, str]:
    """("json" | "table" | "meta", meta.k8s.io version) for an Accept header; 406 if none."""
    if not accept:
        return ("json", "v1")
    offered = []
    for item in accept.split(","):
        fields_ = [f.strip() for f in item.split(";")]
        params = dict(f.split("=", 1) for f in fields_[1:] if "=" in f)
        media = fields_[0].lower()
        offered.append(media)
        if media not in ("application/json", "application/*", "*/*"):
            continue
        kind = params.get("as")
        version = params.get("v", "v1")
        if kind is None:
            return ("json", "v1")
        if params.get("g") != "meta.k8s.io" or version not in ("v1", "v1beta1"):
            continue
        if kind == "Table":
            return ("table", version)
        if kind in ("PartialObjectMetadata", "PartialObjectMetadataList"):
            return ("meta", version)
    raise ApiError(
        406,
        "NotAcceptable",
        "only the following media types are accepted: application/json, application/yaml, "
        "application/vnd.kubernetes.protobuf",
        {},
    )


def _form_type(form: tuple[str, str]) -> str:
    if form[0] == "table":
        return f"application/json;as=Table;v={form[1]};g=meta.k8s.io"
    if form[0] == "meta":
        return f"application/json;as=PartialObjectMetadataList;v={form[1]};g=meta.k8s.io"
    return "application/json"


# --------------------------------------------------------------------------- HTTP plumbing


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    api: ApiServer

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.api.lock:
            self.api._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.api.lock:
            self.api._connections.discard(request)
        super().shutdown_request(request)


class _Headers:
    """A request's headers, as much of http.client.HTTPMessage as the handler uses: `get` by
    any case of the name, the first of repeated ones, as Message.get."""

    def __init__(self, lines: list[bytes]) -> None:
        self._values: dict[str, str] = {}
        name = ""
        for raw in lines:
            line = raw.decode("iso-8859-1").rstrip("\r\n")
            if not line:
                continue
            if line[0] in " \t" and name:  # a folded line continues the header before it
                self._values[name] += line
                continue
            key, sep, value = line.partition(":")
            if not sep:
                continue  # not a header line; the email parser sets it aside too
            name = key.strip().lower()
            if name in self._values:
                name = ""  # the first one counts; a fold of a repeated one goes with it
                continue
            self._values[name] = value.lstrip(" \t")

    def get(self, name: str, default: Any = None) -> Any:
        return self._values.get(name.lower(), default)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "kube-apiserver-emulator"
    server: _HttpServer

    def parse_request(self) -> bool:
        """BaseHTTPRequestHandler.parse_request with the headers read into `_Headers`: the
        email package's parser it uses was a fifth of the emulator's cost of a request. The
        request line and the Connection and Expect headers are handled as there."""
        self.command = None  # type: ignore[assignment]
        self.request_version = self.default_request_version
        self.close_connection = True
        requestline = str(self.raw_requestline, "iso-8859-1").rstrip("\r\n")
        self.requestline = requestline
        words = requestline.split()
        if len(words) != 3 or words[2] not in ("HTTP/1.0", "HTTP/1.1"):
            return super().parse_request()  # anything unusual: as the base class reads it
        version = words[2]
        self.close_connection = version == "HTTP/1.0"
        self.request_version = version
        self.command, self.path = words[0], words[1]
        if self.path.startswith("//"):
            self.path = "/" + self.path.lstrip("/")  # as the base class (gh-87389)
        lines: list[bytes] = []
        while True:
            line = self.rfile.readline(65537)
            if len(line) > 65536:
                self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Line too long")
                return False
            if line in (b"\r\n", b"\n", b""):
                break
            lines.append(line)
            if len(lines) > 100:
                self.send_error(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers")
                return False
        self.headers = _Headers(lines)  # type: ignore[assignment]
        conntype = str(self.headers.get("Connection", "")).lower()
        if conntype == "close":
            self.close_connection = True
        elif conntype == "keep-alive":
            self.close_connection = False
        expect = str(self.headers.get("Expect", "")).lower()
        if expect == "100-continue" and version == "HTTP/1.1":
            return self.handle_expect_100()
        return True

    def setup(self) -> None:
        super().setup()
        # headers and body go in separate writes: without this, Nagle's algorithm and the
        # client's delayed ACK cost ~40 ms per request
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_OPTIONS(self) -> None:
        self._serve("OPTIONS")

    def _read_body(self) -> bytes:
        if "chunked" in (self.headers.get("Transfer-Encoding") or "").lower():
            chunks = []
            while True:
                size = int(self.rfile.readline().strip().split(b";")[0] or b"0", 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(chunks)
                chunks.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self, method: str) -> None:
        api = self.server.api
        split = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
        raw = self._read_body()
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        try:
            body: Any = json.loads(raw) if raw.strip() else None
        except ValueError:
            body = raw
        try:
            api._record(method, split.path, query, ctype, body)
            answer = api._route(method, split.path, query, self.headers, raw)
        except ApiError as e:
            answer = _Answer(e.code, e.status)
        except Exception:
            text = traceback.format_exc()
            with api.lock:
                api.server_errors.append(text)
            answer = _Answer(
                500,
                ApiError(
                    500, "InternalError", f"Internal error occurred: {text.splitlines()[-1]}", {}
                ).status,
            )
        if isinstance(answer, _Watch):
            self._stream(answer, query)
            return
        try:
            self._send(answer, head=method == "HEAD")
        except OSError:  # the client is gone (a delayed request's client may have died)
            self.close_connection = True

    def _send(self, answer: _Answer, head: bool = False) -> None:
        data = (
            answer.body
            if isinstance(answer.body, bytes)
            else json.dumps(answer.body, separators=(",", ":")).encode()
        )
        self.send_response(answer.code)
        self.send_header("Content-Type", answer.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in answer.headers.items():
            self.send_header(k, v)
        # end_headers, with the body in the same write: one system call, not two
        if self.request_version == "HTTP/0.9":  # no headers: the body alone, as the base class
            if not head:
                self.wfile.write(data)
            return
        self._headers_buffer.append(b"\r\n")  # type: ignore[attr-defined]
        if not head:
            self._headers_buffer.append(data)  # type: ignore[attr-defined]
        self.flush_headers()

    def _client_gone(self) -> bool:
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True

    def _stream(self, w: _Watch, query: dict[str, str]) -> None:
        api = self.server.api
        timeout = float(query.get("timeoutSeconds") or 0) or api.watch_timeout_s
        deadline = time.monotonic() + timeout
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.send_header("Cache-Control", "no-cache, private")
            self.end_headers()
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    # the timeout ends it: what was delivered, then (if allowed) a bookmark at
                    # the resourceVersion everything delivered is up to
                    with api.lock:
                        api._unwatch(w)
                        rv = api._rv
                    while True:
                        try:
                            item = w.queue.get_nowait()
                        except queue.Empty:
                            item = b""
                        if not item:
                            break
                        self._chunk(item)
                    if w.bookmarks and item is not None:
                        self._chunk(w.bookmark_line(rv))
                    break
                try:
                    item = w.queue.get(timeout=min(remaining, 0.2))
                except queue.Empty:
                    if self._client_gone():
                        self.close_connection = True
                        return
                    continue
                if item is None:
                    break
                # The events already queued go out in one chunk (one write, one read for the
                # client), in order: a burst of writes costs far fewer system calls, as the
                # real server's buffered writer does. The end of the watch (None) stays last.
                batch = [item]
                ended = False
                while len(batch) < 256:
                    try:
                        more = w.queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        ended = True
                        break
                    batch.append(more)
                self._chunk(b"".join(batch))
                if ended:
                    break
            self.wfile.write(b"0\r\n\r\n")
        except OSError:
            self.close_connection = True
        finally:
            api._unwatch(w)

    def _chunk(self, data: bytes | None) -> None:
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
