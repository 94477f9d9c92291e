"""Fuzzing that stays (issue 33): random and hostile requests against a real server, random
job files and traces against their readers, at a bounded size. Any 500, any error other than
the reader's own, or a stored job that cannot be read back fails it.

The requests mix well-formed values (so that the checks behind the first ones are reached)
with anything JSON can say: lone surrogates, NaN and infinities, integers past 2^64, deep
nesting, wrong types, unknown fields. Each submit the server takes must then be readable by
get and by the list, as a user of any team reads it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tests.server import ServerProcess, running_server
from toposched.client.jobfile import JobFileError, parse_job_text
from toposched.sim.traces.job import TraceError
from toposched.sim.traces.reader import read_trace
from toposched.topology.cluster import ClusterError
from toposched.topology.clusterfile import parse_cluster_yaml
from toposched.topology.errors import TopologyError
from toposched.topology.yamlfile import parse_yaml

FUZZ = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
SAID = (201, 202, 409, 413, 422)  # what a request may be answered; never a 5xx

# Text of any code point, lone surrogates among them, and text that looks like numbers.
TEXT = st.text(max_size=12) | st.sampled_from(["nan", "NaN", "inf", "-inf", "1e999", "-0", ""])
NUMBERS = (
    st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, 1, 2**63, -(2**63) - 1, 2**64])
)
ANY_JSON = st.recursive(
    st.none() | st.booleans() | NUMBERS | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=10,
)


def deep(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


NEAR_VALID = {
    "name": st.from_regex(r"\Af[a-z0-9]{1,12}\Z") | TEXT,
    "queue": st.sampled_from(["default", "fuzz", "nope"]) | TEXT,
    "priority": st.integers(-1001, 1001) | NUMBERS,
    "workers": st.integers(0, 9) | NUMBERS,
    "gpus": st.integers(0, 9) | NUMBERS,
    "kind": st.sampled_from(["pytorch", "tfjob", "mpi", "x"]) | TEXT,
    "ps": st.integers(0, 3),
    "locality": st.sampled_from(["node", "rack", "node,rack@60", "node,rack@nan", "any,node@1"])
    | TEXT,
    "selector": st.dictionaries(TEXT, TEXT, max_size=2),
    "cpus": st.sampled_from(["500m", "2", 1.5, "1e999", "nan", -1]) | TEXT,
    "memory": st.sampled_from(["1Gi", "16G", "16GB", 1024, "nan"]) | TEXT,
    "gpu_memory": st.sampled_from(["32Gi", "0"]) | TEXT,
    "gpu_type": st.lists(TEXT, max_size=3),
    "mixed_types": st.booleans(),
    "elastic": st.fixed_dictionaries({"min": NUMBERS, "max": NUMBERS}),
    "checkpoint": st.fixed_dictionaries({"signal": TEXT, "grace_s": NUMBERS}),
    "restart": st.sampled_from(["never", "on-failure"]) | TEXT,
    "max_restarts": st.integers(-1, 101),
    "limit_s": NUMBERS,
    # The program is always harmless: /bin/echo says its arguments, whatever they are.
    "command": st.lists(TEXT, max_size=4).map(lambda args: ["/bin/echo", *args])
    | st.sampled_from([[], [""], "echo", deep(30), deep(900)]),
    "env": st.dictionaries(TEXT, TEXT, max_size=3),
    "workdir": st.sampled_from(["/", "/tmp", "relative", "/no/such/dir", "/tmp/../etc"]) | TEXT,
    "command_visible": st.booleans(),
    "after": st.lists(
        st.sampled_from(["fuzz-a", "fuzz-a:any", "x:maybe", ":ok", "a:b:ok"]) | TEXT, max_size=3
    ),
}


@st.composite
def submissions(draw: st.DrawFn) -> dict[str, Any]:
    fields = draw(st.lists(st.sampled_from(sorted(NEAR_VALID)), unique=True, max_size=6))
    body: dict[str, Any] = {"command": ["/bin/echo", "fuzz"]}
    for name in fields:
        # Mostly values of the field's own kind (the checks behind the first ones are reached),
        # a quarter of the time anything at all.
        hostile = draw(st.integers(0, 3)) == 0
        body[name] = draw(ANY_JSON if hostile else NEAR_VALID[name])
    if draw(st.integers(0, 9)) == 0:
        body[draw(TEXT)] = draw(ANY_JSON)  # an unknown field
    return body


def raw(value: Any) -> bytes:
    """JSON as a client may send it: NaN and Infinity as tokens, lone surrogates as escapes."""
    return json.dumps(value, allow_nan=True).encode("ascii")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("fuzz")) as srv:
        yield srv


@pytest.fixture(scope="module")
def admin(server: ServerProcess) -> Iterator[httpx.Client]:
    with server.client() as client:
        yield client


@pytest.fixture(scope="module")
def outsider(server: ServerProcess, admin: httpx.Client) -> Iterator[httpx.Client]:
    made = admin.post("/api/v1/tokens", json={"user": "otto", "team": "others"})
    assert made.status_code == 201, made.text
    with server.client(made.json()["token"]) as client:
        yield client


def readable(admin: httpx.Client, outsider: httpx.Client, name: str) -> None:
    for client in (admin, outsider):
        got = client.get(f"/api/v1/jobs/{name}")
        assert got.status_code == 200, got.text
    for client in (admin, outsider):
        listed = client.get("/api/v1/jobs", params={"all": "true", "limit": 1000})
        assert listed.status_code == 200, listed.text


def submit(admin: httpx.Client, body: dict[str, Any]) -> httpx.Response:
    """POST `body` as sent: any answer but a 5xx, counted (--hypothesis-show-statistics)."""
    reply = admin.post(
        "/api/v1/jobs", content=raw(body), headers={"Content-Type": "application/json"}
    )
    assert reply.status_code in SAID, (reply.status_code, reply.text[:500], body)
    event(f"answered {reply.status_code}")
    return reply


@FUZZ
@given(body=submissions())
def test_no_submission_gets_a_5xx_and_every_stored_one_reads_back(
    admin: httpx.Client, outsider: httpx.Client, body: dict[str, Any]
) -> None:
    reply = submit(admin, body)
    if reply.status_code == 201:
        name = reply.json()["name"]
        readable(admin, outsider, name)
        admin.delete(f"/api/v1/jobs/{name}")  # ends it, so that GPUs stay free for the next


# Text wherever a job holds free text: most of these are stored, and each must read back.
FREE_TEXT = st.fixed_dictionaries(
    {"command": st.lists(TEXT, max_size=4).map(lambda args: ["/bin/echo", *args])},
    optional={
        "env": st.dictionaries(st.from_regex(r"\A[A-Z_][A-Z0-9_]{0,8}\Z"), TEXT, max_size=3),
        "selector": st.dictionaries(TEXT.filter(bool), TEXT, max_size=2),
        "gpu_type": st.lists(
            TEXT.filter(lambda t: t.strip() and "," not in t), min_size=1, max_size=2
        ),
        "name": st.from_regex(r"\Af[a-z0-9]{1,12}\Z"),
    },
)


@FUZZ
@given(body=FREE_TEXT)
def test_free_text_is_stored_and_read_back_or_refused_by_name(
    admin: httpx.Client, outsider: httpx.Client, body: dict[str, Any]
) -> None:
    reply = submit(admin, body)
    if reply.status_code == 422:
        assert all(len(entry["loc"]) >= 2 for entry in reply.json()["detail"]), reply.text
    if reply.status_code == 201:
        name = reply.json()["name"]
        got = admin.get(f"/api/v1/jobs/{name}").json()
        assert got["command"] == body["command"]
        assert got["spec"].get("env", {}) == body.get("env", {})
        readable(admin, outsider, name)
        admin.delete(f"/api/v1/jobs/{name}")


LIST_PARAMS = st.dictionaries(
    st.sampled_from(["state", "queue", "owner", "limit", "continue", "newest_first", "all"]),
    st.text(max_size=20).filter(lambda t: "\x00" not in t)
    | st.sampled_from(
        ["-1", "0", "1001", "true", "2" * 30, "eyJhZnRlciI6OTk5OTk5OTk5OTk5OTk5OTk5OTl9"]
    ),
    max_size=4,
)


@FUZZ
@given(params=LIST_PARAMS)
def test_no_list_query_gets_a_5xx(admin: httpx.Client, params: dict[str, str]) -> None:
    reply = admin.get("/api/v1/jobs", params=params)
    assert reply.status_code in (200, 422), (reply.status_code, reply.text[:500], params)


OTHER_WRITES = [
    ("PUT", "/api/v1/nodes/node-a/labels"),
    ("PUT", "/api/v1/queues/fuzz"),
    ("POST", "/api/v1/tokens"),
]


@settings(FUZZ, max_examples=40)
@given(
    target=st.sampled_from(OTHER_WRITES),
    body=ANY_JSON
    | st.fixed_dictionaries(
        {},
        optional={
            "key": TEXT,
            "value": TEXT,
            "guaranteed_gpus": NUMBERS,
            "user": TEXT,
            "team": TEXT,
            "admin": st.booleans() | ANY_JSON,
        },
    ),
)
def test_no_other_write_gets_a_5xx(admin: httpx.Client, target: tuple[str, str], body: Any) -> None:
    method, path = target
    reply = admin.request(
        method, path, content=raw(body), headers={"Content-Type": "application/json"}
    )
    assert reply.status_code < 500, (reply.status_code, reply.text[:500], body)
    assert admin.get("/api/v1/nodes").status_code == 200
    assert admin.get("/api/v1/queues").status_code == 200


# ---------------------------------------------------------------------- the file readers

YAML_WORDS = st.sampled_from(
    [
        "command:",
        "gpus:",
        "env:",
        "- ",
        "&a ",
        "*a",
        "[",
        "]",
        "{",
        "}",
        ": ",
        "\n",
        "  ",
        "!!str ",
        "!!python/object ",
        "'",
        '"',
        "#",
        "nan",
        ".inf",
        "0x1F",
        "~",
        "|\n",
        "? ",
    ]
) | st.text(max_size=6)


@FUZZ
@given(words=st.lists(YAML_WORDS, max_size=30))
def test_the_job_file_reader_raises_only_its_own_error(words: list[str]) -> None:
    text = "".join(words)
    try:
        parse_job_text(text, "fuzz.yaml")
    except JobFileError as err:
        assert str(err).startswith("fuzz.yaml")


@FUZZ
@given(
    words=st.lists(
        YAML_WORDS | st.sampled_from(["links:", "gpus:", "nodes:", "racks:"]), max_size=30
    )
)
def test_the_topology_and_cluster_readers_raise_only_their_own_errors(words: list[str]) -> None:
    text = "".join(words)
    with contextlib.suppress(TopologyError):
        parse_yaml(text, source="t.yaml")
    with contextlib.suppress(ClusterError, TopologyError):
        parse_cluster_yaml(text, source="c.yaml")


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
HEADERS = {
    kind: (FIXTURES / kind / ("helios.csv" if kind == "helios" else "good.csv"))
    .read_text(encoding="utf-8")
    .splitlines()[0]
    for kind in ("helios", "openb", "philly")
}
CELLS = st.sampled_from(
    [
        "",
        "nan",
        "inf",
        "-1",
        "0",
        "1",
        "1e999",
        "2" * 40,
        "2017-10-09 07:01:55",
        "COMPLETED",
        '"',
        "a,b",
        "\u00e9",
        "4.5",
        "-0",
    ]
) | st.text(st.characters(blacklist_categories=["Cs"]), max_size=8)


@FUZZ
@given(
    kind=st.sampled_from(sorted(HEADERS)),
    rows=st.lists(st.lists(CELLS, min_size=1, max_size=13), max_size=6),
    tail=st.binary(max_size=8),
)
def test_the_trace_reader_raises_only_its_own_error(
    tmp_path_factory: pytest.TempPathFactory, kind: str, rows: list[list[str]], tail: bytes
) -> None:
    path = tmp_path_factory.mktemp("trace") / f"{kind}.csv"
    lines = [HEADERS[kind], *(",".join(row) for row in rows)]
    path.write_bytes("\n".join(lines).encode("utf-8") + tail)
    for skip_bad in (False, True):
        try:
            read_trace(path, skip_bad=skip_bad)
        except TraceError as err:
            assert str(path) in str(err)
