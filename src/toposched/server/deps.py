"""What every route needs: the runtime, and who is calling (from the bearer token).

The dependencies are `async` so that FastAPI runs them on the event loop instead of handing
each to a worker thread; a token's first use is looked up in a thread (one indexed read).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated, ParamSpec, TypeVar

import anyio
from fastapi import Depends, HTTPException, Request, status
from starlette.concurrency import run_in_threadpool

from toposched.server import auth
from toposched.server.auth import Principal
from toposched.server.metrics import Metrics
from toposched.server.runtime import Runtime


@dataclass
class ServerState:
    runtime: Runtime
    metrics: Metrics
    auth: bool
    version: str
    # Tokens cannot be revoked or changed, so a token once found stays valid: caching it
    # saves a database read on every request.
    known: dict[str, Principal] = field(default_factory=dict)
    # Threads for changes, apart from the default pool the reads use, so that changes waiting
    # on a locked database leave the reads their threads. Changes take turns on the runtime's
    # lock, and the submissions waiting for it are stored together by the next to get it
    # (Runtime.submit): the more wait there, the fewer commits a burst costs. Made on first
    # use, inside the event loop.
    writers: anyio.CapacityLimiter | None = None


WRITER_THREADS = 16
P = ParamSpec("P")
T = TypeVar("T")


async def writing(
    server: ServerState, work: Callable[P, T], *args: P.args, **kwargs: P.kwargs
) -> T:
    """Run a change in one of the writers' threads, off the event loop."""
    if server.writers is None:
        server.writers = anyio.CapacityLimiter(WRITER_THREADS)
    call = functools.partial(work, *args, **kwargs)
    return await anyio.to_thread.run_sync(call, limiter=server.writers)


async def state(request: Request) -> ServerState:
    found: ServerState = request.app.state.toposched
    return found


async def principal(request: Request) -> Principal:
    # The state read here, not as a dependency of its own: each dependency costs FastAPI a
    # pass over every kind of parameter on every request.
    server: ServerState = request.app.state.toposched
    return await caller(server, request.headers.get("authorization", ""))


async def caller(server: ServerState, header: str) -> Principal:
    """Who sends the `Authorization` header `header`; 401 if nobody known."""
    if not server.auth:
        return auth.LOCAL_ADMIN
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing bearer token (set TOPOSCHED_TOKEN, or see `toposched token create`)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    token = token.strip()
    who = server.known.get(token) or await run_in_threadpool(
        auth.lookup, server.runtime.store, token
    )
    if who is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "unknown token",
            headers={"WWW-Authenticate": "Bearer"},
        )
    server.known[token] = who
    return who


async def admin(who: Annotated[Principal, Depends(principal)]) -> Principal:
    if not who.admin:
        raise HTTPException(status.HTTP_403_FORBIDDEN, f"user {who.user!r} is not an admin")
    return who


Server = Annotated[ServerState, Depends(state)]
Caller = Annotated[Principal, Depends(principal)]
Admin = Annotated[Principal, Depends(admin)]
