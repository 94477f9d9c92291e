"""The hot routes (submit and list answered before FastAPI routes them) against FastAPI's own
routes: the same request gets the same answer from both, whatever it holds."""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toposched.core import SchedulerPolicy
from toposched.discovery.files import load_topology
from toposched.executors.local import LocalExecutor
from toposched.server.app import create_app
from toposched.server.auth import create_token
from toposched.server.hot_routes import HotRoutes
from toposched.server.localnode import LocalNode
from toposched.server.metrics import Metrics
from toposched.server.routes_jobs import STATES
from toposched.server.runtime import Runtime
from toposched.store import Store, sqlite_url
from toposched.topology.cluster import Node

# Headers whose sameness matters to a client; `date` and `server` come from no app here.
COMPARED = ("content-type", "www-authenticate", "retry-after", "idempotent-replayed")


class Apps:
    """One runtime (not started: nothing runs), served with and without the hot routes, on
    one event loop that lives as long as the runtime."""

    def __init__(self, data: Path) -> None:
        self.store = Store(sqlite_url(data / "toposched.db"))
        node = LocalNode(Node("node-a", load_topology("dgx1-v100")), "emulated (dgx1-v100)")
        runtime = Runtime(self.store, LocalExecutor(data / "runs"), node, SchedulerPolicy())
        self.hot = create_app(runtime, Metrics())
        self.plain = create_app(runtime, Metrics(), hot_routes=False)
        self.token = create_token(self.store, "ann", "team-a", admin=False)
        self.admin = create_token(self.store, "root", "ops", admin=True)
        self.loop = asyncio.new_event_loop()

    def send(self, app: FastAPI, method: str, path: str, **request: Any) -> httpx.Response:
        async def sent() -> httpx.Response:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                return await http.request(method, path, **request)

        return self.loop.run_until_complete(sent())

    def jobs(self) -> int:
        return len(self.store.jobs(states=None, limit=100_000))

    def close(self) -> None:
        self.loop.close()
        self.store.close()


@pytest.fixture(scope="module")
def apps(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Apps]:
    made = Apps(tmp_path_factory.mktemp("hot"))
    auth = {"Authorization": f"Bearer {made.token}"}
    for command in ("a", "b", "c"):  # one runs on the 8 GPUs, two wait: pages of both
        body = {"queue": "team-a", "command": [command], "gpus": 8}
        assert made.send(made.hot, "POST", "/api/v1/jobs", json=body, headers=auth).is_success
    yield made
    made.close()


def same(first: httpx.Response, second: httpx.Response) -> None:
    """Asserts the two answers are one, but for what a job's making sets: its name and time
    (each app made a job of its own)."""
    assert first.status_code == second.status_code, (first.text, second.text)
    assert {h: first.headers.get(h) for h in COMPARED} == {
        h: second.headers.get(h) for h in COMPARED
    }
    if first.headers.get("content-type") != "application/json":
        assert first.content == second.content
        return
    one, other = first.json(), second.json()
    if first.status_code == 201:
        for made in (one, other):
            del made["name"], made["submitted_at"]
            # The second waits behind the first's GPUs or not: the core's words differ.
            del made["state"], made["reason"], made["placement"]
    assert one == other


def mostly(valid: list[Any], invalid: list[Any]) -> st.SearchStrategy[Any]:
    """Valid values three times as often as invalid ones: a request is taken by the hot
    routes only if all its parts are valid, and that path must be seen often."""
    return st.sampled_from(valid * 3 + invalid)


AUTH = mostly(["good"], ["none", "Bearer nobody", "Basic abc", "bearer  "])


def authorization(apps: Apps, said: str) -> dict[str, str]:
    if said == "none":
        return {}
    return {"Authorization": f"Bearer {apps.token}" if said == "good" else said}


