"""A job on a cluster, as Arena makes one: a PodGroup, a headless Service and one pod per member.

`objects(job)` says every object the job needs, and touches no cluster; `create` makes them
(the PodGroup first, so that no worker is bound before its gang is known) and takes back what
it made if one is refused; `delete` removes every object labelled with the job. Workers ask
for their GPUs and name toposched as their scheduler; parameter servers and the MPI launcher
need no GPU and are left to the cluster's default scheduler. Each pod's host name is
`<job>-<role>-<i>.<job>` (its `hostname` and `subdomain` under the headless Service), which is
how members find each other (`toposched.common.frameworks` says what each is told).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from toposched.common.frameworks import (
    HOSTFILE,
    TF_PORT,
    TORCH_PORT,
    Kind,
    KindError,
    Member,
    environment,
    hostfile,
    members,
)
from toposched.core.job import JobError, LocalityRule
from toposched.kube.api import JSON, ApiError, KubeApi
from toposched.kube.objects import (
    ACCEPT_UNKNOWN,
    GPU_RESOURCE,
    GROUP_LABEL,
    LOCALITY,
    MODEL,
    QUEUE_LABEL,
    SCHEDULER_PLUGINS,
)

JOB_LABEL = "toposched.io/job"
ROLE_LABEL = "toposched.io/role"
KIND_LABEL = "toposched.io/kind"
# A pod's name is the job's, a role and an index: the job's name leaves room for the longest.
LONGEST_SUFFIX = len("-launcher-0") + 4  # up to 99,999 workers
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
ENV_NAME = re.compile(r"[-._a-zA-Z][-._a-zA-Z0-9]*")


class SubmitError(ValueError):
    """A job that cannot be made as written; the message names the field. Nothing was made."""


@dataclass(frozen=True)
class KubeJob:
    """What `toposched kube submit` is asked for."""

    name: str
    image: str
    command: Sequence[str]
    kind: Kind = Kind.PYTORCH
    namespace: str = "default"
    workers: int = 1
    gpus: int = 1  # per worker
    ps: int = 0
    env: Mapping[str, str] = field(default_factory=dict)
    queue: str | None = None
    priority_class: str | None = None
    locality: str = "any"
    accept_unknown_topology: bool = False
    scheduler_name: str = "toposched"
    model: str | None = None  # the catalog's name of what it trains (`spread_by_model`)

    def check(self) -> None:
        """SubmitError naming the first field that cannot be used."""
        limit = 63 - LONGEST_SUFFIX
        if not DNS_LABEL.fullmatch(self.name) or len(self.name) > limit:
            raise SubmitError(
                f"name {self.name!r}: lower-case letters, digits and '-', starting and ending "
                f"with a letter or digit, at most {limit} characters (pod names add a suffix)"
            )
        if not DNS_LABEL.fullmatch(self.namespace):
            raise SubmitError(f"namespace {self.namespace!r} is not a valid namespace name")
        if not self.image.strip():
            raise SubmitError("image: a container image is needed (--image)")
        for what, count in (("workers", self.workers), ("gpus", self.gpus)):
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise SubmitError(f"{what} must be a positive integer, got {count!r}")
        if self.model is not None and not self.model.strip():
            raise SubmitError("model: a performance catalog model's name, or leave it out")
        if not self.command or not self.command[0]:
            raise SubmitError("command: the program to run is missing")
        for name, value in self.env.items():
            if not ENV_NAME.fullmatch(name) or "\0" in value:
                raise SubmitError(f"env {name!r}: not a valid variable name, or a NUL in its value")
        try:
            LocalityRule.parse(self.locality)
            members(self.kind, self.workers, self.ps)
        except (JobError, KindError) as err:
            raise SubmitError(str(err)) from None


def objects(job: KubeJob) -> list[JSON]:
    """Every object of the job, in the order they are made."""
    job.check()
    roster = members(job.kind, job.workers, job.ps)
    hosts: dict[str, list[str]] = {}
    for member in roster:
        hosts.setdefault(member.role, []).append(f"{pod_name(job, member)}.{job.name}")
    made = [_podgroup(job), _service(job)]
    if job.kind is Kind.MPI:
        made.append(_hostfile(job, hosts["worker"]))
    made += [_pod(job, member, environment(job.kind, member, hosts)) for member in roster]
    return made


def pod_name(job: KubeJob, member: Member) -> str:
    return f"{job.name}-{member.name}"


def _meta(job: KubeJob, name: str, **labels: str) -> JSON:
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": {JOB_LABEL: job.name, KIND_LABEL: job.kind.value, **labels},
    }


def _podgroup(job: KubeJob) -> JSON:
    meta = _meta(job, job.name)
    meta["annotations"] = {
        LOCALITY: job.locality,
        ACCEPT_UNKNOWN: "true" if job.accept_unknown_topology else "false",
    }
    if job.model is not None:
        meta["annotations"][MODEL] = job.model
    return {
        "apiVersion": SCHEDULER_PLUGINS.api_version,
        "kind": "PodGroup",
        "metadata": meta,
        "spec": {"minMember": job.workers},
    }


def _service(job: KubeJob) -> JSON:
    """Headless: each pod's host name resolves to the pod itself (no load balancing)."""
    port = TF_PORT if job.kind is Kind.TENSORFLOW else TORCH_PORT
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(job, job.name),
        "spec": {
            "clusterIP": "None",
            "selector": {JOB_LABEL: job.name},
            # Members are told each other's names before they are ready.
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": port, "targetPort": port}],
        },
    }


