"""What `toposched kube list | get | explain | top node | logs` read from a cluster.

Jobs, nodes and explanations come from the scheduler's read API (the same JSON as the
standalone server's), reached through the API server's service proxy with the user's
kubeconfig, so no port of the scheduler needs to be exposed; logs come from the API server's
`pods/log`. The scheduler names a gang's job `namespace/name#N` (N counts the gangs it has
seen); a user names it `name` in a namespace, and the newest job of that name is meant.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from toposched.kube.api import JSON, ApiError, KubeApi


class NotFound(LookupError):
    """No job of that name; the message says where it was looked for."""


@dataclass(frozen=True)
class SchedulerApi:
    """The scheduler's read API behind its Service (deploy/kubernetes/scheduler.yaml)."""

    api: KubeApi
    namespace: str = "toposched-system"
    service: str = "toposched-scheduler"
    port: str = "http"

    def get(self, path: str, **query: Any) -> JSON:
        proxy = f"/api/v1/namespaces/{self.namespace}/services/{self.service}:{self.port}/proxy"
        return self.api.request("GET", f"{proxy}{path}", query)

    def jobs(self, all_jobs: bool = False, queue: str | None = None) -> list[JSON]:
        """Every job, page after page (the read API pages as the standalone server does)."""
        out: list[JSON] = []
        token: str | None = None
        while True:
            answer = self.get(
                "/api/v1/jobs",
                all="true" if all_jobs else "false",
                queue=queue,
                limit=1000,
                **{"continue": token},
            )
            out.extend(answer.get("jobs") or [])
            token = (answer.get("metadata") or {}).get("continue")
            if not token:
                return out

    def nodes(self) -> list[JSON]:
        return list(self.get("/api/v1/nodes").get("nodes") or [])

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
        return self.get(f"/api/v1/jobs/{quote(self.resolve(namespace, name))}")

    def explain(self, namespace: str, name: str) -> JSON:
        return self.get(f"/api/v1/jobs/{quote(self.resolve(namespace, name))}/explain")


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
