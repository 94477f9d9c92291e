"""Job routes: submit, get, list, cancel, logs, explain; thin shells over the runtime."""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any, Literal

import orjson
from fastapi import APIRouter, Header, HTTPException, Query, Response, status
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from toposched.common.jobfields import compact
from toposched.common.jobspec import job_kind, local_processes
from toposched.core import JobState
from toposched.server.auth import Principal
from toposched.server.deps import Caller, Server, ServerState, writing
from toposched.server.runtime import LIVE, Conflict, NotFound, QueueFull, Runtime, SubmitRefused
from toposched.server.schemas import (
    MAX_IDEMPOTENCY_KEY,
    MAX_PAGE,
    ActivityHistory,
    AfterOut,
    Explanation,
    HistoryOut,
    JobOut,
    JobPage,
    JobSubmit,
    ListQuery,
)
from toposched.server.wirejson import WireRoute
from toposched.store import CORRUPT, DuplicateJob, JobRow

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"], route_class=WireRoute)

STATES = tuple(state.value for state in JobState)


HIDDEN = "(hidden)"


def visible_spec(row: JobRow, viewer: Principal) -> dict[str, Any]:
    """The job's spec as `viewer` may see it: another team sees neither its environment's
    values (they often hold keys) nor, unless its owner marked it `command_visible`, its
    command (a secret may be an argument); its state and placement are not hidden."""
    spec = row.spec
    if viewer.may_touch(row.queue):
        return spec
    if spec.get("env"):
        spec = {**spec, "env": dict.fromkeys(spec["env"], HIDDEN)}
    if not spec.get("command_visible"):
        spec = {**spec, "command": [HIDDEN]}
    return spec


# The states in which a job holds its placement's GPUs: only then is its speed predicted.
HOLDING = (JobState.RUNNING.value, JobState.STOPPING.value)


def _common(row: JobRow, reason: str, runtime: Runtime) -> dict[str, Any]:
    """What `get` and a list row share."""
    holding = row.state in HOLDING and bool(row.placement)
    activity = runtime.activity.of(row.name) if holding and runtime.activity else None
    if activity and activity["idle_notice"]:
        reason = f"{reason}; {activity['idle_notice']}"
    if activity and activity["gpu_memory_notice"]:
        reason = f"{reason}; {activity['gpu_memory_notice']}"
    first = (row.placement or [{}])[0]
    return dict(
        name=row.name,
        owner=row.owner,
        queue=row.queue,
        priority=row.priority,
        state=row.state,
        reason=reason,
        workers=row.spec.get("workers", 0),  # none in a corrupt row's (store.CORRUPT)
        gpus_per_worker=row.spec.get("gpus", 0),
        placement=[
            {
                "worker": rank,
                "node": slot["node"],
                "gpus": slot["gpus"],
                "mig_start": slot.get("mig_start"),
            }
            for rank, slot in enumerate(row.placement or [])
        ],
        ring_gbps=first.get("ring_gbps") if holding else None,
        predicted=runtime.predictor.of(row.spec, row.placement) if holding else None,
        port=first.get("port") if holding else None,
        activity=activity,
        attempt=row.attempt,
        restarts=row.restarts,
        submitted_at=row.submitted_at,
        started_at=row.started_at,
        ended_at=row.ended_at,
    )


def job_out(
    runtime: Runtime,
    row: JobRow,
    viewer: Principal,
    *,
    history: bool = False,
    reason: str | None = None,
) -> JobOut:
    """The whole job as `viewer` may see it (`visible_spec`). `reason`: the core's, if the
    caller has it already."""
    out = job_fields(row, viewer, runtime.reason(row) if reason is None else reason, runtime)
    if history:
        out["history"] = [HistoryOut(**vars(h)) for h in runtime.store.history(row.name)]
        out["after"] = _runs_after(runtime, row)
        if row.placement and row.attempt >= 0:  # the CPU cores its processes are pinned to
            kind, ps = job_kind(row.spec)
            out["cores"] = runtime.executor.pinned(
                row.name, row.attempt, len(row.placement), kind, ps
            )
    return JobOut(**out)


def _runs_after(runtime: Runtime, row: JobRow) -> list[AfterOut]:
    """The jobs `row` runs after, each with its state as stored now."""
    out = []
    for text in row.spec.get("after") or ():
        name, _, until = text.rpartition(":")
        other = runtime.store.job(name)
        out.append(AfterOut(job=name, until=until, state=other.state if other else "deleted"))
    return out


