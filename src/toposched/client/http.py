"""A small client of the toposched REST API (/api/v1): one method per route.

Every failure is an `ApiError` with a message a person can act on: a 422 lists each bad field
on its own line (`body.gpus: ...`), a server that does not answer says how to start one.

A 503 (the server cannot store changes now; nothing was stored) is retried with backoff, a few
times; so is a lost answer to a request that is safe to repeat (a read, or a submit, which
carries an idempotency key chosen before its first try: a retry finds the job the first made).
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict, Unpack
from urllib.parse import quote, urlsplit

from toposched.client.wire import (
    CannotConnect,
    Failure,
    InvalidTarget,
    NoAnswerInTime,
    Reply,
    Wire,
)
from toposched.client.wires import connect

# Re-exported: the CLI and callers of the client import them from here.
from toposched.common.apierror import UNREACHABLE as UNREACHABLE
from toposched.common.apierror import ApiError as ApiError
from toposched.common.paths import ADMIN_TOKEN_FILE, default_data_dir, loopback
from toposched.common.retry import Retry as Retry
from toposched.common.retry import retry_after

if TYPE_CHECKING:
    import httpx

DEFAULT_URL = "http://127.0.0.1:8080"
URL_ENV = "TOPOSCHED_URL"
TOKEN_ENV = "TOPOSCHED_TOKEN"
API = "/api/v1"

TIMEOUT_S = 30.0
IDEMPOTENCY_KEY = "Idempotency-Key"


# Five tries, 0.5 to 8 s apart: a server restarting or out of disk for a few seconds is ridden
# out, one that stays down is reported within about 15 s.
DEFAULT_RETRY = Retry(tries=5, first_s=0.5, max_s=8.0)
NO_RETRY = Retry(tries=1)


class ConfigError(ValueError):
    """The client cannot be set up as asked (a malformed server URL); nothing was sent."""


class BadToken(ConfigError):
    """The token cannot be sent (it is no HTTP header value); nothing was sent."""


def check_token(token: str, source: str) -> None:
    """Raise BadToken unless `token` is one line of printable ASCII, as tokens are: a newline
    would break the request's header, and looked like a lost connection."""
    bad = next((char for char in token if not "!" <= char <= "~"), None)
    if bad is not None:
        what = {"\n": "a newline", "\r": "a carriage return", " ": "a space"}.get(bad, repr(bad))
        raise BadToken(
            f"the token from {source or 'the caller'} is not valid: it contains {what}; "
            "a token is one word of printable characters (see `toposched token create`)"
        )


class JobFilters(TypedDict, total=False):
    """Which jobs a list shows: live ones unless `all` (ended too) or `states`."""

    states: list[str] | None
    queue: str | None
    owner: str | None
    all: bool


@dataclass(frozen=True)
class JobPage:
    """One page of `GET /jobs`: `continue_` is set while more remain (pass it back)."""

    jobs: list[dict[str, Any]]
    continue_: str | None


def server_url(flag: str | None = None) -> str:
    """The server to talk to: `--server`, else $TOPOSCHED_URL, else the default."""
    url = (flag or os.environ.get(URL_ENV) or DEFAULT_URL).strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        source = "--server" if flag else URL_ENV if os.environ.get(URL_ENV) else "default"
        raise ConfigError(
            f"server URL {url!r} (from {source}) is not valid: expected http://HOST:PORT"
        )
    return url


def is_local(url: str) -> bool:
    """Whether `url` names this machine: a loopback address, or this host's own name."""
    host = (urlsplit(url).hostname or "").lower()
    if loopback(host):
        return True
    me = socket.gethostname().lower()
    return host == me or host == me.split(".")[0]


@dataclass(frozen=True)
class Token:
    value: str | None
    source: str  # where it came from, for error messages


