"""The FastAPI application: routes over one runtime, OpenAPI at /docs."""

from __future__ import annotations

from fastapi import FastAPI

from toposched import __version__
from toposched.server import routes_cluster, routes_jobs
from toposched.server.deps import ServerState
from toposched.server.metrics import Metrics
from toposched.server.runtime import Runtime


def create_app(runtime: Runtime, metrics: Metrics, *, auth: bool = True) -> FastAPI:
    app = FastAPI(
        title="toposched",
        version=__version__,
        description="A topology-aware gang scheduler for deep-learning jobs on GPU servers.",
    )
    app.state.toposched = ServerState(runtime, metrics, auth, __version__)
    app.include_router(routes_jobs.router)
    app.include_router(routes_cluster.router)
    return app