def job_fields(row: JobRow, viewer: Principal, reason: str, runtime: Runtime) -> dict[str, Any]:
    """JobOut without its history, in plain data: a submit's answer is written without
    building and checking a model (tests check it against JobOut)."""
    spec = visible_spec(row, viewer)
    return {
        **_common(row, reason, runtime),
        "spec": spec,
        "command": spec.get("command", []),  # none in a corrupt row's (store.CORRUPT)
        "history": None,
        "cores": None,
        "after": None,
        "deleted": False,
    }


# A list row's spec leaves out what may be large (up to the submit's limits): `get` has it.
UNLISTED = ("command", "env", "workdir")


def job_summary(row: JobRow, reason: str, runtime: Runtime) -> dict[str, Any]:
    """A list row, as JobSummary defines it, in plain data: a page of them is written without
    building and checking a model per job (tests check pages against JobPage)."""
    spec = row.spec.copy()  # a copy and three pops: a fifth of filtering every key
    for key in UNLISTED:
        spec.pop(key, None)
    return {**_common(row, reason, runtime), "spec": spec}


def _row(runtime: Runtime, name: str) -> JobRow:
    row = runtime.store.job(name)
    if row is None:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"no job named {name!r}")
    return row


def _owned(who: Principal, row: JobRow, doing: str) -> None:
    if not who.may_touch(row.queue):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"job {row.name!r} belongs to team {row.queue!r}; user {who.user!r} "
            f"(team {who.team!r}) may not {doing} it",
        )


def _refused(loc: list[str], message: str) -> HTTPException:
    detail = [{"loc": loc, "msg": message, "type": "value_error"}]
    return HTTPException(status.HTTP_422_UNPROCESSABLE_CONTENT, detail)


REPLAYED = "Idempotent-Replayed"


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobOut)
async def submit(
    body: JobSubmit,
    server: Server,
    who: Caller,
    idempotency_key: Annotated[
        str | None,
        Header(
            min_length=1,
            max_length=MAX_IDEMPOTENCY_KEY,
            description="Chosen by the client once per job, and sent again with each retry: "
            "a retry gets the job its first try made (201, `Idempotent-Replayed: true`) "
            "instead of making a second one.",
        ),
    ] = None,
) -> Response:
    """Submit a job. It is refused (422) if it could never run on this cluster, and with 503
    (nothing stored) while the server cannot store changes."""
    return await submitted(server, who, body, idempotency_key)


async def submitted(
    server: ServerState, who: Principal, body: JobSubmit, key: str | None
) -> Response:
    """The answer to a submit (also given by the hot routes)."""
    # In a worker thread: a write may wait for the database, and the event loop must not
    # (health, metrics and reads answer meanwhile).
    job, replayed = await writing(server, _submit, server, who, body, key)
    headers = {REPLAYED: "true"} if replayed else None
    return _json(job, status.HTTP_201_CREATED, headers)


def _json(
    content: dict[str, Any], code: int = status.HTTP_200_OK, headers: dict[str, str] | None = None
) -> Response:
    """Plain data as JSON by orjson: a page or a submit's answer is not built and checked as
    a model (tests check them against the route's response model)."""
    return Response(orjson.dumps(content), code, headers, media_type="application/json")


def _submit(
    server: ServerState, who: Principal, body: JobSubmit, key: str | None
) -> tuple[dict[str, Any], bool]:
    queue = body.queue or who.team
    if not who.may_touch(queue):
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"user {who.user!r} (team {who.team!r}) may not submit to queue {queue!r}",
        )
    # Fields left at their defaults are stored only where the table says always: every
    # job's row and answer stays as small.
    spec = compact(body.model_dump(exclude={"name", "queue"}))
    if body.workdir is not None and not os.path.isdir(body.workdir):
        # Refused now rather than failing at every start: the workers run on this machine.
        raise _refused(
            ["body", "workdir"], f"workdir {body.workdir!r} is not a directory on the server"
        )
    try:
        row, replayed, reason = server.runtime.submit(who.user, queue, spec, body.name, key)
    except SubmitRefused as err:
        raise _refused(["body", *err.field.split(".")], str(err)) from None
    except QueueFull as err:
        raise HTTPException(status.HTTP_429_TOO_MANY_REQUESTS, str(err)) from None
    except (DuplicateJob, Conflict) as err:
        raise HTTPException(status.HTTP_409_CONFLICT, _taken(server, body.name, err)) from None
    return job_fields(row, who, reason, server.runtime), replayed


