"""The Kubernetes API as the scheduler uses it: JSON in and out, list and watch, bind, evict.

The official `kubernetes` client does the connection (kubeconfig or in-cluster service account,
TLS, tokens); requests and answers stay plain JSON, as the API serves them. Two reasons: the
typed models cost more than the scheduler's own work on a large cluster, and some API answers
are not what the client's models expect. The known one: `pods/binding` answers 201 with a
`Status`, not a `Binding`, and the generated `create_namespaced_pod_binding` fails to read it
(tests/kube/test_api.py shows both, against the real API server).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

# Re-exported: the kube modules and their callers catch it from here.
from toposched.common.apierror import ApiError as ApiError
from toposched.common.retry import retry_after as seconds_asked

JSON = dict[str, Any]

# How often, at most, the client's credentials are reloaded (see `_throttle_refresh`).
REFRESH_EVERY_S = 1.0


class Gone(ApiError):
    """410: the resourceVersion asked for is older than the server keeps; list again."""


class RateLimit:
    """At most `qps` requests a second on average, `burst` at once, as client-go's token
    bucket limits a controller's client (kube-scheduler's is 50 and 100 unless configured):
    a request waits for a token. Shared by every thread of one client."""

    def __init__(self, qps: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"a rate limit needs qps > 0 and burst >= 1, got {qps} and {burst}")
        self.qps, self.burst, self.clock = qps, burst, clock
        self._tokens = float(burst)
        self._last = clock()
        self._lock = threading.Lock()

    def wait(self) -> float:
        """Take a token, waiting for one if none is left; the seconds waited."""
        with self._lock:
            now = self.clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1
            delay = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if delay:
            time.sleep(delay)
        return delay


class KubeApi:
    """A thin JSON client over the official client's connection; with `limit`, its requests
    are rate limited as client-go's are."""

    def __init__(self, api_client: Any, limit: RateLimit | None = None) -> None:
        self.client = api_client
        self.limit = limit

    @classmethod
    def connect(
        cls,
        kubeconfig: str | None = None,
        in_cluster: bool = False,
        limit: RateLimit | None = None,
    ) -> KubeApi:
        from kubernetes import client, config  # the `kube` extra

        if in_cluster:
            config.load_incluster_config()  # type: ignore[no-untyped-call]
            api_client = client.ApiClient()
        else:
            configuration = client.Configuration()
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=kubeconfig, client_configuration=configuration
            )
            api_client = client.ApiClient(configuration)
        _throttle_refresh(api_client.configuration)
        return cls(api_client, limit)

    @staticmethod
    def context_namespace(kubeconfig: str | None = None) -> str:
        """The namespace a command means when it names none, as kubectl takes it: the current
        context's in the kubeconfig, else `default`."""
        from kubernetes import config  # the `kube` extra

        try:
            _, current = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        except Exception:  # no kubeconfig, or one without contexts: connect() says why
            return "default"
        return str(((current or {}).get("context") or {}).get("namespace") or "default")

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
        if self.limit is not None:
            self.limit.wait()
        # A list is the parameter repeated, as a URL carries several values of one name.
        params = [
            (k, item)
            for k, v in (query or {}).items()
            for item in (v if isinstance(v, list) else [v])
            if item is not None
        ]
        headers = {"Accept": "application/json", "Content-Type": content_type}
        if (
            body is not None
            and not params
            and method in ("POST", "PUT", "PATCH")
            and content_type.endswith("json")
            and not content_type.startswith("application/json-patch")  # the client may rewrite
        ):
            return self._write(method, path, body, headers, timeout)
        method_, url, headers_, body_, post = self.client.param_serialize(
            method,
            path,
            query_params=params,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        return self.client.call_api(method_, url, headers_, body_, post, _request_timeout=timeout)

    def _write(
        self,
        method: str,
        path: str,
        body: Any,
        headers: dict[str, str],
        timeout: float | tuple[float, float | None] | None,
    ) -> Any:
        """A JSON write (a bind, a patch, an Event), straight to the client's connection pool
        with the headers and credentials that `param_serialize` would give it. The generated
        client's layers around the pool (walking the body to sanitise it, building the call,
        checking the content type four ways, encoding the body) were a sixth of the
        scheduler's CPU per bind; the pool (TLS, proxy, connections) is the client's own."""
        import urllib3  # the `kube` extra's, as the client's

        client = self.client
        headers.update(client.default_headers)
        if client.cookie:
            headers["Cookie"] = client.cookie
        client.update_params_for_auth(headers, [], ["BearerToken"], path, method, body)
        limit: urllib3.Timeout | None = None  # as the client makes it from its argument
        if isinstance(timeout, tuple):
            limit = urllib3.Timeout(connect=timeout[0], read=timeout[1])
        elif timeout:
            limit = urllib3.Timeout(total=timeout)
        return client.rest_client.pool_manager.request(
            method,
            client.configuration.host + path,
            body=json.dumps(body),
            headers=headers,
            timeout=limit,
            preload_content=False,
        )

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
            raise ApiError(0, f"{method} {path}: {err}", reason="Unreachable") from err
        return _decode(resp, data)

    def raw(
        self, method: str, path: str, query: Mapping[str, Any] | None = None, body: Any = None
    ) -> tuple[int, str, dict[str, str], bytes]:
        """The answer as it came, whatever its status: (status, reason phrase, headers with
        names in lower case, body), for a caller that reads errors its own way (a service
        behind the API server's proxy); ApiError with status 0 when no answer came."""
        try:
            resp = self._send(method, path, query, body)
            data = resp.read()
        except Exception as err:  # the connection, a timeout: no answer at all
            raise ApiError(0, f"{method} {path}: {err}", reason="Unreachable") from err
        got = getattr(resp, "headers", None) or {}
        headers = {str(k).lower(): str(v) for k, v in got.items()}
        return int(resp.status), str(getattr(resp, "reason", "") or ""), headers, bytes(data)

    def text(self, path: str, query: Mapping[str, Any] | None = None) -> Iterator[bytes]:
        """A plain-text answer (a pod's log), in chunks as they come: with `follow` the API
        server keeps the answer open until the container ends."""
        try:
            resp = self._send("GET", path, query, timeout=(10.0, None))
        except Exception as err:
            raise ApiError(0, f"GET {path}: {err}", reason="Unreachable") from err
        if resp.status >= 400:
            _decode(resp, resp.read())
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
            _decode(resp, resp.read())
        buffer = b""
        # A chunk may hold many events (a server writes a burst at once) or part of one: each
        # complete line is an event, the rest waits for the next chunk.
        for chunk in resp.response.stream(1 << 16, decode_content=True):
            buffer += chunk
            if b"\n" not in chunk:
                continue
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    raise ApiError(
                        resp.status,
                        f"a watch event that is not JSON: {_excerpt(line)}",
                        reason="InvalidAnswer",
                    ) from None
                if event.get("type") == "ERROR":
                    status = event.get("object") or {}
                    raise _error(int(status.get("code") or 500), status)
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


def _throttle_refresh(configuration: Any) -> None:
    """Reload the credentials at most every REFRESH_EVERY_S instead of before every request.

    The kubeconfig and in-cluster loaders install a hook that the client calls before each
    request; it reloads the token if it is about to expire and then sets the host, the CA and
    the token again, and setting the host reads the proxy settings of the environment. That
    was a tenth of the scheduler's CPU while binding. The loaders renew a token minutes before
    it expires (kubeconfig: 5 minutes; in-cluster: a token file read again each minute), so a
    second's delay in noticing changes nothing. Each run of the hook installs it again, so
    this wraps whatever hook the last run left."""
    hook: Callable[[Any], None] | None = configuration.refresh_api_key_hook
    if hook is None:
        return
    last = float("-inf")

    def refresh(conf: Any) -> None:
        nonlocal hook, last
        now = time.monotonic()
        if now - last < REFRESH_EVERY_S or hook is None:
            return
        last = now
        hook(conf)
        if conf.refresh_api_key_hook is not refresh:
            hook = conf.refresh_api_key_hook
            conf.refresh_api_key_hook = refresh

    configuration.refresh_api_key_hook = refresh


def _decode(resp: Any, data: bytes) -> JSON:
    """The JSON object an answer holds; ApiError for an error answer (whatever its body:
    a Status, a proxy's HTML page, the server's own text 404, nothing) and for a success
    that is not a JSON object."""
    try:
        answer = json.loads(data) if data else {}
    except ValueError:
        answer = None
    status = int(resp.status)
    if status >= 400:
        headers = getattr(resp, "headers", None) or {}
        raise _error(
            status, answer, data, str(getattr(resp, "reason", "") or ""), headers.get("Retry-After")
        )
    if not isinstance(answer, dict):
        raise ApiError(status, f"the answer is not JSON: {_excerpt(data)}", reason="InvalidAnswer")
    return answer


def _error(
    status: int,
    answer: Any,
    data: bytes = b"",
    phrase: str = "",
    retry_after: str | None = None,
) -> ApiError:
    """The ApiError of an error answer: a Status says its reason and message; any other body
    is told as it reads, behind the HTTP reason phrase."""
    body = answer if isinstance(answer, dict) else {}
    reason = str(body.get("reason") or "") or phrase
    message = str(body.get("message") or "") or _excerpt(data) or phrase
    wait = seconds_asked(retry_after)
    details = body.get("details") or {}
    if wait is None and isinstance(details, dict):
        wait = seconds_asked(details.get("retryAfterSeconds"))
    kind = Gone if status == 410 else ApiError
    return kind(status, message, reason=reason, retry_after=wait)


def _excerpt(data: bytes, limit: int = 200) -> str:
    """What a body that is not JSON says, in one line: an HTML page's text without its tags."""
    text = data.decode("utf-8", "replace")
    text = re.sub(r"<[^>]*>", " ", text)
    text = " ".join(text.split())
    return text[:limit] + ("..." if len(text) > limit else "")
