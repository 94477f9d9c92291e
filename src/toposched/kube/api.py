"""The Kubernetes API as the scheduler uses it: JSON in and out, list and watch, bind, evict.

The official `kubernetes` client does the connection (kubeconfig or in-cluster service account,
TLS, tokens); requests and answers stay plain JSON, as the API serves them. Two reasons: the
typed models cost more than the scheduler's own work on a large cluster, and some API answers
are not what the client's models expect. The known one: `pods/binding` answers 201 with a
`Status`, not a `Binding`, and the generated `create_namespaced_pod_binding` fails to read it
(tests/kube/test_emulator.py shows both).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

JSON = dict[str, Any]


class ApiError(RuntimeError):
    """The API server answered with an error: `status` is the HTTP code, `reason` the
    Status reason (Conflict, NotFound, Expired, TooManyRequests ...)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class Gone(ApiError):
    """410: the resourceVersion asked for is older than the server keeps; list again."""


class KubeApi:
    """A thin JSON client over the official client's connection."""

    def __init__(self, api_client: Any) -> None:
        self.client = api_client

    @classmethod
    def connect(cls, kubeconfig: str | None = None, in_cluster: bool = False) -> KubeApi:
        from kubernetes import client, config  # the `kube` extra

        if in_cluster:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            return cls(client.ApiClient())
        configuration = client.Configuration()
        config.load_kube_config(  # type: ignore[no-untyped-call]
            config_file=kubeconfig, client_configuration=configuration
        )
        return cls(client.ApiClient(configuration))

    # ------------------------------------------------------------------ plumbing

    def _send(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float | tuple[float, float | None] | None = 30.0,
    ) -> Any:
        params = [(k, v) for k, v in (query or {}).items() if v is not None]
        headers = {"Accept": "application/json", "Content-Type": content_type}
        method_, url, headers_, body_, post = self.client.param_serialize(
            method,
            path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return self.client.call_api(method_, url, headers_, body_, post, _request_timeout=timeout)

    def request(
        self,
        method: str,
        path: str,
        query: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        try:
            resp = self._send(method, path, query, body, content_type)
            data = resp.read()
        except Exception as err:  # the connection, a timeout: no answer at all
            raise ApiError(0, "Unreachable", f"{method} {path}: {err}") from err
        answer = json.loads(data) if data else {}
        if resp.status >= 400:
            raise _error(resp.status, answer)
        return answer if isinstance(answer, dict) else {}

    def text(self, path: str, query: Mapping[str, Any] | None = None) -> Iterator[bytes]:
        """A plain-text answer (a pod's log), in chunks as they come: with `follow` the API
        server keeps the answer open until the container ends."""
        try:
            resp = self._send("GET", path, query, timeout=(10.0, None))
        except Exception as err:
            raise ApiError(0, "Unreachable", f"GET {path}: {err}") from err
        if resp.status >= 400:
            data = resp.read()
            raise _error(resp.status, json.loads(data) if data.startswith(b"{") else {})
        yield from resp.response.stream(4096, decode_content=True)

    # ------------------------------------------------------------------ list and watch

    def list(self, path: str, **query: Any) -> tuple[list[JSON], str]:
        """Every object at `path` (following `continue`), and the list's resourceVersion."""
        items: list[JSON] = []
        token: str | None = None
        while True:
            answer = self.request("GET", path, {**query, "limit": 500, "continue": token})
            items.extend(answer.get("items") or [])
            meta = answer.get("metadata") or {}
            token = meta.get("continue") or None
            if not token:
                return items, str(meta.get("resourceVersion") or "")

    def watch(
        self, path: str, resource_version: str, timeout_s: int = 300, **query: Any
    ) -> Iterator[JSON]:
        """Watch events from `resource_version` on, bookmarks included, until the server
        closes the stream. Raises Gone when the version is too old (an ERROR event with 410,
        or a 410 answer)."""
        args = {
            **query,
            "watch": "true",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_s,
        }
        resp = self._send("GET", path, args, timeout=(10.0, timeout_s + 30.0))
        if resp.status >= 400:
            data = resp.read()
            raise _error(resp.status, json.loads(data) if data else {})
        buffer = b""
        for chunk in resp.response.stream(4096, decode_content=True):
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if not line.strip():
                    continue
                event = json.loads(line)
                if event.get("type") == "ERROR":
                    raise _error(
                        int((event.get("object") or {}).get("code") or 500), event["object"]
                    )
                yield event
        resp.response.release_conn()

    # ------------------------------------------------------------------ scheduling verbs

    def bind(
        self,
        namespace: str,
        pod: str,
        node: str,
        annotations: Mapping[str, str],
        uid: str = "",
    ) -> None:
        """`pods/binding`; the answer is a Status (201), read as such. With `uid`, only that
        pod is bound (a pod made again under the same name answers 409)."""
        meta: JSON = {"name": pod, "namespace": namespace, "annotations": dict(annotations)}
        if uid:
            meta["uid"] = uid
        body = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": meta,
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding", body=body)

    def evict(self, namespace: str, pod: str) -> None:
        """The eviction API (honours PodDisruptionBudgets: 429 while one forbids it)."""
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": namespace},
        }
        self.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", body=body)

    def event(
        self,
        involved: Mapping[str, Any],
        reason: str,
        message: str,
        kind: str = "Normal",
        now: str = "",
    ) -> None:
        """A core/v1 Event about `involved` (what `kubectl describe` lists)."""
        meta = involved.get("metadata") or {}
        namespace = meta.get("namespace") or "default"  # events of cluster objects: default
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta.get('name')}.", "namespace": namespace},
            "involvedObject": {
                "apiVersion": involved.get("apiVersion", "v1"),
                "kind": str(involved.get("kind") or "Pod"),
                "name": meta.get("name"),
                "namespace": meta.get("namespace") or "",
                "uid": meta.get("uid"),
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": "toposched"},
            "firstTimestamp": now or None,
            "lastTimestamp": now or None,
            "count": 1,
        }
        self.request("POST", f"/api/v1/namespaces/{namespace}/events", body=body)

    def set_scheduled_condition(
        self, namespace: str, pod: str, reason: str, message: str, now: str
    ) -> None:
        """`PodScheduled=False` with the core's reason: one strategic merge patch of the
        status, which merges conditions by type (the other conditions stay as they are)."""
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": reason,
            "message": message,
            "lastTransitionTime": now,
        }
        self.request(
            "PATCH",
            f"/api/v1/namespaces/{namespace}/pods/{pod}/status",
            body={"status": {"conditions": [condition]}},
            content_type="application/strategic-merge-patch+json",
        )


def _error(status: int, answer: Any) -> ApiError:
    body = answer if isinstance(answer, dict) else {}
    reason = str(body.get("reason") or "")
    message = str(body.get("message") or "")
    kind = Gone if status == 410 else ApiError
    return kind(status, reason, message)