def _taken(server: ServerState, name: str | None, err: Exception) -> str:
    """A 409's message; for a taken name, when it will be free."""
    held = None if name is None else server.runtime.store.job(name)
    if held is None or held.name not in str(err):
        return str(err)
    if held.state in LIVE and held.delete_when_ended:
        return f"{err} ({held.state}); its name is free once it has stopped: it is being deleted"
    if held.state in LIVE:
        return f"{err} ({held.state}); its name is free once it has ended and been deleted"
    return f"{err} ({held.state}); delete it to free its name"


@router.get("", response_model=JobPage)
def list_jobs(server: Server, _who: Caller, query: Annotated[ListQuery, Query()]) -> Response:
    """One page of jobs in submission order (or newest first): live ones only unless `all`
    or `state` says otherwise. `metadata.continue` is set while more remain: pass it back
    (with the same filters) for the next page. A `limit` over the largest page gets that page,
    as Kubernetes gives fewer than asked."""
    return page(server, query)


def page(server: ServerState, query: ListQuery) -> Response:
    """A list's answer (also given by the hot routes); reads the database, so not on the
    event loop."""
    for i, value in enumerate(query.state or []):
        if value not in STATES:
            raise _refused(["query", "state", str(i)], f"{value!r} is not one of {STATES}")
    states = query.state or (None if query.all else list(LIVE))
    scope = _scope(states, query.queue, query.owner, query.newest_first)
    after = None if query.continue_ is None else _after(query.continue_, scope)
    limit = min(query.limit, MAX_PAGE)
    rows = server.runtime.store.jobs(
        states=states,
        queue=query.queue,
        owner=query.owner,
        limit=limit + 1,
        newest_first=query.newest_first,
        after_seq=after,
    )
    more = len(rows) > limit
    rows = rows[:limit]
    reasons = server.runtime.reasons(rows)
    token = _token(rows[-1].seq, scope) if more else None
    return _json(
        {
            "jobs": [job_summary(row, reasons[row.name], server.runtime) for row in rows],
            "metadata": {"continue": token},
        }
    )


def _scope(states: list[str] | None, queue: str | None, owner: str | None, newest: bool) -> str:
    """The filters and order a continue token belongs to: another list's would skip jobs."""
    said = json.dumps([sorted(states) if states is not None else None, queue, owner, newest])
    return hashlib.sha256(said.encode()).hexdigest()[:16]


def _token(seq: int, scope: str) -> str:
    said = json.dumps({"after": seq, "scope": scope}, separators=(",", ":"))
    return base64.urlsafe_b64encode(said.encode()).decode().rstrip("=")


def _after(token: str, scope: str) -> int:
    """The seq a continue token goes on after; 422 for a token that is not one of this list."""
    try:
        said = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        after, made_for = said["after"], said["scope"]
        # A seq is a 64-bit integer in every database: a larger one is no token of ours.
        if type(after) is not int or not 0 <= after < 2**63:
            raise ValueError
    except (ValueError, TypeError, KeyError, binascii.Error):
        raise _refused(
            ["query", "continue"], "not a continue token of this server (start the list again)"
        ) from None
    if made_for != scope:
        raise _refused(
            ["query", "continue"],
            "the continue token is of a list with other filters (state, queue, owner, all) "
            "or order (newest_first)",
        )
    return after


@router.get("/{name}", response_model=JobOut)
def get_job(name: str, server: Server, who: Caller) -> JobOut:
    row = _row(server.runtime, name)
    if row.state == CORRUPT:
        raise HTTPException(status.HTTP_409_CONFLICT, f"job {name!r}: {row.reason}")
    return job_out(server.runtime, row, who, history=True)


@router.delete("/{name}", response_model=JobOut, status_code=status.HTTP_202_ACCEPTED)
async def cancel(
    name: str,
    server: Server,
    who: Caller,
    when_ended: Annotated[
        Literal["keep", "delete"],
        Query(
            description="What becomes of a live job once cancelled: `keep` it (a second "
            "DELETE removes it), or `delete` it as soon as it has ended, its name free then."
        ),
    ] = "keep",
) -> JobOut:
    """Delete a job. A live one is cancelled: a waiting one ends now, a running one is stopped
    (signal, grace, kill); with `when_ended=delete` it is also removed once it has ended
    (`deleted: true` in the answer if that is already so). An ended one is removed with its
    history (`deleted: true`): its name is free for a new job."""
    return await writing(server, _cancel, server, name, who, when_ended == "delete")


