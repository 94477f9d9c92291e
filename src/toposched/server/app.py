"""The FastAPI application: routes over one runtime, OpenAPI at /docs."""

from __future__ import annotations

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse

from toposched import __version__
from toposched.server import routes_cluster, routes_jobs
from toposched.server.deps import ServerState
from toposched.server.metrics import Metrics
from toposched.server.runtime import Runtime, RuntimeBroken
from toposched.store import StoreError


def create_app(runtime: Runtime, metrics: Metrics, *, auth: bool = True) -> FastAPI:
    app = FastAPI(
        title="toposched",
        version=__version__,
        description="A topology-aware gang scheduler for deep-learning jobs on GPU servers.",
    )
    app.state.toposched = ServerState(runtime, metrics, auth, __version__)
    app.include_router(routes_jobs.router)
    app.include_router(routes_cluster.router)
    app.add_exception_handler(RuntimeBroken, _unavailable)
    app.add_exception_handler(StoreError, _unavailable)
    return app


async def _unavailable(_request: Request, err: Exception) -> JSONResponse:
    """The database is down (nothing was changed), or failed mid-decision (the server stops)."""
    return JSONResponse({"detail": str(err)}, status.HTTP_503_SERVICE_UNAVAILABLE)