WORDS = st.sampled_from(["", "true", "false", "yes", "1", "0", "2", "100", "1000", "-1", "x"]) | (
    st.sampled_from([*STATES, "bogus", "team-a", "ann", "default", "eyJhZnRlciI6MX0"])
)
KEYS = st.sampled_from(
    ["state", "queue", "owner", "all", "limit", "newest_first", "continue", "continue_", "z"]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(said=st.lists(st.tuples(KEYS, WORDS | st.text(max_size=4)), max_size=5), who=AUTH)
def test_a_list_gets_the_answer_fastapi_gives(
    apps: Apps, said: list[tuple[str, str]], who: str
) -> None:
    headers = authorization(apps, who)
    hot = apps.send(apps.hot, "GET", "/api/v1/jobs", params=said, headers=headers)
    plain = apps.send(apps.plain, "GET", "/api/v1/jobs", params=said, headers=headers)
    same(hot, plain)


def test_a_list_goes_on_page_by_page_alike(apps: Apps) -> None:
    auth = authorization(apps, "good")
    pages = {}
    for name, app in (("hot", apps.hot), ("plain", apps.plain)):
        query: dict[str, Any] = {"limit": 1, "all": "true"}
        names = []
        while True:
            page = apps.send(app, "GET", "/api/v1/jobs", params=query, headers=auth).json()
            names += [job["name"] for job in page["jobs"]]
            if page["metadata"]["continue"] is None:
                break
            query["continue"] = page["metadata"]["continue"]
        pages[name] = names
    assert pages["hot"] == pages["plain"]
    assert len(pages["hot"]) >= 3


FIELDS: dict[str, st.SearchStrategy[Any]] = {
    "workers": mostly([1, 2], [0, 5000, True, "2", 1.0]),
    "gpus": mostly([1, 8], [9, 64, 65]),
    "priority": mostly([0, 5], ["5", -1001]),
    "queue": mostly(["team-a", None], ["team-b", "", 5]),
    "kind": mostly(["gang", "ps"], ["nope"]),
    "restart": mostly(["never", "on-failure"], ["always"]),
    "limit_s": mostly([1.5, None], [0, -1, float("nan"), float("inf"), "10"]),
    "env": mostly([{}, {"A": "1"}], [{"A": 1}, []]),
    "selector": mostly([{}, {"zone": "a"}], [[]]),
    "cpus": mostly(["500m", 2], ["2x"]),
    "surprise": st.just(1),
}
BODIES = st.fixed_dictionaries(
    {"command": mostly([["true"], ["a", "b"]], [[], "true", [1]])}, optional=FIELDS
)
CONTENT_TYPES = mostly(
    ["application/json", "Application/JSON; charset=utf-8"],
    ["text/plain", "application/vnd.toposched+json", None],
)
KEY_CHOICES = mostly([None, "fresh"], ["", "k" * 201])


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    body=BODIES | st.sampled_from([[], "x", None, {}]),
    content_type=CONTENT_TYPES,
    key=KEY_CHOICES,
    who=AUTH,
    raw=mostly([None], [b"", b"{", b'{"command": ["true"]} x', b"\xff"]),
)
def test_a_submit_gets_the_answer_fastapi_gives(
    apps: Apps, body: Any, content_type: str | None, key: str | None, who: str, raw: bytes | None
) -> None:
    content = json.dumps(body).encode() if raw is None else raw  # NaN is written as NaN
    answers = []
    before = apps.jobs()
    for app in (apps.hot, apps.plain):
        headers = authorization(apps, who)
        if content_type is not None:
            headers["Content-Type"] = content_type
        if key is not None:  # each app its own key, or the second's submit is a retry
            headers["Idempotency-Key"] = uuid.uuid4().hex if key == "fresh" else key
        answers.append(apps.send(app, "POST", "/api/v1/jobs", content=content, headers=headers))
    same(*answers)
    made = 2 if answers[0].status_code == 201 else 0
    assert apps.jobs() == before + made  # a refused submit stores nothing


def test_the_hot_routes_answer_what_they_can_themselves(apps: Apps) -> None:
    """In front of an app without FastAPI's job routes, a valid submit and list are still
    answered; what the hot routes pass on is not (404), as it needs those routes."""
    app = FastAPI()
    server = apps.hot.state.toposched
    app.add_middleware(HotRoutes, server=server, handlers=app.exception_handlers)
    auth = authorization(apps, "good")
    taken = apps.send(app, "POST", "/api/v1/jobs", json={"command": ["true"]}, headers=auth)
    assert taken.status_code == 201, taken.text
    assert taken.json()["spec"]["command"] == ["true"]
    listed = apps.send(app, "GET", "/api/v1/jobs", params={"limit": 2}, headers=auth)
    assert listed.status_code == 200 and len(listed.json()["jobs"]) == 2
    no_token = apps.send(app, "GET", "/api/v1/jobs", params={"limit": 2})
    assert no_token.status_code == 401  # the hot routes' own check of the caller
    for passed_on in (
        apps.send(app, "GET", "/api/v1/jobs", params={"limit": 0}, headers=auth),
        apps.send(app, "POST", "/api/v1/jobs", json={"command": []}, headers=auth),
        apps.send(app, "POST", "/api/v1/jobs", content=b"{}", headers=auth),  # no JSON type
        apps.send(app, "DELETE", "/api/v1/jobs", headers=auth),
    ):
        assert passed_on.status_code == 404, passed_on.text


@pytest.mark.parametrize(
    ("raw", "field", "said"),
    [
        (b'{"command": ["true"], "limit_s": NaN}', ["limit_s"], "finite"),
        (b'{"command": ["echo", "a\\ud800"]}', ["command", 1], "lone UTF-16 surrogate"),
        (b'{"command": ["true"], "env": {"K\\udfff": "v"}}', ["env", "K\\udfff", "[key]"], ""),
    ],
)
def test_every_route_reads_a_body_with_the_one_reader(
    apps: Apps, raw: bytes, field: list[Any], said: str
) -> None:
    """Issue 33: the hot route and FastAPI's (for any JSON content type) read a body with one
    parser, and refuse what it cannot read alike, naming the value; so do the other routes
    that take a body. Before, FastAPI's routes read NaN and lone surrogates with Python's
    parser, which takes them."""
    auth = authorization(apps, "good")
    answers = []
    for app in (apps.hot, apps.plain):
        for kind in ("application/json", "application/vnd.toposched+json"):
            headers = {**auth, "Content-Type": kind}
            answers.append(apps.send(app, "POST", "/api/v1/jobs", content=raw, headers=headers))
    for answer in answers:
        assert answer.status_code == 422, answer.text
        (entry,) = answer.json()["detail"]
        assert (entry["type"], entry["loc"]) == ("json_invalid", ["body", *field]), entry
        assert said in entry["msg"]
        assert answer.json() == answers[0].json()
    admin = {"Authorization": f"Bearer {apps.admin}"}
    label = apps.send(
        apps.plain,
        "PUT",
        "/api/v1/nodes/node-a/labels",
        content=b'{"key": "zone", "value": "a\\ud800"}',
        headers={**admin, "Content-Type": "application/json"},
    )
    assert label.status_code == 422, label.text
    assert label.json()["detail"][0]["loc"] == ["body", "value"]