def find_token(url: str) -> Token:
    """$TOPOSCHED_TOKEN, else the admin token file of the local data directory when readable
    (a CLI on the server's machine, run by its user). The file's token goes to this machine's
    servers only, never to another host."""
    env = os.environ.get(TOKEN_ENV, "").strip()
    if env:
        return Token(env, TOKEN_ENV)
    path = default_data_dir() / ADMIN_TOKEN_FILE
    if not is_local(url):
        return Token(None, f"{TOKEN_ENV} is unset ({path} is used for this machine's server only)")
    try:
        value = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as err:
        why = err.strerror if isinstance(err, OSError) and err.strerror else "not readable"
        return Token(None, f"{TOKEN_ENV} is unset and {path} cannot be read ({why.lower()})")
    if not value:
        return Token(None, f"{TOKEN_ENV} is unset and {path} is empty")
    return Token(value, str(path))


def _segment(value: str) -> str:
    """One URL path segment: slashes and dot segments cannot change the route."""
    if value in (".", ".."):
        return "%2E" * len(value)
    return quote(value, safe="")


def _field_lines(detail: list[Any]) -> list[tuple[str, str]]:
    out = []
    for item in detail:
        if not isinstance(item, dict):
            out.append(("", str(item)))
            continue
        loc = ".".join(str(part) for part in item.get("loc") or [])
        msg = str(item.get("msg", item))
        msg = msg.removeprefix("Value error, ")
        out.append((loc, msg))
    return out


def _text(resp: Reply, limit: int = 300) -> str:
    text = resp.text.strip()
    return text if len(text) <= limit else text[:limit] + "..."


