"""Hostile input against a real server: each bad submission or label gets a 4xx naming the
field, and creates nothing (issue 16's "bad input that gets in", issue 20 item 6)."""

from __future__ import annotations

import json
import re
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from tests.e2e.conftest import run_cli
from tests.server import Api, ServerProcess, alive, running_server, wait_for, worker
from toposched.server.app import MAX_BODY_BYTES
from toposched.server.schemas import MAX_COMMAND_BYTES, MAX_ENV_BYTES, JobSubmit, LabelIn
from toposched.store import Store
from toposched.store.migrations import SCHEMA_VERSION

MB = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with running_server(tmp_path_factory.mktemp("hostile")) as srv:
        yield srv


@pytest.fixture
def api(server: ServerProcess) -> Iterator[Api]:
    client = Api(server)
    yield client
    client.http.close()


def every_job(api: Api) -> list[str]:
    return [job["name"] for job in api.get("/api/v1/jobs?all=true&limit=1000")["jobs"]]


def refused(api: Api, raw: str | bytes, field: str, said: str = "") -> dict[str, Any]:
    """POST `raw` as the body: a 422 whose entries name `field` (dotted, after `body`), with
    `said` in its message, and no job made."""
    before = every_job(api)
    reply = api.http.post("/api/v1/jobs", content=raw, headers={"Content-Type": "application/json"})
    assert reply.status_code == 422, reply.text[:500]
    detail = reply.json()["detail"]
    locs = {".".join(str(part) for part in entry["loc"][1:]) for entry in detail}
    assert field in locs, detail
    assert said in reply.text, detail
    assert every_job(api) == before
    body: dict[str, Any] = reply.json()
    return body


def body(**fields: Any) -> dict[str, Any]:
    return {"command": ["true"], **fields}


STRICT_TYPES = [
    (body(workers=True), "workers"),
    (body(workers="2"), "workers"),
    (body(priority="5"), "priority"),
    (body(gpus=1.0), "gpus"),
    (body(max_restarts=False), "max_restarts"),
    (body(command_visible="yes"), "command_visible"),
    (body(elastic={"min": True, "max": 2}), "elastic.min"),
]


@pytest.mark.parametrize(("sent", "field"), STRICT_TYPES, ids=[f for _, f in STRICT_TYPES])
def test_types_are_strict(api: Api, sent: dict[str, Any], field: str) -> None:
    refused(api, json.dumps(sent), field)


@pytest.mark.parametrize("signal", ["SIGKILL", "SIGSTOP"])
def test_an_uncatchable_checkpoint_signal_is_refused(api: Api, signal: str) -> None:
    sent = body(checkpoint={"signal": signal, "grace_s": 5})
    refused(api, json.dumps(sent), "checkpoint.signal", "cannot be caught")


# Python's JSON reads NaN and Infinity: they once made a 500 (the 422 could not be written).
NON_FINITE = [
    ('{"command": ["true"], "limit_s": NaN}', "limit_s"),
    ('{"command": ["true"], "limit_s": Infinity}', "limit_s"),
    ('{"command": ["true"], "limit_s": -Infinity}', "limit_s"),
    ('{"command": ["true"], "checkpoint": {"grace_s": NaN}}', "checkpoint.grace_s"),
    ('{"command": ["true"], "checkpoint": {"grace_s": Infinity}}', "checkpoint.grace_s"),
    # Numbers in text too (issue 33 finding 5: `node,rack@nan` was stored).
    ('{"command": ["true"], "locality": "node,rack@nan"}', "locality"),
    ('{"command": ["true"], "locality": "node,rack@inf"}', "locality"),
    ('{"command": ["true"], "locality": "node,rack@Infinity"}', "locality"),
]


@pytest.mark.parametrize(("raw", "field"), NON_FINITE)
def test_non_finite_numbers_are_refused_by_name(api: Api, raw: str, field: str) -> None:
    answer = refused(api, raw, field)
    assert "finite" in json.dumps(answer)


