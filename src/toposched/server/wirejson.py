"""The one reader of request bodies: every JSON body the API takes is decoded here, by orjson.

The hot routes (server/hot_routes.py) and FastAPI's routes once read bodies with two parsers:
orjson, and the standard library's, which accepts what orjson refuses (a lone UTF-16 surrogate
escape, NaN and Infinity tokens). A body refused by one was taken by the other, so what was
stored depended on the route. Now both read through `read_json`, and a body it refuses is
answered 422 with the path of the value at fault (`body.command.1`), found by `path_at` from
the position orjson gives, in the same shape as FastAPI's own body errors.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

import orjson
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response

from toposched.common.wiretext import MAX_DEPTH

Path = tuple[str | int, ...]
NON_FINITE = (b"NaN", b"Infinity", b"-Infinity")


class BodyError(json.JSONDecodeError):
    """A body that is not JSON this API takes: where (the path of the value) and why.

    A `json.JSONDecodeError`, as FastAPI expects of a request's `json()`; `WireRoute` answers
    it with the path rather than FastAPI's byte offset."""

    def __init__(self, raw: bytes, err: json.JSONDecodeError) -> None:
        super().__init__(err.msg, err.doc, err.pos)
        self.path = path_at(raw, err.pos)
        self.why = _why(raw, err)

    def entry(self) -> dict[str, Any]:
        """The error as one entry of a 422's `detail`, as FastAPI writes one."""
        return {
            "type": "json_invalid",
            "loc": ("body", *self.path),
            "msg": self.why,
            "input": {},
            "ctx": {"error": self.msg},
        }


def read_json(raw: bytes) -> Any:
    """`raw` decoded, or BodyError saying where and why it cannot be."""
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as err:
        raise BodyError(raw, err) from None


def _why(raw: bytes, err: json.JSONDecodeError) -> str:
    said = err.msg.lower()
    if "utf-8" in said:  # bytes that are not UTF-8 (orjson checks the whole text first)
        return "is not UTF-8 text: a JSON body must be"
    if "surrogate" in said:
        return (
            "holds a lone UTF-16 surrogate: it is not text UTF-8 can hold, so it could be "
            "neither stored nor read back"
        )
    if raw[err.pos :].startswith(NON_FINITE):
        return "must be a finite number: JSON has no NaN or Infinity"
    if "depth" in said or "recursion" in said:
        return f"nested more than {MAX_DEPTH} levels deep"
    return f"JSON decode error: {err.msg} (at byte {err.pos})"


def path_at(raw: bytes, pos: int) -> Path:
    """The path of the value that byte `pos` of the JSON text `raw` is in (or starts), read as
    far as `pos` only: what is before it is valid JSON, as a decoder stops at the first fault.
    A map's key that holds the fault is named as pydantic names keys (`[key]` after it). At
    most MAX_DEPTH deep."""
    # Each open container: [path part, or None while a map waits for its next key; is a list].
    stack: list[list[Any]] = []
    i = 0
    while i < pos:
        c = raw[i]
        if c == 0x22:  # a string: a key, or a value
            end = _string_end(raw, i)
            if stack and not stack[-1][1] and stack[-1][0] is None:
                if end >= pos:  # the fault is in this key
                    return (*_path(stack), _key(raw[i + 1 : min(end, len(raw))]), "[key]")
                stack[-1][0] = _key(raw[i + 1 : end])
            i = end + 1
            continue
        if c in b"[{":
            stack.append([0, True] if c == 0x5B else [None, False])
        elif c in b"]}":
            if stack:
                stack.pop()
        elif c == 0x2C and stack:  # a comma: the next item, or the next key
            if stack[-1][1]:
                stack[-1][0] += 1
            else:
                stack[-1][0] = None
        i += 1
    return _path(stack)


def _path(stack: list[list[Any]]) -> Path:
    return tuple(part for part, _ in stack if part is not None)[:MAX_DEPTH]


def _string_end(raw: bytes, start: int) -> int:
    """The index of the quote that closes the string opened at `start` (len(raw) if none)."""
    i = start + 1
    while i < len(raw):
        if raw[i] == 0x5C:  # a backslash escapes the next byte
            i += 2
            continue
        if raw[i] == 0x22:
            return i
        i += 1
    return len(raw)


def _key(text: bytes) -> str:
    """A key as decoded, or as written where it cannot be (a lone surrogate's escape stays
    `\\ud800`: the answer that names it must itself be text)."""
    try:
        decoded = orjson.loads(b'"' + text + b'"')
    except orjson.JSONDecodeError:
        return text.decode("utf-8", "backslashreplace")
    return str(decoded)


class WireRequest(Request):
    """A request whose JSON body is read by `read_json`."""

    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = read_json(await self.body())
        return self._json


class WireRoute(APIRoute):
    """A FastAPI route that reads its body with `read_json`, and answers a body it refuses with
    a 422 naming the value's path (FastAPI's own answer gives a byte offset)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handle = super().get_route_handler()

        async def reading(request: Request) -> Response:
            try:
                return await handle(WireRequest(request.scope, request.receive))
            except RequestValidationError as err:
                cause = err.__cause__
                if isinstance(cause, BodyError):
                    raise RequestValidationError([cause.entry()], body=cause.doc) from None
                raise

        return reading
