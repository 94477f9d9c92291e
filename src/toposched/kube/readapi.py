"""The Kubernetes scheduler's HTTP side: /healthz, /metrics, and the standalone server's read-only
cluster and queue API (`/api/v1/nodes`, `/queues`, `/jobs`, `/jobs/NAME`, `/jobs/NAME/explain`),
answered from the core's view, so that `toposched top node`, `list` and `explain` work against
a cluster. Nothing here changes anything: jobs are submitted and cancelled with kubectl."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Annotated, Any

from fastapi import FastAPI, HTTPException, Query, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Gauge, generate_latest

from toposched import __version__
from toposched.core.views import JobView
from toposched.dashboard import mount_dashboard
from toposched.server.localnode import topology_name
from toposched.server.schemas import (
    DEFAULT_PAGE,
    MAX_PAGE,
    Explanation,
    GpuOut,
    Health,
    HistoryOut,
    JobOut,
    JobPage,
    JobSummary,
    ListMeta,
    NodeList,
    NodeOut,
    QueueList,
    QueueOut,
    WhoAmI,
    WorkerOut,
)

if TYPE_CHECKING:
    from toposched.kube.runner import Runner


def make_app(runner: Runner) -> FastAPI:
    """The read API over `runner`'s core; every read holds the runner's lock."""
    app = FastAPI(title="toposched kube scheduler", version=__version__)
    registry = CollectorRegistry()
    leading = Gauge("toposched_kube_leader", "1 while this replica leads", registry=registry)
    steps = Gauge("toposched_kube_steps", "Scheduling loop passes", registry=registry)
    gangs = Gauge("toposched_kube_gangs", "Gangs the core holds", registry=registry)
    lock = runner.lock
    s = runner.scheduler

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", media_type="text/plain")

    @app.get("/metrics")
    def metrics() -> Response:
        leading.set(1 if runner.leading else 0)
        steps.set(runner.steps)
        with lock:
            gangs.set(len(s.gangs))
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/api/v1/health", response_model=Health)
    def health() -> Health:
        with lock:
            total = sum(size for _, size, _ in s.view.free())
        state = "ok" if runner.leading else "standby"
        return Health(
            status=state,
            version=__version__,
            node=f"kubernetes ({len(s.nodes.known)} nodes)",
            gpus=total,
            database="none",
            auth=False,
        )

    @app.get("/api/v1/whoami", response_model=WhoAmI)
    def whoami() -> WhoAmI:
        return WhoAmI(user="anonymous", team="", role="reader")

    @app.get("/api/v1/nodes", response_model=NodeList)
    def nodes() -> NodeList:
        with lock:
            owners = s.view.owners()
            out = []
            for name, size, _ in s.view.free():
                gpus = s.nodes.known[name]
                sick = s.view.unhealthy(name)
                out.append(
                    NodeOut(
                        name=name,
                        topology=topology_name(gpus.topology),
                        source="annotation toposched.io/topology",
                        gpus=[
                            GpuOut(index=g, job=owners.get((name, g)), healthy=g not in sick)
                            for g in range(size)
                        ],
                        labels=s.view.labels(name),
                        links=gpus.topology.codes(),
                    )
                )
        return NodeList(nodes=out)

    @app.get("/api/v1/queues", response_model=QueueList)
    def queues() -> QueueList:
        with lock:
            usage = s.view.queues()
            counts = s.view.waiting_and_running()
        return QueueList(
            queues=[
                QueueOut(
                    name=name,
                    guaranteed_gpus=guaranteed,
                    used_gpus=used,
                    pending=counts.get(name, (0, 0))[0],
                    running=counts.get(name, (0, 0))[1],
                    idle=None,  # a PodGroup carries its own rule on a cluster
                )
                for name, (guaranteed, used) in sorted(usage.items())
            ]
        )

    @app.get("/api/v1/jobs", response_model=JobPage)
    def jobs(
        all: bool = False,
        queue: str | None = None,
        limit: Annotated[int, Query(ge=1)] = DEFAULT_PAGE,
        newest_first: bool = False,
        continue_: Annotated[str | None, Query(alias="continue")] = None,
    ) -> JobPage:
        """The standalone server's paged list (routes_jobs.list_jobs): the core holds every
        job, so a page's `continue` is simply where the next one starts."""
        with lock:
            views = [
                v
                for v in s.view.jobs()
                if (all or not v.state.terminal)
                and (queue is None or (v.spec is not None and v.spec.queue == queue))
            ]
        if newest_first:
            views.reverse()
        if continue_ is not None and not continue_.isdigit():
            raise HTTPException(422, f"continue {continue_!r} is not a token this API gave")
        start = int(continue_ or 0)
        end = start + min(limit, MAX_PAGE)
        token = str(end) if end < len(views) else None
        return JobPage(
            jobs=[JobSummary(**_summary(v)) for v in views[start:end]],
            metadata=ListMeta(**{"continue": token}),
        )

    @app.get("/api/v1/jobs/{name:path}/explain", response_model=Explanation)
    def explain(name: str) -> Explanation:
        with lock:
            if not s.view.knows(name):
                raise HTTPException(404, f"no job named {name!r}")
            view = s.view.job(name)
            return Explanation(name=name, state=view.state.value, text=s.view.explain(name))

    @app.get("/api/v1/jobs/{name:path}", response_model=JobOut)
    def job(name: str) -> JobOut:
        with lock:
            if not s.view.knows(name):
                raise HTTPException(404, f"no job named {name!r}")
            return _job_out(s.view.job(name))

    mount_dashboard(app)
    return app


def _summary(view: JobView) -> dict[str, Any]:
    """What a list row and `get` share."""
    spec = view.spec
    assert spec is not None
    placement = view.placement.workers if view.placement is not None else ()
    return dict(
        name=view.name,
        owner=spec.owner,
        queue=spec.queue,
        priority=spec.priority,
        state=view.state.value,
        reason=view.reason,
        workers=spec.workers,
        gpus_per_worker=spec.gpus_per_worker,
        placement=[
            WorkerOut(worker=i, node=slot.node, gpus=list(slot.gpus), mig_start=slot.instance)
            for i, slot in enumerate(placement)
        ],
        attempt=0,
        restarts=view.restarts,
        submitted_at=view.submitted,
        started_at=view.started,
        ended_at=None,
        spec={
            "workers": spec.workers,
            "gpus": spec.gpus_per_worker,
            "locality": spec.locality.prefer.value,
        },
    )


def _job_out(view: JobView) -> JobOut:
    history = [
        HistoryOut(time=t, old=None, new=view.state.value, reason=text) for t, text in view.history
    ]
    return JobOut(**_summary(view), command=[], history=history)


def serve(app: FastAPI, host: str, port: int) -> Any:
    """Serve `app` with uvicorn in a daemon thread; the uvicorn server (`should_exit = True`
    stops it)."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    server = uvicorn.Server(config)  # outside the main thread it leaves signals alone
    thread = threading.Thread(target=server.run, name="http", daemon=True)
    thread.start()
    return server