NUL = [
    (body(name="job\x00x"), "name"),
    (body(name="job\n"), "name"),
    (body(queue="default\x00"), "queue"),
    (body(command=["true", "a\x00b"]), "command"),
    (body(command=["tr\x00ue"]), "command"),
    (body(env={"KEY": "a\x00b"}), "env"),
    (body(env={"KEY\x00": "x"}), "env"),
    (body(env={"KEY\n": "x"}), "env"),
    (body(workdir="/tmp\x00/x"), "workdir"),
]


@pytest.mark.parametrize(("sent", "field"), NUL)
def test_nul_and_newline_in_names_are_refused(api: Api, sent: dict[str, Any], field: str) -> None:
    refused(api, json.dumps(sent), field)


@pytest.mark.parametrize(
    ("label", "field"),
    [({"key": "a\x00b", "value": "x"}, "key"), ({"key": "team", "value": "x\x00"}, "value")],
)
def test_nul_in_a_label_is_refused(api: Api, label: dict[str, str], field: str) -> None:
    before = api.get("/api/v1/nodes")["nodes"][0]["labels"]
    reply = api.http.put("/api/v1/nodes/node-a/labels", json=label)
    assert reply.status_code == 422, reply.text
    assert [entry["loc"] for entry in reply.json()["detail"]] == [["body", field]]
    assert api.get("/api/v1/nodes")["nodes"][0]["labels"] == before


