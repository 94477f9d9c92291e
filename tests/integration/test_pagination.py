"""`GET /api/v1/jobs` pages (`limit`, `continue`) against a real server: bounded, slim, and
neither skipping nor repeating a job while others are submitted (issue 20 item 4)."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server import Api, ServerProcess, running_server, wait_for, worker
from toposched.client.http import Client
from toposched.server.schemas import (
    DEFAULT_PAGE,
    MAX_COMMAND_BYTES,
    MAX_ENV_BYTES,
    MAX_PAGE,
    JobOut,
    JobPage,
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("pages")) as srv:
        yield srv


@pytest.fixture(scope="module")
def api(server: ServerProcess, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    """The admin's client; one job holds all 8 GPUs for the module, so the others wait."""
    client = Api(server)
    out = tmp_path_factory.mktemp("hog")
    client.submit(name="hog", gpus=8, **worker(out, wait="never"))
    wait_for(lambda: client.state("hog") == "running", "the hog to run")
    yield client
    client.http.delete("/api/v1/jobs/hog")
    client.http.close()


def page(api: Api, **params: Any) -> dict[str, Any]:
    reply = api.http.get("/api/v1/jobs", params=params)
    assert reply.status_code == 200, reply.text
    found: dict[str, Any] = reply.json()
    return found


def submit(api: Api, queue: str, count: int, **fields: Any) -> list[str]:
    made = []
    for _ in range(count):
        made.append(api.submit(queue=queue, **{"command": ["true"], **fields})["name"])
    return made


def walk(api: Api, on_page: Any = None, **params: Any) -> list[str]:
    """Every job name the list gives, page by page; `on_page()` runs between pages."""
    seen: list[str] = []
    token = None
    while True:
        got = page(api, **params, **({"continue": token} if token else {}))
        seen += [job["name"] for job in got["jobs"]]
        token = got["metadata"]["continue"]
        if token is None:
            return seen
        if on_page is not None:
            on_page()


def test_the_default_page_is_bounded_and_says_how_to_go_on(api: Api) -> None:
    made = submit(api, "big", DEFAULT_PAGE + 5)
    first = page(api, queue="big")
    assert [job["name"] for job in first["jobs"]] == made[:DEFAULT_PAGE]
    token = first["metadata"]["continue"]
    assert isinstance(token, str) and token
    rest = page(api, queue="big", **{"continue": token})
    assert [job["name"] for job in rest["jobs"]] == made[DEFAULT_PAGE:]
    assert rest["metadata"] == {"continue": None}
    whole = page(api, queue="big", limit=MAX_PAGE)
    assert len(whole["jobs"]) == len(made) and whole["metadata"]["continue"] is None


@pytest.mark.parametrize("limit", [0, -1, "x", "1e3"])
def test_a_bad_limit_is_refused(api: Api, limit: Any) -> None:
    reply = api.http.get("/api/v1/jobs", params={"limit": limit})
    assert reply.status_code == 422
    assert [entry["loc"] for entry in reply.json()["detail"]] == [["query", "limit"]]


def test_a_limit_over_the_largest_page_gets_the_largest_page(api: Api) -> None:
    # As Kubernetes does: fewer than asked, and `continue` says more remain.
    made = submit(api, "many", MAX_PAGE + 2)
    got = page(api, queue="many", limit=10**9)
    assert [job["name"] for job in got["jobs"]] == made[:MAX_PAGE]
    rest = page(api, queue="many", limit=10**9, **{"continue": got["metadata"]["continue"]})
    assert [job["name"] for job in rest["jobs"]] == made[MAX_PAGE:]


def test_newest_first_pages_go_back_in_time(api: Api) -> None:
    made = submit(api, "recent", 7)
    first = page(api, queue="recent", limit=3, newest_first="true")
    assert [job["name"] for job in first["jobs"]] == made[:-4:-1]
    later = submit(api, "recent", 2)  # newer than every page: seen by a new list only
    seen = walk(api, queue="recent", limit=3, newest_first="true")
    assert seen == (made + later)[::-1]
    token = first["metadata"]["continue"]
    rest = page(api, queue="recent", limit=10, newest_first="true", **{"continue": token})
    assert [job["name"] for job in rest["jobs"]] == made[-4::-1]
    oldest = api.http.get("/api/v1/jobs", params={"queue": "recent", "continue": token})
    assert oldest.status_code == 422 and "newest_first" in oldest.text


def test_pages_neither_skip_nor_repeat_while_jobs_are_submitted(api: Api) -> None:
    rng = random.Random(4)
    made = submit(api, "busy", 30)

    def meanwhile() -> None:
        queue = rng.choice(["busy", "elsewhere"])
        more = submit(api, queue, rng.randint(0, 3))
        made.extend(more if queue == "busy" else [])

    seen = walk(api, meanwhile, queue="busy", limit=7)
    assert len(made) > 30  # some came while the pages were read
    assert seen == made  # every one, once, in submission order


