"""The real server (uvicorn in a subprocess), real worker processes, SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import os
import stat
import subprocess
from pathlib import Path

import httpx

from tests.server import (
    TOPOSCHED,
    Api,
    ServerProcess,
    alive,
    envs,
    running_server,
    wait_for,
    worker,
)
from toposched.server.auth import Principal, ensure_admin_token, lookup
from toposched.store import Store, sqlite_url


def test_gang_runs_with_torchrun_environment_and_logs(api: Api, out: Path) -> None:
    job = api.submit(name="gang", workers=2, gpus=2, **worker(out, wait="go"))
    assert job["state"] == "running"
    placement = job["placement"]
    assert [p["worker"] for p in placement] == [0, 1]
    assert all(len(p["gpus"]) == 2 for p in placement)
    wait_for(lambda: envs(out, 0) and envs(out, 1), "both workers to start")
    env0, env1 = envs(out, 0)[0], envs(out, 1)[0]
    gpus = [",".join(map(str, p["gpus"])) for p in placement]
    assert (env0["CUDA_VISIBLE_DEVICES"], env1["CUDA_VISIBLE_DEVICES"]) == tuple(gpus)
    assert (env0["RANK"], env1["RANK"], env0["WORLD_SIZE"]) == ("0", "1", "2")
    assert (env0["LOCAL_RANK"], env1["LOCAL_RANK"], env1["LOCAL_WORLD_SIZE"]) == ("0", "1", "2")
    assert env0["MASTER_PORT"] == env1["MASTER_PORT"]
    assert (env0["TOPOSCHED_JOB"], env0["TOPOSCHED_QUEUE"]) == ("gang", "default")
    held = api.holders()
    assert sorted(g for g, j in held.items() if j == "gang") == sorted(
        g for p in placement for g in p["gpus"]
    )
    (out / "go").write_text("")
    done = api.until("gang", "succeeded")
    assert done["reason"] == "all workers exited 0"
    assert [h["new"] for h in done["history"]] == ["pending", "running", "succeeded"]
    logs = api.http.get("/api/v1/jobs/gang/logs", params={"worker": 1}).text
    assert "hello from rank 1" in logs and "warning from rank 1" in logs
    assert "rank 0" not in logs
    assert set(api.holders().values()) == {None}


def test_one_failed_worker_stops_the_rest_of_its_gang(api: Api, out: Path) -> None:
    job = worker(out, wait="never", r0=3)
    job["env"]["WAIT_0"] = "go0"
    api.submit(name="broken", workers=2, **job)
    wait_for(lambda: envs(out, 0) and envs(out, 1), "both workers to start")
    survivor = envs(out, 1)[0]["pid"]
    (out / "go0").write_text("")  # worker 0 exits 3; worker 1 would wait forever
    done = api.until("broken", "failed")
    assert done["reason"] == "worker 0 failed: exited 3"
    assert not alive(survivor)
    assert [h["new"] for h in done["history"]] == ["pending", "running", "stopping", "failed"]
    assert set(api.holders().values()) == {None}


def test_restart_policy_requeues_with_a_restart_count(api: Api, out: Path) -> None:
    api.submit(name="flaky", restart="on-failure", max_restarts=1, **worker(out, r0=1))
    done = api.until("flaky", "failed")
    assert done["restarts"] == 1
    counts = sorted(e["TOPOSCHED_RESTART_COUNT"] for e in envs(out, 0))
    assert counts == ["0", "1"]
    assert [h["new"] for h in done["history"]] == [
        "pending",
        "running",
        "pending",
        "running",
        "failed",
    ]


def test_cancel_stops_a_running_job_and_frees_its_gpus(api: Api, out: Path) -> None:
    api.submit(name="sleeper", gpus=4, **worker(out, wait="never"))
    wait_for(lambda: envs(out, 0), "the worker")
    pid = envs(out, 0)[0]["pid"]
    reply = api.http.delete("/api/v1/jobs/sleeper")
    assert reply.status_code == 202, reply.text
    assert api.until("sleeper", "cancelled")["reason"] == "cancelled"
    assert not alive(pid)
    assert set(api.holders().values()) == {None}
    # Deleting it once it has ended removes it, and frees its name.
    again = api.http.delete("/api/v1/jobs/sleeper")
    assert again.status_code == 202 and again.json()["deleted"] is True, again.text
    assert api.http.get("/api/v1/jobs/sleeper").status_code == 404
    assert api.http.delete("/api/v1/jobs/sleeper").status_code == 404


def test_pending_job_says_why_and_starts_when_room_frees(api: Api, out: Path) -> None:
    api.submit(name="big", gpus=8, **worker(out, wait="go"))
    waiting = api.submit(name="next", gpus=4, **worker(out))
    assert waiting["state"] == "pending"
    why = (
        "needs 4 GPUs; 0 are free; reserved node-a GPUs 0,1,2,3, held by big; "
        "start time unknown: big has no time limit"
    )
    assert waiting["reason"] == why
    text = api.get("/api/v1/jobs/next/explain")["text"]
    assert text.startswith("job next: pending; queue default, priority 0, 1 worker(s) x 4 GPU(s)")
    assert f"now: {why}" in text
    (out / "go").write_text("")
    api.until("big", "succeeded")
    api.until("next", "succeeded")


def test_checkpointable_job_is_preempted_by_its_signal_and_resumes(
    api: Api, out: Path, server: ServerProcess
) -> None:
    admin = api.http
    assert admin.put("/api/v1/queues/owners", json={"guaranteed_gpus": 8}).status_code == 200
    try:
        api.submit(
            name="borrower",
            queue="guests",
            gpus=8,
            checkpoint={"signal": "SIGUSR1", "grace_s": 10},
            **worker(out, wait="never"),
        )
        wait_for(lambda: envs(out, 0), "the borrower")
        api.submit(name="owner", queue="owners", gpus=8, **worker(out, wait="go"))
        # The borrower got SIGUSR1, saved its state and exited 0; the owner runs now.
        wait_for(lambda: (out / "checkpointed-0").exists(), "the checkpoint signal")
        api.until("owner", "running")
        assert api.state("borrower") == "pending"
        (out / "go").write_text("")
        api.until("owner", "succeeded")
        resumed = api.until("borrower", "running")
        assert resumed["attempt"] == 1
        assert [h["new"] for h in api.job("borrower")["history"]] == [
            "pending",
            "running",
            "stopping",
            "pending",
            "running",
        ]
    finally:
        admin.put("/api/v1/queues/owners", json={"guaranteed_gpus": 0})


def test_following_a_preempted_jobs_logs_ends_with_its_workers(api: Api, out: Path) -> None:
    # Requeued, it may wait for hours: nothing more comes to the log of the attempt followed.
    assert api.http.put("/api/v1/queues/owners", json={"guaranteed_gpus": 8}).status_code == 200
    try:
        checkpoint = {"signal": "SIGUSR1", "grace_s": 10}
        job = worker(out, wait="never")
        api.submit(name="bumped", queue="guests", gpus=8, checkpoint=checkpoint, **job)
        wait_for(lambda: envs(out, 0), "the worker")
        follow = {"worker": 0, "follow": True}
        with api.http.stream("GET", "/api/v1/jobs/bumped/logs", params=follow, timeout=10) as log:
            chunks = log.iter_bytes()
            assert b"hello from rank 0" in next(chunks)
            api.submit(name="bumper", queue="owners", gpus=8, **worker(out, wait="go"))
            b"".join(chunks)
        assert api.state("bumped") == "pending"
        (out / "go").write_text("")
        api.until("bumper", "succeeded")
    finally:
        api.http.put("/api/v1/queues/owners", json={"guaranteed_gpus": 0})


def test_bad_submissions_get_422_with_every_bad_field_and_change_nothing(api: Api) -> None:
    before = api.get(
        "/api/v1/jobs",
    )
    reply = api.http.post(
        "/api/v1/jobs",
        json={"workers": 0, "gpus": "two", "locality": "moon", "command": [], "bogus": 1},
    )
    assert reply.status_code == 422
    locs = {tuple(d["loc"]) for d in reply.json()["detail"]}
    assert {
        ("body", "workers"),
        ("body", "gpus"),
        ("body", "locality"),
        ("body", "command"),
        ("body", "bogus"),
    } <= locs
    reply = api.http.post("/api/v1/jobs", json={"gpus": 9, "command": ["true"]})
    assert reply.status_code == 422
    assert "largest node has 8" in reply.text
    reply = api.http.post(
        "/api/v1/jobs", json={"workers": 2, "gpus": 8, "locality": "node", "command": ["true"]}
    )
    assert reply.status_code == 422 and "at most 1 fit" in reply.text
    assert api.get("/api/v1/jobs") == before
    assert (
        api.get(
            "/api/v1/jobs",
        )["jobs"]
        == []
    )


def test_bad_quantities_and_types_get_422_naming_the_field(api: Api) -> None:
    before = api.get("/api/v1/jobs")
    body = {
        "cpus": "4 cores",
        "memory": "16GB",
        "gpu_memory": -1,
        "gpu_type": [],
        "command": ["true"],
    }
    reply = api.http.post("/api/v1/jobs", json=body)
    assert reply.status_code == 422, reply.text
    said = {d["loc"][-1]: d["msg"] for d in reply.json()["detail"]}
    assert set(said) == {"cpus", "memory", "gpu_memory", "gpu_type"}
    assert "such as 4 or 2.5, or millicores such as 500m" in said["cpus"]
    assert "for GB write Gi or G" in said["memory"]
    assert "must not be negative" in said["gpu_memory"]
    assert "at least one GPU type" in said["gpu_type"]
    assert api.get("/api/v1/jobs") == before


def test_gpu_types_written_with_a_comma_are_several(api: Api) -> None:
    job = api.submit(name="either", gpu_type=["T4,V100"], command=["true"])
    assert job["spec"]["gpu_type"] == ["T4", "V100"]
    assert job["state"] in ("running", "succeeded"), job["reason"]  # the node's V100s do
    reply = api.http.post("/api/v1/jobs", json={"gpu_type": ["V100,"], "command": ["true"]})
    assert reply.status_code == 422 and "a GPU type is 1-100 characters" in reply.text
    api.until("either", "succeeded")


def test_a_job_of_a_type_no_node_has_waits_saying_so(api: Api) -> None:
    job = api.submit(name="a100-only", gpu_type=["A100"], command=["true"])
    assert job["state"] == "pending"
    assert job["reason"].startswith("no node it may use: 1 V100 node(s) excluded by gpu_type")
    assert job["spec"]["gpu_type"] == ["A100"]


def test_cpus_and_memory_are_stored_exactly_and_bound_what_starts(api: Api, out: Path) -> None:
    host = len(os.sched_getaffinity(0))
    first = api.submit(name="half", cpus=f"{host * 500}m", memory="1Gi", **worker(out, wait="go"))
    assert first["state"] == "running"
    assert (first["spec"]["cpus"], first["spec"]["memory"]) == (f"{host / 2:g}", "1Gi")
    more = api.submit(name="more", cpus=host, command=["true"])  # all the host's CPUs
    assert more["state"] == "pending"
    assert "room for 0" in more["reason"], more["reason"]
    (out / "go").write_text("")
    api.until("half", "succeeded")
    api.until("more", "succeeded")


def test_an_unknown_checkpoint_signal_is_refused(api: Api) -> None:
    # Accepted, it made every stop of the job fail: cancelled, it stayed stopping for ever.
    body = {"checkpoint": {"signal": "SIGFOO"}, "command": ["true"]}
    reply = api.http.post("/api/v1/jobs", json={"name": "unsignalled", **body})
    assert reply.status_code == 422, reply.text
    assert [d["loc"] for d in reply.json()["detail"]] == [["body", "checkpoint", "signal"]]
    assert api.http.get("/api/v1/jobs/unsignalled").status_code == 404


def test_duplicate_name_is_a_conflict(api: Api, out: Path) -> None:
    api.submit(name="once", **worker(out))
    reply = api.http.post("/api/v1/jobs", json={"name": "once", "command": ["true"]})
    assert reply.status_code == 409 and "already exists" in reply.text
    api.until("once", "succeeded")


def test_auth_boundaries(api: Api, server: ServerProcess, out: Path) -> None:
    anonymous = httpx.get(f"{server.url}/api/v1/jobs")
    assert anonymous.status_code == 401
    bad = httpx.get(f"{server.url}/api/v1/jobs", headers={"Authorization": "Bearer nope"})
    assert bad.status_code == 401
    made = api.http.post("/api/v1/tokens", json={"user": "ann", "team": "alpha"})
    assert made.status_code == 201
    ann = Api(server, made.json()["token"])
    assert ann.get("/api/v1/whoami") == {"user": "ann", "team": "alpha", "role": "user"}
    mine = ann.submit(name="ann-job", **worker(out))
    assert mine["queue"] == "alpha"
    ann.submit(expect=403, name="sneaky", queue="beta", command=["true"])
    api.submit(name="admins", **worker(out, wait="go"))
    assert ann.http.delete("/api/v1/jobs/admins").status_code == 403
    assert ann.http.get("/api/v1/jobs/admins/logs").status_code == 403
    seen = ann.job("admins")  # reading its status is allowed, its environment's values not
    assert seen["state"] == "running"
    assert seen["spec"]["env"] == dict.fromkeys(api.job("admins")["spec"]["env"], "(hidden)")
    assert api.job("admins")["spec"]["env"]["OUT"] == str(out)
    assert ann.http.put("/api/v1/queues/alpha", json={"guaranteed_gpus": 8}).status_code == 403
    assert ann.http.post("/api/v1/tokens", json={"user": "x", "team": "y"}).status_code == 403
    (out / "go").write_text("")
    api.until("admins", "succeeded")
    api.until("ann-job", "succeeded")


def test_a_kept_admin_token_file_is_made_owner_only(tmp_path: Path) -> None:
    kept = tmp_path / "admin.token"
    kept.write_text("tsk_kept\n")
    kept.chmod(0o644)
    store = Store(sqlite_url(tmp_path / "toposched.db"))
    try:
        assert ensure_admin_token(store, tmp_path) == (kept, False)
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        assert lookup(store, "tsk_kept") == Principal("admin", "default", "admin")
    finally:
        store.close()


def test_metrics_count_jobs_gpus_and_decisions(api: Api, server: ServerProcess, out: Path) -> None:
    api.submit(name="metered", gpus=2, **worker(out, wait="go"))
    text = httpx.get(f"{server.url}/metrics").text
    assert 'toposched_jobs{state="running"} 1.0' in text
    assert 'toposched_gpus_allocated{node="node-a"} 2.0' in text
    assert 'toposched_gpus_free{node="node-a"} 6.0' in text
    (decisions,) = [
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("toposched_scheduling_seconds_count")
    ]
    assert decisions >= 1  # at least this submission's
    (out / "go").write_text("")
    api.until("metered", "succeeded")


def test_followed_logs_hold_no_thread_while_waiting(tmp_path: Path, out: Path) -> None:
    # Each quiet `logs -f` used to park a worker thread until its job wrote again: the 40 of
    # the pool's, and every route but submit and cancel hung.
    with running_server(tmp_path) as server, contextlib.ExitStack() as streams:
        api = Api(server)
        api.submit(name="quiet", **worker(out, wait="never"))
        wait_for(lambda: envs(out, 0), "the worker")
        follow = {"worker": 0, "follow": True}
        limits = httpx.Limits(max_connections=None)
        http = streams.enter_context(httpx.Client(headers=api.http.headers, limits=limits))
        followers = []
        for _ in range(45):
            reply = streams.enter_context(
                http.stream("GET", f"{server.url}/api/v1/jobs/quiet/logs", params=follow)
            )
            followers.append(reply.iter_bytes())
            assert b"hello from rank 0" in next(followers[-1])
        assert api.state("quiet") == "running"
        assert api.http.delete("/api/v1/jobs/quiet").status_code == 202
        # Each follower ends with the job, with what its supervisor wrote last.
        assert all(b"killed by SIGTERM" in b"".join(rest) for rest in followers)
        api.until("quiet", "cancelled")


def test_refuses_a_public_address_without_auth(tmp_path: Path) -> None:
    proc = subprocess.run(
        [*TOPOSCHED, "serve", "--host", "0.0.0.0", "--no-auth", "--data-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "refusing to listen on 0.0.0.0 without auth" in proc.stderr
    assert not (tmp_path / "toposched.db").exists()


def test_kill_9_and_restart_adopts_workers_and_loses_nothing(
    tmp_path: Path, db_url: str, out: Path
) -> None:
    """The crash test of issue 5: kill -9 the server while jobs run, restart, check every job."""
    with running_server(tmp_path, db_url) as server:
        api = Api(server)
        api.submit(name="keeps-running", gpus=4, **worker(out, wait="go-a"))
        api.submit(name="ends-meanwhile", gpus=2, **worker(out, wait="go-b", r0=7))
        api.submit(name="first-waiter", gpus=8, **worker(out))
        api.submit(name="second-waiter", gpus=2, **worker(out))
        wait_for(lambda: len(list(out.glob("env-*"))) == 2, "both running jobs' workers")
        before = {j["name"]: j for j in api.get("/api/v1/jobs")["jobs"]}
        assert [before[n]["state"] for n in before] == ["running", "running", "pending", "pending"]
        pid_a = (
            envs(out, 0)[0]["pid"]
            if envs(out, 0)[0]["TOPOSCHED_JOB"] == "keeps-running"
            else envs(out, 0)[1]["pid"]
        )
        server.kill()
        (out / "go-b").write_text("")  # ends with exit 7 while no server is up
        wait_for(
            lambda: (server.data_dir / "runs/ends-meanwhile/attempt-0/worker-0.exit").exists(),
            "the exit to be recorded by the supervisor",
        )
        server.restart()
        api = Api(server)
        after = {
            j["name"]: j
            for j in api.get(
                "/api/v1/jobs",
            )["jobs"]
        }
        assert list(after) == ["keeps-running", "first-waiter", "second-waiter"] or list(after) == [
            "keeps-running",
            "ends-meanwhile",
            "first-waiter",
            "second-waiter",
        ]
        ended = api.until("ends-meanwhile", "failed")
        assert "7" in ended["reason"]
        kept = api.job("keeps-running")
        assert kept["state"] == "running"
        assert kept["placement"] == before["keeps-running"]["placement"]
        assert kept["attempt"] == 0
        assert alive(pid_a)
        # Waiting jobs keep their order: the 8-GPU job is still first, the 2-GPU one may not
        # pass it although 4 GPUs are free.
        pending = api.get(
            "/api/v1/jobs",
        )["jobs"]
        assert [j["name"] for j in pending] == ["keeps-running", "first-waiter", "second-waiter"]
        assert api.state("second-waiter") == "pending"
        holders = api.holders()
        assert sorted(g for g, j in holders.items() if j == "keeps-running") == sorted(
            kept["placement"][0]["gpus"]
        )
        assert sum(1 for j in holders.values() if j) == 4
        (out / "go-a").write_text("")
        api.until("keeps-running", "succeeded")
        api.until("first-waiter", "succeeded")
        api.until("second-waiter", "succeeded")
        every = api.get("/api/v1/jobs?all=true")["jobs"]
        assert [j["name"] for j in every] == [
            "keeps-running",
            "ends-meanwhile",
            "first-waiter",
            "second-waiter",
        ]


def test_a_taken_port_is_refused_before_anything_is_written(
    server: ServerProcess, tmp_path: Path
) -> None:
    data = tmp_path / "other"
    proc = subprocess.run(
        [*TOPOSCHED, "serve", "--port", str(server.port), "--data-dir", str(data)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{server.port}: Address already in use" in proc.stderr
    assert not data.exists()


def test_a_bad_policy_param_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    data = tmp_path / "data"
    proc = subprocess.run(
        [*TOPOSCHED, "serve", "--data-dir", str(data), "--param", "demote_after_gpu_h=-1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert (
        "--param: policy 'toposched': demote_after_gpu_h must be positive, got -1.0" in proc.stderr
    )
    assert not data.exists()


def test_a_delete_asked_live_survives_a_crash_and_removes_the_job_once_it_has_stopped(
    tmp_path: Path, db_url: str
) -> None:
    """`DELETE ?when_ended=delete` of a running job, then kill -9 while it stops: the restarted
    server finishes the stop and removes the job, its name free, no second delete."""
    with running_server(tmp_path, db_url) as server:
        api = Api(server)
        # A worker that ignores its checkpoint signal: the stop takes the whole 3 s grace.
        api.submit(
            name="going",
            checkpoint={"signal": "SIGUSR1", "grace_s": 3},
            command=["sh", "-c", "trap '' USR1; sleep 60"],
        )
        api.until("going", "running")
        answer = api.http.delete("/api/v1/jobs/going", params={"when_ended": "delete"})
        assert answer.status_code == 202
        assert answer.json()["state"] == "stopping" and answer.json()["deleted"] is False
        server.kill()
        server.restart()
        api = Api(server)
        wait_for(lambda: api.http.get("/api/v1/jobs/going").status_code == 404, "it to go", 30)
        assert api.submit(name="going", command=["true"])["name"] == "going"
        api.until("going", "succeeded")
        # A waiting job deleted so is gone in the answer itself.
        api.submit(name="hog", gpus=8, command=["sleep", "60"])
        api.submit(name="waits", gpus=8, command=["true"])
        gone = api.http.delete("/api/v1/jobs/waits", params={"when_ended": "delete"}).json()
        assert (gone["state"], gone["deleted"]) == ("cancelled", True)
        assert api.http.get("/api/v1/jobs/waits").status_code == 404
        api.drain()


def test_a_mig_profile_is_refused_naming_mig_where_no_gpu_is_in_mig_mode(api: Api) -> None:
    """The emulated node has no GPU in MIG mode (only NVML's are found in it): a MIG profile
    is refused by the field that asked it, as a MIG job of more than one worker or GPU is;
    nothing is stored."""
    before = api.get("/api/v1/jobs")
    reply = api.http.post("/api/v1/jobs", json={"mig": "3g.40gb", "command": ["true"]})
    assert reply.status_code == 422
    (detail,) = reply.json()["detail"]
    assert detail["loc"][-1] == "mig"
    assert "mig 3g.40gb: no GPU it may use is in MIG mode" in detail["msg"]
    reply = api.http.post(
        "/api/v1/jobs", json={"mig": "1g.10gb", "workers": 2, "command": ["true"]}
    )
    assert reply.status_code == 422
    assert "mig 1g.10gb is one MIG instance: workers must be 1, got 2" in reply.text
    assert api.get("/api/v1/jobs") == before