def _cancel(server: ServerState, name: str, who: Principal, delete: bool = False) -> JobOut:
    row = _row(server.runtime, name)
    _owned(who, row, "cancel")
    try:
        if row.state in LIVE and delete:
            after, removed = server.runtime.delete_live(name)
            return job_out(server.runtime, after, who).model_copy(update={"deleted": removed})
        if row.state in LIVE:
            return job_out(server.runtime, server.runtime.cancel(name), who)
        gone = server.runtime.remove(name)
    except NotFound as err:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(err)) from None
    except Conflict as err:
        raise HTTPException(status.HTTP_409_CONFLICT, str(err)) from None
    return job_out(server.runtime, gone, who).model_copy(update={"deleted": True})


@router.get("/{name}/explain", response_model=Explanation)
def explain(name: str, server: Server, _who: Caller) -> Explanation:
    """Why the job waits, or why it runs where it runs."""
    try:
        row, text = server.runtime.explain(name)
    except NotFound as err:
        raise HTTPException(status.HTTP_404_NOT_FOUND, str(err)) from None
    return Explanation(name=row.name, state=row.state, text=text)


@router.get("/{name}/activity", response_model=ActivityHistory)
def job_activity(name: str, server: Server, _who: Caller) -> ActivityHistory:
    """How busy the job's GPUs have been, sample by sample, while it runs (the last 10
    minutes at the default period); no samples for a job that does not run."""
    row = _row(server.runtime, name)
    monitor = server.runtime.activity
    if monitor is None:
        return ActivityHistory(name=row.name, source=None, samples=[])
    return ActivityHistory(name=row.name, source=monitor.source, samples=monitor.history(name))


@router.get("/{name}/logs")
def logs(
    name: str,
    server: Server,
    who: Caller,
    worker: Annotated[int, Query(ge=0)] = 0,
    follow: bool = False,
    tail: Annotated[
        int | None, Query(ge=0, description="Only the last `tail` lines (and, with `follow`, on).")
    ] = None,
) -> StreamingResponse:
    """One worker's stdout and stderr, of the job's latest attempt; `follow` streams until the
    attempt's workers have ended; `tail` starts at the last `tail` lines."""
    runtime = server.runtime
    row = _row(runtime, name)
    _owned(who, row, "read the logs of")
    if row.attempt < 0:
        raise HTTPException(status.HTTP_404_NOT_FOUND, f"job {name!r} has not started yet")
    # Parameter servers' logs come after the workers' (an MPI job has its launcher's alone)
    count = len(local_processes(row.spec, len(row.placement or [])))
    if worker >= count:
        raise _refused(["query", "worker"], f"job {name!r} has {count} log(s): 0 to {count - 1}")
    path = runtime.executor.log_path(name, row.attempt, worker)
    start = 0 if tail is None else _tail_offset(path, tail)
    return StreamingResponse(
        _stream(runtime, name, row.attempt, path, follow, start), media_type="text/plain"
    )


TAIL_BLOCK = 1 << 16


def _tail_offset(path: Path, lines: int) -> int:
    """Where the last `lines` lines of the file begin (a last line without its newline counts
    as one), read backwards a block at a time: a long log is not read whole."""
    try:
        with path.open("rb") as src:
            end = src.seek(0, os.SEEK_END)
            if lines == 0:
                return end
            pos, seen = end, 0
            while pos > 0:
                size = min(TAIL_BLOCK, pos)
                pos -= size
                src.seek(pos)
                block = src.read(size)
                # The file's last byte ends the last line, not one before it.
                stop = len(block) - 1 if pos + size == end else len(block)
                at = stop
                while (at := block.rfind(b"\n", 0, at)) >= 0:
                    seen += 1
                    if seen == lines:
                        return pos + at + 1
            return 0
    except FileNotFoundError:
        return 0


async def _stream(
    runtime: Runtime, name: str, attempt: int, path: Path, follow: bool, offset: int = 0
) -> AsyncIterator[bytes]:
    # A coroutine, not a generator run in worker threads: one waiting for output held a thread
    # of the pool (40) until the job wrote again, even after its client left, and with the pool
    # used up every route that runs in a thread hung.
    while True:
        chunk = _read(path, offset)
        if chunk:
            offset += len(chunk)
            yield chunk
            continue
        if not follow:
            return
        if runtime.closing.is_set():
            follow = False  # the server is stopping: what is written so far, then the end
            continue
        row = await run_in_threadpool(runtime.store.job, name)
        # The attempt's workers are over once it is not running or stopping: a requeued job
        # (preempted, or restarted after a failure) may wait for hours before its next one.
        if row is None or row.state not in ("running", "stopping") or row.attempt != attempt:
            follow = False  # read on to the end: the worker may have written just before it ended
            continue
        await asyncio.sleep(0.2)


def _read(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as src:
            src.seek(offset)
            return src.read(1 << 16)
    except FileNotFoundError:
        return b""  # not written yet (or the start failed before it was)