def test_ended_jobs_are_paged_with_all(api: Api) -> None:
    made = submit(api, "ending", 5)
    for name in made[:3]:
        assert api.http.delete(f"/api/v1/jobs/{name}").status_code == 202
    assert walk(api, queue="ending", limit=2) == made[3:]
    assert walk(api, queue="ending", limit=2, all="true") == made
    assert walk(api, queue="ending", limit=2, state="cancelled") == made[:3]


@pytest.mark.parametrize(
    "token", ["garbage", "e30", "eyJhZnRlciI6IC0xLCAic2NvcGUiOiAieCJ9", "a" * 201]
)
def test_a_token_that_is_not_one_is_refused(api: Api, token: str) -> None:
    reply = api.http.get("/api/v1/jobs", params={"continue": token})
    assert reply.status_code == 422, reply.text
    assert [entry["loc"] for entry in reply.json()["detail"]] == [["query", "continue"]]


def test_a_token_of_another_list_is_refused(api: Api) -> None:
    submit(api, "mine", 3)
    token = page(api, queue="mine", limit=1)["metadata"]["continue"]
    for other in ({"queue": "theirs"}, {"queue": "mine", "all": "true"}, {"state": "running"}):
        reply = api.http.get("/api/v1/jobs", params={**other, "continue": token})
        assert reply.status_code == 422, other
        assert "other filters" in reply.text


def test_list_rows_are_slim_and_get_is_whole(api: Api, tmp_path: Path) -> None:
    # The largest job the server takes, listed a page at a time, stays a small answer.
    command = ["echo", "c" * (MAX_COMMAND_BYTES - 10)]
    env = {"BIG": "e" * (MAX_ENV_BYTES - 10)}
    made = submit(api, "heavy", 20, command=command, env=env, workdir=str(tmp_path))
    listed = page(api, queue="heavy")
    assert len(json.dumps(listed)) < 40_000
    row = listed["jobs"][0]
    assert "command" not in row and "history" not in row
    assert not {"command", "env", "workdir"} & set(row["spec"])
    assert (row["workers"], row["gpus_per_worker"], row["state"]) == (1, 1, "pending")
    whole = api.job(made[0])
    assert whole["command"] == command and whole["spec"]["env"] == env
    assert whole["spec"]["workdir"] == str(tmp_path) and whole["history"]


def test_the_client_walks_every_page(api: Api, server: ServerProcess) -> None:
    made = submit(api, "walked", 12)
    with Client(server.url, server.token) as client:
        names = [job["name"] for job in client.all_jobs(queue="walked", page_size=5)]
        assert names == made
        first = client.job_page(queue="walked", limit=5)
        assert [job["name"] for job in first.jobs] == made[:5] and first.continue_
        rest = client.all_jobs(queue="walked", page_size=3, continue_=first.continue_)
        assert [job["name"] for job in rest] == made[5:]
        assert len(client.jobs(queue="walked", limit=4)) == 4


def test_pages_and_submit_answers_are_what_the_schemas_say(api: Api) -> None:
    """The list and the submit write their answers as plain data, without the models: what
    they write must be exactly what JobPage and JobOut describe (nothing left out or added,
    and a value of every field's type)."""
    made = api.http.post("/api/v1/jobs", json={"command": ["true"], "env": {"K": "v"}})
    assert made.status_code == 201, made.text
    body = made.json()
    assert JobOut.model_validate(body).model_dump(mode="json", by_alias=True) == body
    assert body["state"] == "pending" and body["history"] is None and body["deleted"] is False
    got = page(api, limit=3, all="true")
    assert JobPage.model_validate(got).model_dump(mode="json", by_alias=True) == got
    running = page(api, state="running")
    assert running["jobs"][0]["placement"][0]["gpus"] == list(range(8))  # the hog's
    assert JobPage.model_validate(running).model_dump(mode="json", by_alias=True) == running


@pytest.mark.parametrize("after", [2**63, 2**64 + 5, 10**30])
def test_a_forged_token_past_any_seq_is_refused(api: Api, after: int) -> None:
    # A real token of this list, its `after` made larger than any database's integer: it
    # reached SQLite and answered 500 (OverflowError), issue 33 finding 5.
    submit(api, "forged", 3)
    first = page(api, queue="forged", limit=1)
    said = json.loads(base64.urlsafe_b64decode(first["metadata"]["continue"] + "=="))
    said["after"] = after
    forged = base64.urlsafe_b64encode(json.dumps(said).encode()).decode().rstrip("=")
    reply = api.http.get("/api/v1/jobs", params={"queue": "forged", "limit": 1, "continue": forged})
    assert reply.status_code == 422, reply.text
    assert [entry["loc"] for entry in reply.json()["detail"]] == [["query", "continue"]]
