"""The FastAPI application: routes over one runtime, OpenAPI at /docs."""

from __future__ import annotations

from fastapi import FastAPI, Request, status
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError

from toposched import __version__
from toposched.server import routes_cluster, routes_jobs
from toposched.server.deps import ServerState
from toposched.server.metrics import Metrics
from toposched.server.runtime import PROBE_S, Runtime, RuntimeBroken, Unavailable
from toposched.store import StoreError, write_fault

# When a client should try again: the degraded runtime probes the database this often.
RETRY_AFTER_S = max(1, round(2 * PROBE_S))


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
    app.add_exception_handler(Unavailable, _unavailable)
    app.add_exception_handler(StoreError, _database)
    app.add_exception_handler(SQLAlchemyError, _database)
    return app


async def _unavailable(_request: Request, err: Exception) -> JSONResponse:
    """Nothing of the request was stored: the database cannot take writes now (the runtime
    is degraded), or the runtime is about to exit."""
    return JSONResponse(
        {"detail": str(err)},
        status.HTTP_503_SERVICE_UNAVAILABLE,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )


async def _database(request: Request, err: Exception) -> JSONResponse:
    """A read (or a write outside the runtime) that the database refused: nothing changed."""
    cause = write_fault(err) if isinstance(err, SQLAlchemyError) else str(err)
    return await _unavailable(request, Unavailable(cause))
