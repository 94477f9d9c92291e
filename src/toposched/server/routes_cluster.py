"""Cluster routes: health, nodes and labels, queues and shares, tokens, metrics."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fastapi import APIRouter, HTTPException, Response, status
from prometheus_client import CONTENT_TYPE_LATEST

from toposched.server import auth
from toposched.server.activity import SOURCE_TEXT, ActivityMonitor
from toposched.server.deps import Admin, Caller, Server
from toposched.server.localnode import topology_name
from toposched.server.schemas import (
    GpuOut,
    Health,
    IdleOut,
    LabelIn,
    NodeList,
    NodeOut,
    QueueIn,
    QueueList,
    QueueOut,
    ShareOut,
    TokenIn,
    TokenOut,
    WhoAmI,
    check_name,
)
from toposched.server.shared import Conflict, NotFound
from toposched.server.wirejson import WireRoute
from toposched.store.db import KEEP

router = APIRouter(route_class=WireRoute)


@router.get("/api/v1/health", response_model=Health, tags=["cluster"])
async def health(server: Server, response: Response) -> Health:
    """`ok`; `degraded` (200) while changes cannot be stored, with the cause; 503 with
    `broken: ...` when the server is about to exit. Reads no database and waits for no lock."""
    runtime = server.runtime
    degraded = runtime.degraded
    if runtime.broken is not None:
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        said = f"broken: {runtime.broken}"
    else:
        said = "ok" if degraded is None else "degraded"
    return Health(
        status=said,
        degraded=degraded,
        version=server.version,
        node=runtime.node.name,
        gpus=runtime.node.size,
        database=runtime.store.dialect,
        auth=server.auth,
    )


@router.get("/metrics", tags=["cluster"])
async def metrics(server: Server) -> Response:
    """Prometheus text format. Rendered in a thread of its own (it reads the database), so
    that neither a busy thread pool nor a locked database delays it long."""
    text = await server.metrics.render()
    return Response(text, media_type=CONTENT_TYPE_LATEST)


@router.get("/api/v1/whoami", response_model=WhoAmI, tags=["cluster"])
def whoami(who: Caller) -> WhoAmI:
    return WhoAmI(user=who.user, team=who.team, role=who.role)


@router.get("/api/v1/nodes", response_model=NodeList, tags=["cluster"])
def nodes(server: Server, _who: Caller) -> NodeList:
    """Each node's GPU map: which job holds which GPU, and the link kind between every pair."""
    runtime = server.runtime
    node = runtime.node
    seen = runtime.snapshot()
    owners, sick, labels = seen.owners, seen.sick, seen.labels
    activity = runtime.activity
    return NodeList(
        nodes=[
            NodeOut(
                name=node.name,
                topology=topology_name(node.topology),
                source=runtime.local.source,
                gpus=[
                    gpu_out(g, owners.get(g), g not in sick, activity, seen.shares.get(g, {}))
                    for g in range(node.size)
                ],
                activity_source=None if activity is None else SOURCE_TEXT[activity.source],
                labels=labels,
                links=node.topology.codes(),
                gpu_type=node.hardware.gpu_type,
                gpu_memory=node.hardware.gpu_memory,
                cpus=node.hardware.cpus,
                cpus_used=seen.held[0],
                memory=node.hardware.memory,
                memory_used=seen.held[1],
            )
        ]
    )


def gpu_out(
    index: int,
    job: str | None,
    healthy: bool,
    activity: ActivityMonitor | None,
    shares: Mapping[str, tuple[int, int]],
) -> GpuOut:
    """A GPU of the map, with its shares' holders, and how busy it was at the last sample
    where that is known."""
    held = [
        ShareOut(job=name, milli=m, memory_mib=mib) for name, (m, mib) in sorted(shares.items())
    ]
    now = None if activity is None else activity.gpu(index)
    if now is None or now.job != job:  # sampled before the GPU changed hands: not its figure
        return GpuOut(index=index, job=job, healthy=healthy, shares=held)
    return GpuOut(
        index=index,
        job=job,
        healthy=healthy,
        shares=held,
        busy_pct=now.busy_pct,
        memory_used=now.memory_used,
        outside=list(now.outside),
    )


@router.put("/api/v1/nodes/{name}/labels", response_model=NodeList, tags=["cluster"])
def label(name: str, body: LabelIn, server: Server, who: Admin) -> NodeList:
    """Set a label (or remove it, with value null), e.g. toposched.io/gpu-schedule=default."""
    try:
        server.runtime.label(name, body.key, body.value)
    except NotFound as err:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(err)) from None
    except Conflict as err:
        detail = [{"loc": ["body", "value"], "msg": str(err), "type": "value_error"}]
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail) from None
    return nodes(server, who)


@router.get("/api/v1/queues", response_model=QueueList, tags=["queues"])
def queues(server: Server, _who: Caller) -> QueueList:
    runtime = server.runtime
    counts = runtime.store.count_by_queue(("pending", "running", "stopping"))
    rules = runtime.store.queue_idle_rules()
    usage = dict(runtime.snapshot().usage)
    for name, gpus in runtime.store.queues().items():
        usage.setdefault(name, (gpus, 0))
    return QueueList(
        queues=[
            QueueOut(
                name=name,
                guaranteed_gpus=guaranteed,
                used_gpus=used,
                pending=counts.get((name, "pending"), 0),
                running=counts.get((name, "running"), 0) + counts.get((name, "stopping"), 0),
                idle=IdleOut(**rules[name]) if name in rules else None,
            )
            for name, (guaranteed, used) in sorted(usage.items())
        ]
    )


@router.put("/api/v1/queues/{name}", response_model=QueueList, tags=["queues"])
def set_queue(name: str, body: QueueIn, server: Server, who: Admin) -> QueueList:
    """Set a queue's guaranteed share in GPUs and/or the idle rule of its jobs that set none
    (admin): the fields given change, `"idle": null` removes the rule."""
    try:
        check_name(name, "queue")
    except ValueError as err:
        detail = [{"loc": ["path", "name"], "msg": str(err), "type": "value_error"}]
        raise HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail) from None
    idle: Any = KEEP
    if "idle" in body.model_fields_set:
        idle = None if body.idle is None else body.idle.model_dump()
    server.runtime.configure_queue(name, body.guaranteed_gpus, idle)
    return queues(server, who)


@router.post(
    "/api/v1/tokens", response_model=TokenOut, status_code=status.HTTP_201_CREATED, tags=["auth"]
)
def create_token(body: TokenIn, server: Server, _who: Admin) -> TokenOut:
    """A new bearer token for a user of a team (admin). It is shown once and stored hashed."""
    token = auth.create_token(server.runtime.store, body.user, body.team, body.admin)
    return TokenOut(
        token=token, user=body.user, team=body.team, role="admin" if body.admin else "user"
    )