class Client:
    """Talks to one server with one token (None: requests go without one)."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        token_source: str = "",
        timeout: float = TIMEOUT_S,
        transport: httpx.BaseTransport | None = None,
        wire: Wire | None = None,
        retry: Retry = DEFAULT_RETRY,
        on_retry: Callable[[str], None] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        self.token_source = token_source
        self.timeout = timeout
        self.retry = retry
        self.on_retry = on_retry  # told, in a line, of each retry and why
        self.sleep = sleep
        if token:
            check_token(token, token_source)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        # The standard library's http.client where it serves (plain HTTP, no proxy, no
        # transport given), else httpx: see toposched.client.wire.
        # A wire given carries its own credentials: the Kubernetes CLI's reaches the scheduler's
        # read API through the API server's service proxy, with the kubeconfig's.
        self._wire: Wire = wire or connect(self.url + API, headers, timeout, transport)

    @classmethod
    def from_env(
        cls, server: str | None = None, on_retry: Callable[[str], None] | None = None
    ) -> Client:
        """The server from `server` or $TOPOSCHED_URL; the token as `find_token` finds it."""
        url = server_url(server)
        token = find_token(url)
        return cls(url, token.value, token_source=token.source, on_retry=on_retry)

    def close(self) -> None:
        self._wire.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ plumbing

    def _unreachable(self, err: Failure) -> ApiError:
        if isinstance(err, InvalidTarget):
            raise ConfigError(f"server URL {self.url!r} is not valid: {err}") from None
        if isinstance(err, CannotConnect):
            return ApiError(
                UNREACHABLE,
                f"the server at {self.url} is not reachable ({err}); start one with "
                f"`toposched serve`, or point --server / ${URL_ENV} at a running one",
            )
        if isinstance(err, NoAnswerInTime):
            return ApiError(
                UNREACHABLE, f"the server at {self.url} did not answer within {self.timeout:g} s"
            )
        return ApiError(UNREACHABLE, f"lost the connection to the server at {self.url}: {err}")

    def _error(self, resp: Reply) -> ApiError:
        try:
            body = resp.json()
        except ValueError:
            body = None
        detail = body.get("detail") if isinstance(body, dict) else None
        fields: list[tuple[str, str]] = []
        reason = ""
        if isinstance(body, dict) and body.get("kind") == "Status":
            # Kubernetes' own answer, from the API server in front of the read API (its proxy:
            # no such service, no endpoint, not allowed).
            reason = str(body.get("reason") or resp.reason)
            message = str(body.get("message") or "") or _text(resp)
        elif isinstance(detail, list):
            fields = _field_lines(detail)
            message = "\n".join(f"{loc}: {msg}" if loc else msg for loc, msg in fields)
        elif isinstance(detail, str):
            message = detail
        else:
            message = f"HTTP {resp.status} from {self.url}: {_text(resp) or resp.reason}"
        if resp.status == 401 and not reason:  # a token of ours, not the kubeconfig's
            if self.token is None:
                message += f"; no token was sent: {self.token_source or TOKEN_ENV + ' is unset'}"
            elif self.token_source:
                message += f" (the token from {self.token_source})"
        return ApiError(
            resp.status,
            message or f"HTTP {resp.status}",
            reason=reason,
            retry_after=retry_after(resp.headers.get("retry-after")),
            details=body,
            fields=fields,
        )

    def _send(self, method: str, path: str, **request: Any) -> Reply:
        """One request (`request`: json, params, headers), retried while the server answers
        503 (it stored nothing) and, for a read or a request with an idempotency key, when the
        answer is lost; the last failure is raised."""
        repeatable = method == "GET" or IDEMPOTENCY_KEY in (request.get("headers") or {})
        attempt = 0
        while True:
            attempt += 1
            last = not self.retry.more(attempt)
            try:
                resp = self._wire.send(method, path, **request)
            except Failure as err:
                # Refused or misaddressed: nothing was sent, and trying again changes nothing.
                sent = not isinstance(err, InvalidTarget) and (
                    not isinstance(err, CannotConnect) or err.timed_out
                )
                if last or not (repeatable and sent):
                    raise self._unreachable(err) from None
                self._pause(attempt, None, f"lost the answer ({err})")
                continue
            if resp.status != 503 or last:
                return resp
            refused = self._error(resp)
            self._pause(attempt, refused.retry_after, refused.message)

    def _pause(self, attempt: int, asked: float | None, why: str) -> None:
        wait = self.retry.wait(attempt, asked)
        if self.on_retry is not None:
            of = f" of {self.retry.tries}" if self.retry.tries is not None else ""
            self.on_retry(f"{why}; retrying in {wait:g} s (try {attempt + 1}{of})")
        self.sleep(wait)

    def _request(self, method: str, path: str, **request: Any) -> Any:
        """The JSON answer of `_send`, or its error."""
        resp = self._send(method, path, **request)
        if resp.status >= 400:
            raise self._error(resp)
        try:
            return resp.json()
        except ValueError:
            raise ApiError(
                resp.status,
                f"unexpected answer from {self.url}{API}{path} (not JSON): {_text(resp)!r}; "
                "is it a toposched server?",
            ) from None

    # ------------------------------------------------------------------ routes

    def whoami(self) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", "/whoami")
        return result

    def submit(self, spec: dict[str, Any], key: str | None = None) -> dict[str, Any]:
        """POST /jobs with a JobSubmit body; returns the JobOut. `key` (made up here if not
        given) is sent with every try, so that a retry never makes a second job."""
        headers = {IDEMPOTENCY_KEY: key or uuid.uuid4().hex}
        result: dict[str, Any] = self._request("POST", "/jobs", json=spec, headers=headers)
        return result

    def jobs(
        self, *, limit: int | None = None, **filters: Unpack[JobFilters]
    ) -> list[dict[str, Any]]:
        """The first page of jobs (`limit` per page, else the server's default)."""
        return self.job_page(limit=limit, **filters).jobs

    def job_page(
        self,
        *,
        limit: int | None = None,
        continue_: str | None = None,
        **filters: Unpack[JobFilters],
    ) -> JobPage:
        """One page of GET /jobs: the first, or the one after the page that gave `continue_`
        (with the same filters)."""
        params: dict[str, Any] = {}
        if filters.get("states"):
            params["state"] = filters["states"]
        for key in ("queue", "owner"):
            if filters.get(key):
                params[key] = filters[key]
        if filters.get("all"):
            params["all"] = "true"
        if limit is not None:
            params["limit"] = limit
        if continue_ is not None:
            params["continue"] = continue_
        answer = self._request("GET", "/jobs", params=params)
        token = (answer.get("metadata") or {}).get("continue")
        return JobPage(answer["jobs"], token)

    def all_jobs(
        self,
        *,
        page_size: int | None = None,
        continue_: str | None = None,
        **filters: Unpack[JobFilters],
    ) -> Iterator[dict[str, Any]]:
        """Every job the filters match (after the page that gave `continue_`, if given), page
        by page, in submission order: each job once, even while others are submitted (they
        come last)."""
        token = continue_
        while True:
            page = self.job_page(limit=page_size, continue_=token, **filters)
            yield from page.jobs
            if page.continue_ is None:
                return
            token = page.continue_

    def job(self, name: str) -> dict[str, Any]:
        """The JobOut with its history."""
        result: dict[str, Any] = self._request("GET", f"/jobs/{_segment(name)}")
        return result

    def cancel(self, name: str, *, delete_when_ended: bool = False) -> dict[str, Any]:
        """DELETE: cancel a live job (and, with `delete_when_ended`, remove it once it has
        ended), or remove an ended one."""
        params = {"when_ended": "delete"} if delete_when_ended else None
        result: dict[str, Any] = self._request("DELETE", f"/jobs/{_segment(name)}", params=params)
        return result

    def explain(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self._request("GET", f"/jobs/{_segment(name)}/explain")
        return result

    def logs(
        self, name: str, worker: int = 0, follow: bool = False, tail: int | None = None
    ) -> Iterator[bytes]:
        """One worker's output as it arrives; with `follow`, until the attempt's workers end;
        with `tail`, from its last `tail` lines on. The request is made (and may fail) at the
        first `next()`."""
        params: dict[str, Any] = {"worker": worker, "follow": "true" if follow else "false"}
        if tail is not None:
            params["tail"] = tail
        path = f"/jobs/{_segment(name)}/logs"
        try:
            # Following waits as long as the job runs: no read timeout then.
            read_timeout = None if follow else self.timeout
            with self._wire.stream("GET", path, params=params, read_timeout=read_timeout) as resp:
                if resp.status >= 400:
                    raise self._error(resp.read())
                yield from resp.chunks()
        except Failure as err:
            raise self._unreachable(err) from None

    def nodes(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request("GET", "/nodes")["nodes"]
        return result

    def label(self, node: str, key: str, value: str | None) -> list[dict[str, Any]]:
        """Set (or, with None, remove) a node label; returns the nodes."""
        body = {"key": key, "value": value}
        path = f"/nodes/{_segment(node)}/labels"
        result: list[dict[str, Any]] = self._request("PUT", path, json=body)["nodes"]
        return result

    def queues(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self._request("GET", "/queues")["queues"]
        return result

    def set_queue(
        self,
        name: str,
        guaranteed_gpus: int | None = None,
        *,
        idle: dict[str, Any] | None = None,
        no_idle: bool = False,
    ) -> list[dict[str, Any]]:
        """Set what is given: the queue's guaranteed GPUs, its idle rule for the jobs that set
        none (`{"after": "30m", "below": 5, "action": "stop"}`), or remove the rule."""
        body: dict[str, Any] = {}
        if guaranteed_gpus is not None:
            body["guaranteed_gpus"] = guaranteed_gpus
        if idle is not None or no_idle:
            body["idle"] = None if no_idle else idle
        path = f"/queues/{_segment(name)}"
        result: list[dict[str, Any]] = self._request("PUT", path, json=body)["queues"]
        return result

    def create_token(self, user: str, team: str, admin: bool = False) -> dict[str, Any]:
        body = {"user": user, "team": team, "admin": admin}
        result: dict[str, Any] = self._request("POST", "/tokens", json=body)
        return result
