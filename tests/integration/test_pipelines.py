"""Pipelines of stages on an emulated server: `after` (NAME, NAME:ok, NAME:any) and jobs of CPUs
alone (gpus 0), with real workers, through the REST API."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests.server import Api, envs, running_server, wait_for, worker


def stage(out: Path, name: str, wait: str | None = None, **exits: int) -> dict[str, Any]:
    """A stage's worker, writing in a directory of its own."""
    path = out / name
    path.mkdir()
    return worker(path, wait, **exits)


def submit_pipeline(api: Api, out: Path, tag: str, **prep_exits: int) -> tuple[str, str, str]:
    """CPU prep (it waits for `out/go`), GPU train after it, evaluation after train; their
    names, each starting with `tag` (the module's server keeps the jobs of every test)."""
    prep, train, evaluate = (f"{tag}-{stage}" for stage in ("prep", "train", "eval"))
    job = api.submit(
        name=prep, gpus=0, cpus="2", memory="4Gi", **stage(out, "prep", "../go", **prep_exits)
    )
    assert job["state"] == "running"
    assert job["placement"] == [{"worker": 0, "node": "node-a", "gpus": [], "mig_start": None}]
    job = api.submit(name=train, gpus=4, after=[prep], **stage(out, "train"))
    assert (job["state"], job["reason"]) == ("pending", f"waits for {prep} to succeed")
    assert job["spec"]["after"] == [f"{prep}:ok"]
    job = api.submit(name=evaluate, gpus=1, after=[f"{train}:ok"], **stage(out, "eval"))
    assert (job["state"], job["reason"]) == ("pending", f"waits for {train} to succeed")
    return prep, train, evaluate


def test_a_three_stage_pipeline_runs_in_order(api: Api, out: Path) -> None:
    names = submit_pipeline(api, out, "ok")
    wait_for(lambda: envs(out / "prep", 0), "prep to start")
    assert envs(out / "prep", 0)[0]["CUDA_VISIBLE_DEVICES"] == ""  # a stage without GPUs
    assert set(api.holders().values()) == {None}  # train waits though every GPU is free
    train = api.job("ok-train")
    assert train["placement"] == [] and train["attempt"] == -1
    assert train["after"] == [{"job": "ok-prep", "until": "ok", "state": "running"}]
    node = api.get("/api/v1/nodes")["nodes"][0]
    assert node["cpus_used"] == 2000 and node["memory_used"] == 4 << 30
    queue = api.get("/api/v1/queues")["queues"][0]
    assert (queue["pending"], queue["running"]) == (2, 1)

    (out / "go").write_text("")
    prep, train, evaluate = (api.until(name, "succeeded") for name in names)
    assert prep["ended_at"] <= train["started_at"]
    assert train["ended_at"] <= evaluate["started_at"]
    assert len(train["placement"]) == 1 and len(train["placement"][0]["gpus"]) == 4
    assert [h["new"] for h in evaluate["history"]] == ["pending", "running", "succeeded"]
    assert evaluate["after"] == [{"job": "ok-train", "until": "ok", "state": "succeeded"}]


def test_a_failed_first_stage_ends_the_others_dependency_failed(api: Api, out: Path) -> None:
    names = submit_pipeline(api, out, "bad", r0=3)
    (out / "go").write_text("")
    prep = api.until(names[0], "failed")
    train = api.until(names[1], "dependency-failed")
    evaluate = api.until(names[2], "dependency-failed")
    assert prep["reason"] == "worker 0: exited 3"
    assert train["reason"] == "dependency bad-prep ended failed; it had to succeed"
    assert evaluate["reason"] == ("dependency bad-train ended dependency-failed; it had to succeed")
    for job in (train, evaluate):
        assert job["attempt"] == -1 and job["started_at"] is None  # never ran
        assert job["ended_at"] is not None
        assert [h["new"] for h in job["history"]] == ["pending", "dependency-failed"]
    assert not list((out / "train").glob("env-*"))
    page = api.get("/api/v1/jobs?state=dependency-failed")
    assert [j["name"] for j in page["jobs"]] == ["bad-train", "bad-eval"]
    metrics = api.http.get("/metrics").text
    assert 'toposched_jobs{state="dependency-failed"} 2.0' in metrics


def test_any_runs_after_a_job_that_did_not_succeed(api: Api, out: Path) -> None:
    api.submit(name="first", gpus=1, **stage(out, "first", "../never"))
    api.submit(name="cleanup", gpus=0, cpus=1, after=["first:any"], **stage(out, "cleanup"))
    assert api.job("cleanup")["reason"] == "waits for first to end"
    api.http.delete("/api/v1/jobs/first", params={"when_ended": "keep"})
    api.until("first", "cancelled")
    api.until("cleanup", "succeeded")


def test_dependencies_and_cpu_only_jobs_are_refused_when_wrong(api: Api) -> None:
    command = {"command": ["true"]}
    refusals = [
        ({"name": "b", "after": ["ghost"]}, "after", "no job named 'ghost' to run after"),
        ({"name": "loop", "after": ["loop"]}, "after", "cannot run after itself (a cycle"),
        ({"name": "c", "after": ["x:maybe"]}, "after", "expected NAME, NAME:ok or NAME:any"),
        ({"name": "d", "gpus": 0}, "cpus", "must ask for CPUs"),
        ({"name": "e", "gpus": 0, "cpus": 1, "gpu_type": ["V100"]}, "gpu_type", "for jobs with"),
    ]
    for body, field, words in refusals:
        detail = api.submit(expect=422, **body, **command)["detail"]
        assert [d["loc"] for d in detail] == [["body", field]], detail
        assert words in detail[0]["msg"], detail
        api.get(f"/api/v1/jobs/{body['name']}", expect=404)  # nothing stored


def test_a_restart_keeps_the_pipeline_waiting_and_knows_the_ended(
    tmp_path: Path, out: Path
) -> None:
    with running_server(tmp_path) as server:
        api = Api(server)
        api.submit(name="done", gpus=0, cpus=1, **stage(out, "done"))
        api.until("done", "succeeded")
        api.submit(name="prep", gpus=0, cpus=1, **stage(out, "prep", "../go"))
        api.submit(name="train", gpus=2, after=["prep", "done"], **stage(out, "train"))
        server.kill()
        server.restart()
        # The restarted core holds live jobs alone: `done` ended before, as stored.
        assert api.job("train")["reason"] == "waits for prep to succeed"
        late = api.submit(name="late", gpus=1, after=["done"], **stage(out, "late"))
        assert late["state"] == "running"
        (out / "go").write_text("")
        api.until("train", "succeeded")
        api.until("late", "succeeded")