def test_sizes_are_bounded_and_said(api: Api) -> None:
    huge = "x" * (10 * MB)
    answer = refused(api, json.dumps(body(command=["echo", huge])), "command", "at most 65536")
    # The refused value is not echoed back: the answer stays small.
    assert len(json.dumps(answer)) < 2000
    refused(api, json.dumps(body(env={"BIG": "y" * (5 * MB)})), "env", "at most 65536")
    many = {f"K{i}": "v" * 1000 for i in range(MAX_ENV_BYTES // 1000 + 1)}
    refused(api, json.dumps(body(env=many)), "env", "at most")
    edge = ["echo", "z" * (MAX_COMMAND_BYTES - len("echo"))]
    made = api.submit(name="at-the-limit", command=edge)
    assert api.job(made["name"])["command"] == edge


@pytest.mark.parametrize("declared", [True, False])
def test_a_body_over_16_mib_is_refused_unread(api: Api, declared: bool) -> None:
    before = every_job(api)
    chunk = b"x" * MB

    def chunks() -> Iterator[bytes]:
        yield from [chunk] * (MAX_BODY_BYTES // MB + 1)

    raw: bytes | Iterator[bytes] = chunk * (MAX_BODY_BYTES // MB + 1) if declared else chunks()
    reply = api.http.post("/api/v1/jobs", content=raw, headers={"Content-Type": "application/json"})
    assert reply.status_code == 413, reply.text
    assert "over 16777216 bytes (16 MiB)" in reply.json()["detail"]
    assert every_job(api) == before


@pytest.mark.parametrize(
    ("workdir", "said"),
    [
        ("/tmp/../etc", "'..'"),
        ("/tmp/./x", "'.'"),
        ("relative/dir", "absolute"),
        ("/no/such/directory/here", "not a directory"),
    ],
)
def test_a_bad_workdir_is_refused(api: Api, workdir: str, said: str) -> None:
    refused(api, json.dumps(body(workdir=workdir)), "workdir", said)


def test_an_existing_workdir_is_taken(api: Api, tmp_path: Path) -> None:
    made = api.submit(name="in-a-dir", command=["true"], workdir=str(tmp_path))
    assert made["spec"]["workdir"] == str(tmp_path)
    api.until("in-a-dir", "succeeded")


# `{"gpus": 0, "cpus": 0}` answered 500, and sixty jobs of `cpus: 1m` ran on two CPUs (issue 47).
TOO_FEW_CPUS = [
    body(gpus=0, cpus=0),
    body(gpus=0, cpus="0"),
    body(gpus=0, cpus="1m"),
    body(cpus="99m"),
    body(cpus=0.05),
]


@pytest.mark.parametrize("sent", TOO_FEW_CPUS, ids=[repr(b["cpus"]) for b in TOO_FEW_CPUS])
def test_cpus_below_the_least_a_worker_may_ask_are_refused(api: Api, sent: dict[str, Any]) -> None:
    refused(api, json.dumps(sent), "cpus", "less than the least a worker may ask, 100m")


def test_a_job_of_the_least_cpus_runs(api: Api) -> None:
    made = api.submit(name="least-cpus", command=["true"], gpus=0, cpus="100m")
    assert made["spec"]["cpus"] == "0.1"
    api.until("least-cpus", "succeeded")


# float() read `-0` and other scripts' digits: `node,rack@\u0661\u0662` was 12 s (issue 47).
@pytest.mark.parametrize("after", ["\u0661\u0662", "-0", "1_0", " 5", "+5", "0x10"])
def test_locality_seconds_are_digits_0_to_9(api: Api, after: str) -> None:
    sent = body(locality=f"node,rack@{after}")
    refused(api, json.dumps(sent), "locality", "written in the digits 0-9")


def test_a_full_queue_answers_429_saying_its_cap(tmp_path: Path) -> None:
    args = ("--emulate", "dgx1-v100", "--max-waiting", "1")
    with running_server(tmp_path, args=args) as server:
        api = Api(server)
        api.submit(name="all-gpus", command=["sleep", "60"], gpus=8)
        api.until("all-gpus", "running")
        api.submit(name="waits", command=["true"])
        reply = api.http.post("/api/v1/jobs", json=body(name="one-too-many"))
        assert reply.status_code == 429, reply.text
        said = reply.json()["detail"]
        assert "queue 'default' has 1 job waiting" in said and "--max-waiting 1" in said
        assert "one-too-many" not in every_job(api)
        api.http.delete("/api/v1/jobs/waits")
        api.submit(name="room-again", command=["true"])
        api.http.close()


def test_elastic_max_is_bounded_by_the_cluster(api: Api) -> None:
    # dgx1-v100: 8 GPUs, so at most 8 workers of 1 GPU, 4 of 2.
    refused(api, json.dumps(body(elastic={"min": 1, "max": 9})), "elastic.max", "holds (8)")
    sent = body(gpus=2, elastic={"min": 1, "max": 5})
    refused(api, json.dumps(sent), "elastic.max", "holds (4)")
    refused(api, json.dumps(body(elastic={"min": 1, "max": 10**9})), "elastic.max")
    made = api.submit(name="grows-to-all", command=["true"], elastic={"min": 1, "max": 8})
    assert made["spec"]["elastic"] == {"min": 1, "max": 8}
    api.until("grows-to-all", "succeeded")


def test_another_team_sees_no_command_unless_it_is_marked_visible(
    api: Api, server: ServerProcess, out: Path
) -> None:
    made = api.http.post("/api/v1/tokens", json={"user": "eve", "team": "other"})
    eve = Api(server, made.json()["token"])
    secret = ["python", "-c", "pass", "--password=hunter2"]
    api.submit(name="secretive", command=secret)
    api.submit(name="open-book", command=["echo", "hello"], command_visible=True)
    assert api.job("secretive")["command"] == secret  # the owner's team sees it
    theirs = eve.job("secretive")
    assert theirs["command"] == ["(hidden)"] and theirs["spec"]["command"] == ["(hidden)"]
    assert "hunter2" not in json.dumps(theirs)
    listed = eve.get("/api/v1/jobs?all=true")["jobs"]
    assert "hunter2" not in json.dumps(listed)
    assert eve.job("open-book")["command"] == ["echo", "hello"]
    own = eve.submit(name="eves", **worker(out))
    assert eve.job(own["name"])["command"] == worker(out)["command"]
    eve.http.close()


# ---------------------------------------------------------------------- the schema, property-style

TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=20)


@settings(max_examples=60, deadline=None)
@given(before=TEXT, after=TEXT, where=st.sampled_from(["name", "arg", "env", "workdir", "label"]))
def test_a_nul_anywhere_is_refused_by_the_schema(before: str, after: str, where: str) -> None:
    nul = f"{before}\x00{after}"
    sent: dict[str, Any] = {"command": ["true"]}
    if where == "name":
        sent["name"] = nul
    elif where == "arg":
        sent["command"] = ["true", nul]
    elif where == "env":
        sent["env"] = {"VAR": nul}
    elif where == "workdir":
        sent["workdir"] = "/" + nul
    if where == "label":
        with pytest.raises(ValidationError):
            LabelIn.model_validate({"key": "k", "value": nul})
        return
    with pytest.raises(ValidationError) as raised:
        JobSubmit.model_validate(sent)
    field = "command" if where == "arg" else where
    assert [err["loc"][0] for err in raised.value.errors()] == [field]


@settings(max_examples=60, deadline=None)
@given(st.floats(allow_nan=True, allow_infinity=True))
def test_limit_s_is_a_positive_finite_number(value: float) -> None:
    sent = {"command": ["true"], "limit_s": value}
    if value > 0 and value != float("inf"):
        assert JobSubmit.model_validate(sent).limit_s == value
    else:
        with pytest.raises(ValidationError):
            JobSubmit.model_validate(sent)


# ------------------------------------------------ text the store could not read back (issue 33)

# JSON may spell a lone UTF-16 surrogate; Python reads it into a str no UTF-8 encoder takes. Once
# stored, such a job made every list, get and delete answer 500 and the server fail every start.
SURROGATE = "\\ud800"
UNSTORABLE = [
    (f'{{"command": ["echo", "a{SURROGATE}"]}}', "command.1"),
    (f'{{"command": ["{SURROGATE}"]}}', "command.0"),
    (f'{{"command": ["true"], "env": {{"KEY": "{SURROGATE}"}}}}', "env.KEY"),
    (f'{{"command": ["true"], "selector": {{"zone": "{SURROGATE}"}}}}', "selector.zone"),
    (f'{{"command": ["true"], "selector": {{"k{SURROGATE}": "v"}}}}', "selector.k\\ud800.[key]"),
    (f'{{"command": ["true"], "gpu_type": ["V100", "{SURROGATE}"]}}', "gpu_type.1"),
    (f'{{"command": ["true"], "name": "x{SURROGATE}"}}', "name"),
    (f'{{"command": ["true"], "checkpoint": {{"signal": "{SURROGATE}"}}}}', "checkpoint.signal"),
]


@pytest.mark.parametrize(("raw", "field"), UNSTORABLE, ids=[f for _, f in UNSTORABLE])
def test_text_the_store_cannot_read_back_is_refused_by_name(api: Api, raw: str, field: str) -> None:
    refused(api, raw, field, "lone UTF-16 surrogate")
    # The list still answers: nothing unreadable was stored.
    assert api.http.get("/api/v1/jobs?all=true").status_code == 200


def test_a_command_nested_deeper_than_any_spec_is_refused_by_name(api: Api) -> None:
    deep = "[" * 900 + "]" * 900
    refused(api, f'{{"command": {deep}}}', "command" + ".0" * 15, "nested more than 16")


def test_a_stored_row_an_older_version_let_in_stops_no_start_or_list(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        api = Api(server)
        api.submit(name="kept", command=["true"])
        api.until("kept", "succeeded")
        api.http.close()
        server.stop()
        # As an older toposched stored it: SQLite keeps the escape, orjson cannot read it.
        with sqlite3.connect(server.data_dir / "toposched.db") as conn:
            (spec,) = conn.execute("SELECT spec FROM jobs WHERE name = 'kept'").fetchone()
            poisoned = spec.replace('"true"', '"tr\\ud800ue"')
            assert poisoned != spec
            conn.execute("UPDATE jobs SET spec = ? WHERE name = 'kept'", (poisoned,))
        server.start()
        api = Api(server)
        assert every_job(api) == ["kept"]
        assert api.job("kept")["command"] == ["tr\ufffdue"]
        api.http.close()
        # `admin fsck` finds it; repairs it only once the server is stopped.
        data = str(server.data_dir)
        found = run_cli("admin", "fsck", "--data-dir", data, "--json")
        assert found.code == 1, found.err
        assert json.loads(found.out)["unreadable"] == [
            {
                "seq": 1,
                "job": "kept",
                "column": "spec",
                "problem": "text that is not UTF-8 (a lone UTF-16 surrogate)",
                "repairable": True,
            }
        ]
        busy = run_cli("admin", "fsck", "--data-dir", data, "--repair")
        assert busy.code == 2 and "stop it before --repair" in busy.err, busy.err
        server.stop()
        mended = run_cli("admin", "fsck", "--data-dir", data, "--repair")
        assert mended.code == 0, mended.err
        assert "job kept (seq 1): spec: text that is not UTF-8" in mended.out
        assert "1 unreadable, 1 repaired, 0 left" in mended.out
        clean = run_cli("admin", "fsck", "--data-dir", data)
        assert (clean.code, clean.out.strip()) == (0, "0 unreadable, 0 repaired, 0 left")
        with sqlite3.connect(server.data_dir / "toposched.db") as conn:
            (spec,) = conn.execute("SELECT spec FROM jobs WHERE name = 'kept'").fetchone()
        assert orjson.loads(spec)["command"] == ["tr\ufffdue"]


def test_a_row_that_is_not_json_is_listed_as_corrupt_and_stops_nothing(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        api = Api(server)
        api.submit(name="broken", command=["sleep", "600"])
        api.submit(name="fine", command=["true"])
        api.until("broken", "running")
        api.until("fine", "succeeded")
        api.http.close()
        server.stop()
        with sqlite3.connect(server.data_dir / "toposched.db") as conn:
            conn.execute("UPDATE jobs SET spec = '{\"workers\": 1, ' WHERE name = 'broken'")
        server.start()  # a row it cannot read stops no start
        api = Api(server)
        rows = {j["name"]: j for j in api.get("/api/v1/jobs?all=true")["jobs"]}
        assert rows["fine"]["state"] == "succeeded"
        assert rows["broken"]["state"] == "corrupt"
        assert "its stored spec cannot be read (not JSON" in rows["broken"]["reason"]
        assert "toposched admin fsck" in rows["broken"]["reason"]
        reply = api.http.get("/api/v1/jobs/broken")
        assert reply.status_code == 409
        assert "job 'broken': its stored spec cannot be read" in reply.json()["detail"]
        listed = run_cli("list", "--all", **server.env())
        assert re.search(r"│ broken +│.*│ corrupt +│", listed.out), listed.out
        api.submit(name="after", command=["true"])  # the server goes on
        api.until("after", "succeeded")
        api.http.close()
        found = run_cli("admin", "fsck", "--data-dir", str(server.data_dir), "--json")
        (entry,) = json.loads(found.out)["unreadable"]
        assert (entry["job"], entry["column"], entry["repairable"]) == ("broken", "spec", False)


# What an older version, a hand edit or a bad disk leaves in a row: each stopped a start,
# a list or `admin fsck` (issue 47). A job with no usable spec is listed as corrupt; text
# that is not UTF-8 is read with U+FFFD.
CORRUPTED = {
    "list-spec": "UPDATE jobs SET spec = '[]' WHERE name = ?",
    # Objects, which the store holds as specs, but the server cannot use (issue 47, item 4).
    "empty-spec": "UPDATE jobs SET spec = '{}' WHERE name = ?",
    "no-command": "UPDATE jobs SET spec = json_remove(spec, '$.command') WHERE name = ?",
}
BAD_REASON = "UPDATE jobs SET reason = CAST(X'6f6bff' AS TEXT) WHERE name = 'bad-reason'"
BAD_LABEL = "UPDATE node_labels SET value = CAST(X'7231ff' AS TEXT)"


def test_every_unreadable_row_is_quarantined_found_and_repaired(tmp_path: Path) -> None:
    with running_server(tmp_path) as server:
        api = Api(server)
        for name in [*CORRUPTED, "bad-reason", "fine"]:
            api.submit(name=name, command=["true"])
            api.until(name, "succeeded")
        labelled = api.http.put("/api/v1/nodes/node-a/labels", json={"key": "rack", "value": "r1"})
        assert labelled.status_code == 200, labelled.text
        api.http.close()
        server.stop()
        with sqlite3.connect(server.data_dir / "toposched.db") as conn:
            for name, statement in CORRUPTED.items():
                conn.execute(statement, (name,))
            conn.execute(BAD_REASON)
            conn.execute(BAD_LABEL)
        server.start()  # the server starts, lists, and says so
        api = Api(server)
        rows = {j["name"]: j for j in api.get("/api/v1/jobs?all=true")["jobs"]}
        assert rows["fine"]["state"] == "succeeded"
        for name in CORRUPTED:
            assert rows[name]["state"] == "corrupt", rows[name]
            assert "its stored spec cannot be read" in rows[name]["reason"]
        assert (rows["bad-reason"]["state"], rows["bad-reason"]["reason"]) == (
            "succeeded",
            "ok\ufffd",
        )
        assert api.get("/api/v1/nodes")["nodes"][0]["labels"]["rack"] == "r1\ufffd"
        assert "warning: 5 stored row(s) cannot be read as stored" in server.log()
        api.submit(name="after", command=["true"])  # the server goes on
        api.until("after", "succeeded")
        api.http.close()
        server.stop()
        data = str(server.data_dir)
        found = run_cli("admin", "fsck", "--data-dir", data, "--json")
        assert found.code == 1 and "Traceback" not in found.err, found.err
        listed = {
            (row.get("job") or f"label {row['label']}", row["column"])
            for row in json.loads(found.out)["unreadable"]
        }
        assert listed == {
            ("list-spec", "spec"),
            ("empty-spec", "spec"),
            ("no-command", "spec"),
            ("bad-reason", "reason"),
            ("label node-a/rack", "value"),
        }
        mended = run_cli("admin", "fsck", "--data-dir", data, "--repair")
        assert mended.code == 0, mended.err
        assert "5 unreadable, 5 repaired, 0 left" in mended.out
        clean = run_cli("admin", "fsck", "--data-dir", data)
        assert (clean.code, clean.out.strip()) == (0, "0 unreadable, 0 repaired, 0 left")
        server.start()
        api = Api(server)
        rows = {j["name"]: j for j in api.get("/api/v1/jobs?all=true")["jobs"]}
        # A job with no usable spec is deleted (its name free); text is mended in place.
        assert set(rows) == {"fine", "after", "bad-reason"}
        assert rows["bad-reason"]["reason"] == "ok\ufffd"
        assert api.get("/api/v1/nodes")["nodes"][0]["labels"]["rack"] == "r1\ufffd"
        api.submit(name="list-spec", command=["true"])
        api.http.close()
        assert "cannot be read as stored" not in server.log().split("toposched stopped")[-1]


def test_fsck_migrates_nothing_and_refuses_a_database_not_toposcheds(tmp_path: Path) -> None:
    # `fsck --db URL` migrated whatever it was given (issue 47): tables made in another
    # program's database, its journal mode changed, an older toposched's moved up unasked.
    other = tmp_path / "notes.db"
    with closing(sqlite3.connect(other)) as conn, conn:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE notes (body TEXT)")
    refused = run_cli("admin", "fsck", "--db", f"sqlite:///{other}")
    assert refused.code != 0 and "Traceback" not in refused.err
    assert "is not a toposched database" in refused.err, refused.err
    with closing(sqlite3.connect(other)) as conn, conn:
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        assert tables == {"notes"}
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    missing = tmp_path / "none.db"
    absent = run_cli("admin", "fsck", "--db", f"sqlite:///{missing}")
    assert absent.code != 0 and "no database at" in absent.err, absent.err
    assert not missing.exists()
    older = tmp_path / "older.db"
    Store(f"sqlite:///{older}").close()
    with closing(sqlite3.connect(older)) as conn, conn:
        conn.execute("UPDATE schema_version SET version = ?", (SCHEMA_VERSION - 1,))
    behind = run_cli("admin", "fsck", "--db", f"sqlite:///{older}")
    assert behind.code != 0, behind.out
    said = f"is at schema version {SCHEMA_VERSION - 1}, older than this toposched's"
    assert said in behind.err, behind.err
    with closing(sqlite3.connect(older)) as conn, conn:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [
            (SCHEMA_VERSION - 1,)
        ]
    Store(f"sqlite:///{older}").close()  # the server's own start migrates it
    assert run_cli("admin", "fsck", "--db", f"sqlite:///{older}").code == 0


# A worker that waits out SIGTERM: only the stop's SIGKILL, after the grace, ends it.
STUBBORN = (
    "import os, pathlib, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "pathlib.Path(sys.argv[1]).write_text(str(os.getpid()))\n"
    "time.sleep(600)\n"
)


def restart_with_spec(server: ServerProcess, api: Api, job: str, spec: str) -> Api:
    """The server stopped, job `job`'s stored spec made `spec` (as another program or a bad
    disk might leave it), the server started again; a client of the new one."""
    api.http.close()
    server.stop()
    with closing(sqlite3.connect(server.data_dir / "toposched.db")) as conn, conn:
        conn.execute("UPDATE jobs SET spec = ? WHERE name = ?", (spec, job))
    server.start()
    return Api(server)


def test_a_running_job_whose_row_cannot_be_read_keeps_its_gpus_until_its_workers_are_gone(
    tmp_path: Path,
) -> None:
    # Not restored, its GPUs went to the next job while its workers ran on (issue 47, item 4).
    pid_file = tmp_path / "pid"
    with running_server(tmp_path) as server:
        api = Api(server)
        api.submit(name="held", command=[sys.executable, "-c", STUBBORN, str(pid_file)], gpus=8)
        api.until("held", "running")
        wait_for(pid_file.exists, "the worker")
        pid = int(pid_file.read_text())
        api = restart_with_spec(server, api, "held", "[]")
        listed = {job["name"]: job for job in api.get("/api/v1/jobs?all=true")["jobs"]}
        assert listed["held"]["state"] == "corrupt"
        assert set(api.holders().values()) == {"held"}
        api.submit(name="next", command=["true"], gpus=8)
        assert alive(pid) and api.state("next") == "pending"
        wait_for(lambda: not alive(pid), "the unreadable job's worker to be killed", 30)
        api.until("next", "succeeded")
        assert "held: not restored: its stored spec cannot be read" in server.log()
        assert "its GPUs held until they are gone" in server.log()
        # Ended now (its row still unreadable, so listed as corrupt), it can be deleted.
        gone = api.http.delete("/api/v1/jobs/held")
        assert gone.status_code == 202 and gone.json()["deleted"] is True, gone.text
        assert "held" not in every_job(api)
        assert "Traceback" not in server.log()
        api.http.close()


def test_a_waiting_job_whose_spec_is_an_empty_object_stops_no_start(tmp_path: Path) -> None:
    # `{}` is an object, which the store takes as a spec; the start read it as one and stopped
    # on its missing fields (issue 47, item 4).
    with running_server(tmp_path) as server:
        api = Api(server)
        api.submit(name="all-gpus", command=["sleep", "60"], gpus=8)
        api.until("all-gpus", "running")
        api.submit(name="waits", command=["true"])
        api = restart_with_spec(server, api, "waits", "{}")
        listed = {job["name"]: job for job in api.get("/api/v1/jobs?all=true")["jobs"]}
        assert listed["waits"]["state"] == "corrupt"
        assert "its stored spec cannot be read (it has no command" in listed["waits"]["reason"]
        assert listed["all-gpus"]["state"] == "running"
        assert "waits: not restored: its stored spec cannot be read" in server.log()
        found = run_cli("admin", "fsck", "--data-dir", str(server.data_dir), "--json")
        assert found.code == 1, found.err
        assert [r["job"] for r in json.loads(found.out)["unreadable"]] == ["waits"]
        api.http.delete("/api/v1/jobs/all-gpus")
        api.until("all-gpus", "cancelled")
        api.http.close()
