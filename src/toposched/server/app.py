"""The FastAPI application: routes over one runtime, OpenAPI at /docs."""

from __future__ import annotations

import json
import logging
import math
import time
from typing import Any

from fastapi import FastAPI, HTTPException, Request, status
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import SQLAlchemyError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toposched import __version__
from toposched.dashboard import mount_dashboard
from toposched.server import routes_cluster, routes_jobs
from toposched.server.deps import ServerState
from toposched.server.hot_routes import HotRoutes
from toposched.server.metrics import Metrics
from toposched.server.runtime import Runtime
from toposched.server.shared import PROBE_S, RuntimeBroken, Unavailable
from toposched.store import StoreError, write_fault

# When a client should try again: the degraded runtime probes the database this often.
RETRY_AFTER_S = max(1, round(2 * PROBE_S))


def create_app(
    runtime: Runtime, metrics: Metrics, *, auth: bool = True, hot_routes: bool = True
) -> FastAPI:
    """The application. `hot_routes=False` leaves every request to FastAPI's routes: the
    hot routes' answers are checked against those."""
    app = FastAPI(
        title="toposched",
        version=__version__,
        description="A topology-aware gang scheduler for deep-learning jobs on GPU servers.",
    )
    app.state.toposched = ServerState(runtime, metrics, auth, __version__)
    app.include_router(routes_jobs.router)
    app.include_router(routes_cluster.router)
    mount_dashboard(app)  # the dashboard at /, and /docs without a CDN
    app.add_exception_handler(RuntimeBroken, _unavailable)
    app.add_exception_handler(Unavailable, _unavailable)
    app.add_exception_handler(StoreError, _database)
    app.add_exception_handler(SQLAlchemyError, _database)
    app.add_exception_handler(RequestValidationError, _invalid)
    # Innermost of the middleware: a request it answers is still bounded (and logged).
    if hot_routes:
        app.add_middleware(HotRoutes, server=app.state.toposched, handlers=app.exception_handlers)
    app.add_middleware(BoundedBody)
    if access.isEnabledFor(logging.DEBUG):
        # Outermost, to time and see every answer (a 413 included). Added only at DEBUG: at
        # INFO a request costs no logging work at all, not even a level check.
        app.add_middleware(RequestLog)
    return app


access = logging.getLogger("toposched.server.http")


class RequestLog:
    """Logs each HTTP request at DEBUG once it is answered: method, path, status (`-` if
    none was sent) and how long it took, to the end of its body (a followed log included)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.perf_counter()
        status = "-"

        async def sent(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = str(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sent)
        finally:
            took_ms = (time.perf_counter() - began) * 1000
            access.debug("%s %s %s %.1f ms", scope["method"], scope["path"], status, took_ms)


# The largest request body read: far over a job at its bounds (64 KiB of command, 64 KiB of
# environment), so that an oversized field still gets its 422 naming it; a larger body is
# refused before it is read into memory.
MAX_BODY_BYTES = 16 * 1024 * 1024


class BoundedBody:
    """Answers 413 to a request body over MAX_BODY_BYTES, whether it says its length or not."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
            await _too_large(scope, receive, send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > MAX_BODY_BYTES:
                # An HTTPException: FastAPI passes it on as it is while it reads the body.
                raise HTTPException(status.HTTP_413_CONTENT_TOO_LARGE, TOO_LARGE)
            return message

        await self.app(scope, counted, send)


TOO_LARGE = f"the request body is over {MAX_BODY_BYTES} bytes (16 MiB); nothing was stored"


async def _too_large(scope: Scope, receive: Receive, send: Send) -> None:
    await JSONResponse({"detail": TOO_LARGE}, status.HTTP_413_CONTENT_TOO_LARGE)(
        scope, receive, send
    )


# A refused field's value is echoed back only when short: a 10 MB command is not.
ECHO_CHARS = 200


async def _invalid(_request: Request, err: Exception) -> JSONResponse:
    """FastAPI's 422, one entry per bad field, with each `input` made fit for JSON: a NaN
    or Infinity sent (Python's JSON reads them) cannot be written back, and made a 500."""
    assert isinstance(err, RequestValidationError)
    # A body that is not JSON is refused with its bytes as the input, which need not be
    # UTF-8 (FastAPI's encoder would fail on them, and make the 422 a 500).
    said = jsonable_encoder(err.errors(), custom_encoder={bytes: _text})
    detail = [_entry(entry) for entry in said]
    return JSONResponse({"detail": detail}, status.HTTP_422_UNPROCESSABLE_CONTENT)


def _text(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


def _entry(entry: dict[str, Any]) -> dict[str, Any]:
    entry = {key: _finite(value) for key, value in entry.items()}
    if "input" in entry and len(json.dumps(entry["input"])) > ECHO_CHARS:
        del entry["input"]
    return entry


def _finite(value: Any) -> Any:
    """`value` with each non-finite number as its text ("nan", "inf")."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


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
