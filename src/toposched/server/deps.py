"""What every route needs: the runtime, and who is calling (from the bearer token).

The dependencies are `async` so that FastAPI runs them on the event loop instead of handing
each to a worker thread; they block only on a token's first use (one indexed read).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request, status

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


async def state(request: Request) -> ServerState:
    found: ServerState = request.app.state.toposched
    return found


async def principal(request: Request, server: Annotated[ServerState, Depends(state)]) -> Principal:
    if not server.auth:
        return auth.LOCAL_ADMIN
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            "missing bearer token (set TOPOSCHED_TOKEN, or see `toposched token create`)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    token = token.strip()
    who = server.known.get(token) or auth.lookup(server.runtime.store, token)
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
