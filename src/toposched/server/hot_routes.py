"""Submit and list, the routes taken most, answered before FastAPI routes them: the same
functions and the same errors, for a fraction of the framework's work per request.

FastAPI's routing, dependency solving and parameter reading cost a submit about a quarter of
the server's CPU (`benchmarks/api_load.py --costs`), and the server is bound by one core.
A request these routes take is read here (its body by `wirejson.read_json`, the one reader
FastAPI's routes use too) and handed to the functions the FastAPI routes call (`caller`,
`submitted`, `page`); one they would read otherwise than FastAPI does (another content type, a
body or query that does not validate, an odd header) goes on to FastAPI as it came, so that its
answer, a 422 above all, is FastAPI's own. An exception is answered by
the application's handlers, as FastAPI answers it. The OpenAPI schema still describes both
routes: FastAPI's are still there, and answer what these pass on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import parse_qsl

from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from toposched.server.auth import Principal
from toposched.server.deps import ServerState, caller
from toposched.server.routes_jobs import page, submitted
from toposched.server.schemas import MAX_IDEMPOTENCY_KEY, JobSubmit, ListQuery
from toposched.server.wirejson import BodyError, read_json

PATH = "/api/v1/jobs"
LISTED = ("state",)  # ListQuery's fields read as lists: every value, in order
SCALARS = tuple(
    (field.alias or name) for name, field in ListQuery.model_fields.items() if name not in LISTED
)

Handler = Callable[[Request, Exception], Awaitable[Response] | Response]


class HotRoutes:
    """ASGI middleware: `POST` and `GET /api/v1/jobs` answered here where they can be."""

    def __init__(self, app: ASGIApp, server: ServerState, handlers: Mapping[Any, Handler]) -> None:
        self.app = app
        self.server = server
        # The application's own dictionary: a handler added later is seen.
        self.handlers = handlers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != PATH:
            await self.app(scope, receive, send)
            return
        if scope["method"] == "POST":
            await self._submit(scope, receive, send)
        elif scope["method"] == "GET":
            await self._list(scope, receive, send)
        else:
            await self.app(scope, receive, send)

    async def _submit(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers = _first(scope)
        content_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        length = headers.get(b"content-length", b"")
        key = headers.get(b"idempotency-key")
        if (
            content_type != b"application/json"
            or not length.isdigit()  # BoundedBody, outside, has refused one too large
            or int(length) == 0
            or (key is not None and not 0 < len(key) <= MAX_IDEMPOTENCY_KEY)
        ):
            await self.app(scope, receive, send)
            return
        raw = await _body(receive)
        if raw is None:  # the client went away: nobody to answer
            return
        try:
            body = JobSubmit.model_validate(read_json(raw))
        except (BodyError, ValidationError):
            await self.app(scope, _replay(raw, receive), send)
            return
        said_key = None if key is None else key.decode("latin-1")
        await self._answer(
            scope, receive, send, lambda who: submitted(self.server, who, body, said_key), headers
        )

    async def _list(self, scope: Scope, receive: Receive, send: Send) -> None:
        said = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
        values: dict[str, Any] = {}
        for name, value in said:
            if name in LISTED:
                values.setdefault(name, []).append(value)
            elif name in SCALARS:
                values[name] = value  # the last given, as FastAPI reads a repeated one
        try:
            query = ListQuery.model_validate(values)
        except ValidationError:
            await self.app(scope, receive, send)
            return

        async def reading(_who: Principal) -> Response:
            return await run_in_threadpool(page, self.server, query)

        await self._answer(scope, receive, send, reading, _first(scope))

    async def _answer(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        work: Callable[[Principal], Awaitable[Response]],
        headers: dict[bytes, bytes],
    ) -> None:
        """`work`'s response for the caller the request names, or the application's answer to
        the exception on the way (a 401 first, as FastAPI solves the caller first)."""
        try:
            who = await caller(self.server, headers.get(b"authorization", b"").decode("latin-1"))
            response = await work(who)
        except Exception as err:
            handler = next(
                (self.handlers[kind] for kind in type(err).__mro__ if kind in self.handlers),
                None,
            )
            if handler is None:
                raise
            answered = handler(Request(scope, receive), err)
            response = answered if isinstance(answered, Response) else await answered
        await response(scope, receive, send)


def _first(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lower-case name, the first of a repeated one (as Starlette's
    `Headers.get` gives it)."""
    headers: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        headers.setdefault(name, value)
    return headers


async def _body(receive: Receive) -> bytes | None:
    """The whole request body; None if the client disconnected first."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(raw: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `raw` first, as the body already read, then the client's own."""
    given = False

    async def again() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": raw, "more_body": False}

    return again
