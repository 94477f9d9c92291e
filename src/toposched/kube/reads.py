"""What `toposched kube list | get | explain | top node | logs` read from a cluster.

Jobs, nodes and explanations come from the scheduler's read API: the standalone server's routes
and JSON, read by the standalone server's client (client/http.py's `Client`: its paging, its
errors) over a wire through the API server's service proxy with the user's kubeconfig, so no
port of the scheduler needs to be exposed; logs come from the API server's `pods/log`. The
scheduler names a gang's job `namespace/name#N` (N counts the gangs it has seen); a user names
it `name` in a namespace, and the newest job of that name is meant.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from toposched.client.http import API, NO_RETRY, Client
from toposched.client.wire import ConnectionLost, Params, Reply, Stream
from toposched.kube.api import JSON, ApiError, KubeApi

PAGE = 1000  # jobs a page, as the scheduler's read API allows at most


class NotFound(LookupError):
    """No job of that name; the message says where it was looked for."""


class ProxyWire:
    """The client's wire (client/wire.py's `Wire`) to a service, through the API server's
    proxy: the kubeconfig's credentials, TLS and rate limit are the KubeApi's."""

    def __init__(self, api: KubeApi, base: str) -> None:
        self.api = api
        self.base = base  # the service's proxy path and the read API's prefix

    def send(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        if headers:
            # The proxy carries the read API alone, which takes none; a caller that needs
            # headers (a submit's idempotency key) must not have them dropped unseen.
            raise NotImplementedError(
                f"headers {sorted(headers)} cannot go through the API server's proxy here"
            )
        try:
            status, reason, got, body = self.api.raw(method, self.base + path, params, json)
        except ApiError as err:  # no answer: the request may have gone out
            raise ConnectionLost(err.message) from None
        return Reply(status, reason, got, body)

    def stream(
        self, method: str, path: str, *, params: Params | None, read_timeout: float | None
    ) -> AbstractContextManager[Stream]:
        raise NotImplementedError(
            "the scheduler's read API serves no logs: they come from the API server's "
            "pods/log (toposched kube logs)"
        )

    def close(self) -> None:
        pass  # the KubeApi's connections are its owner's


@dataclass(frozen=True)
class SchedulerApi:
    """The scheduler's read API behind its Service (deploy/kubernetes/scheduler.yaml), as
    `client` (the standalone server's Client); the names a user gives, resolved."""

    api: KubeApi
    namespace: str = "toposched-system"
    service: str = "toposched-scheduler"
    port: str = "http"
    client: Client = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        proxy = f"/api/v1/namespaces/{self.namespace}/services/{self.service}:{self.port}/proxy"
        url = self.api.client.configuration.host + proxy  # for the client's messages only
        # No retry of a 503: here it is the proxy's (no endpoint), not a server that will store.
        client = Client(url, wire=ProxyWire(self.api, proxy + API), retry=NO_RETRY)
        object.__setattr__(self, "client", client)

    def jobs(self, all_jobs: bool = False, queue: str | None = None) -> list[JSON]:
        """Every job, page after page."""
        return list(self.client.all_jobs(page_size=PAGE, all=all_jobs, queue=queue))

    def nodes(self) -> list[JSON]:
        return self.client.nodes()

    def resolve(self, namespace: str, name: str) -> str:
        """The scheduler's name of the newest job `name` in `namespace` (or `name` itself,
        when it is already a full `namespace/name#N`)."""
        if "#" in name:
            return name
        prefix = f"{namespace}/{name}#"
        serials = [
            int(job["name"][len(prefix) :])
            for job in self.jobs(all_jobs=True)
            if job["name"].startswith(prefix) and job["name"][len(prefix) :].isdigit()
        ]
        if not serials:
            raise NotFound(f"no job {name!r} in namespace {namespace!r} (toposched kube list)")
        return f"{prefix}{max(serials)}"

    def job(self, namespace: str, name: str) -> JSON:
        return self.client.job(self.resolve(namespace, name))

    def explain(self, namespace: str, name: str) -> JSON:
        return self.client.explain(self.resolve(namespace, name))


def pod_log(
    api: KubeApi, namespace: str, pod: str, follow: bool = False, tail: int | None = None
) -> Iterator[bytes]:
    """A pod's output as the kubelet keeps it; ApiError 400 while it has no node."""
    query: dict[str, Any] = {"follow": "true" if follow else None, "tailLines": tail}
    try:
        yield from api.text(f"/api/v1/namespaces/{namespace}/pods/{pod}/log", query)
    except ApiError as err:
        if err.status == 404:
            raise NotFound(f"no pod {pod!r} in namespace {namespace!r}") from None
        raise