def _hostfile(job: KubeJob, workers: list[str]) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _meta(job, f"{job.name}-hostfile"),
        "data": {"hostfile": hostfile(workers, job.gpus)},
    }


def _pod(job: KubeJob, member: Member, env: Mapping[str, str]) -> JSON:
    labels = {ROLE_LABEL: member.role}
    if member.gpu:
        labels[GROUP_LABEL] = job.name
    if job.queue:
        labels[QUEUE_LABEL] = job.queue
    name = pod_name(job, member)
    container: JSON = {
        "name": member.role,
        "image": job.image,
        "command": list(job.command),
        "env": [{"name": k, "value": v} for k, v in sorted({**job.env, **env}.items())],
    }
    spec: JSON = {
        "hostname": name,
        "subdomain": job.name,
        "restartPolicy": "Never",
        "containers": [container],
    }
    if member.gpu:
        container["resources"] = {"limits": {GPU_RESOURCE: str(job.gpus)}}
        spec["schedulerName"] = job.scheduler_name
    if job.priority_class:
        spec["priorityClassName"] = job.priority_class
    if job.kind is Kind.MPI:
        container["volumeMounts"] = [
            {"name": "hostfile", "mountPath": HOSTFILE.rsplit("/", 1)[0], "readOnly": True}
        ]
        spec["volumes"] = [{"name": "hostfile", "configMap": {"name": f"{job.name}-hostfile"}}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": _meta(job, name, **labels), "spec": spec}


# ---------------------------------------------------------------------- on a cluster


PLURALS = {"PodGroup": "podgroups", "Service": "services", "ConfigMap": "configmaps", "Pod": "pods"}


def path_of(obj: Mapping[str, Any]) -> str:
    """The collection an object of this module is created in."""
    api, kind = obj["apiVersion"], obj["kind"]
    ns = obj["metadata"]["namespace"]
    root = "/api/v1" if api == "v1" else f"/apis/{api}"
    return f"{root}/namespaces/{ns}/{PLURALS[kind]}"


def create(api: KubeApi, job: KubeJob) -> list[str]:
    """Make every object of the job; if one is refused, delete those made and raise ApiError.
    Returns the objects made, as `Kind/name`."""
    made: list[Mapping[str, Any]] = []
    try:
        for obj in objects(job):
            api.request("POST", path_of(obj), body=obj)
            made.append(obj)
    except ApiError:
        for obj in reversed(made):
            _delete_one(api, obj)
        raise
    return [f"{obj['kind']}/{obj['metadata']['name']}" for obj in made]


def delete(api: KubeApi, namespace: str, name: str) -> list[str]:
    """Delete every object labelled with job `name` (pods first, then what they used);
    returns them as `Kind/name` (one already gone meanwhile, as the rest of a gang that the
    scheduler evicts once a member is deleted, counts too), none if the job has no object."""
    gone: list[str] = []
    for kind in ("Pod", "ConfigMap", "Service", "PodGroup"):
        probe = {
            "apiVersion": "v1" if kind != "PodGroup" else SCHEDULER_PLUGINS.api_version,
            "kind": kind,
            "metadata": {"namespace": namespace},
        }
        items, _ = api.list(path_of(probe), labelSelector=f"{JOB_LABEL}={name}")
        for item in items:
            _delete_one(api, {**probe, "metadata": item["metadata"]})
            gone.append(f"{kind}/{item['metadata']['name']}")
    return gone


def _delete_one(api: KubeApi, obj: Mapping[str, Any]) -> None:
    """Delete one object; one already gone is fine."""
    try:
        api.request("DELETE", f"{path_of(obj)}/{obj['metadata']['name']}")
    except ApiError as err:
        if err.status != 404:
            raise
