"""A pipeline of stages from the command line: `submit --after NAME[:ok|:any]` (and the job
file's `after:`), a stage of CPUs alone (`--gpus 0 --cpus 2 --memory 4Gi`), against a real
`toposched serve` on an emulated dgx1-v100."""

from __future__ import annotations

import itertools
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Result
from tests.e2e.test_cli_server import GATED, run, submitted_body, user_env, wait_for
from tests.server import ServerProcess, running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    with pytest.MonkeyPatch.context() as patch:
        # The example stages run `python ...`: let that be this interpreter for the workers.
        path = os.environ.get("PATH", "")
        patch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{path}")
        with running_server(tmp_path_factory.mktemp("pipe")) as started:
            yield started


@pytest.fixture
def cli(server: ServerProcess) -> Callable[..., Result]:
    env = user_env(server)
    return lambda *args: run(env, *args)


def gated(gate: Path) -> tuple[str, ...]:
    return ("--", sys.executable, "-c", GATED, str(gate))


def test_after_and_gpus_0_are_sent_as_given(tmp_path: Path) -> None:
    result, body = submitted_body(
        "--name", "prep", "--gpus", "0", "--cpus", "2", "--memory", "4Gi", "--", "true"
    )
    assert result.code == 0 and body is not None
    assert (body["gpus"], body["cpus"], body["memory"]) == (0, "2", "4Gi")
    assert "after" not in body
    result, body = submitted_body("--after", "prep", "--after", "data:any", "--", "true")
    assert result.code == 0 and body is not None and body["after"] == ["prep", "data:any"]
    filed = tmp_path / "train.yaml"
    filed.write_text("name: train\nafter: [prep]\ncommand: [true]\n")
    _, body = submitted_body("-f", str(filed))
    assert body is not None and body["after"] == ["prep"]
    _, body = submitted_body("-f", str(filed), "--after", "other:any")  # the flag wins
    assert body is not None and body["after"] == ["other:any"]


def test_a_three_stage_pipeline_runs_in_order(
    server: ServerProcess, cli: Callable[..., Result], tmp_path: Path
) -> None:
    gate = tmp_path / "go"
    prep = cli("submit", "--name", "prep", "--gpus", "0", "--cpus", "2", "--memory", "4Gi",
               *gated(gate))  # fmt: skip
    assert prep.code == 0, prep.err
    assert prep.out.startswith("submitted prep to queue default: running")
    train = cli("submit", "--name", "train", "--gpus", "4", "--after", "prep", *gated(gate))
    assert train.code == 0, train.err
    assert train.out == "submitted train to queue default: pending (waits for prep to succeed)\n"
    evaluate = cli("submit", "--name", "eval", "--after", "train:ok", *gated(gate))
    assert "pending (waits for train to succeed)" in evaluate.out

    shown = cli("get", "train")
    assert shown.code == 0
    assert re.search(r"^after +prep:ok \(running\) *$", shown.out, re.M), shown.out
    assert "waits for prep to succeed" in shown.out
    jobs = {j["name"]: j for j in cli("list", "--json").json()["jobs"]}
    assert (jobs["prep"]["state"], jobs["train"]["state"]) == ("running", "pending")
    assert jobs["train"]["reason"] == "waits for prep to succeed"
    table = cli("list").out
    assert "node-a:-" in table  # prep's worker has no GPU
    assert "waits for prep to succeed" in table and "waits for train to" in table

    gate.write_text("")
    for name in ("prep", "train", "eval"):
        wait_for(server, name, "succeeded")
    shown = cli("get", "eval")
    assert re.search(r"^after +train:ok \(succeeded\) *$", shown.out, re.M), shown.out


def test_a_failed_first_stage_ends_the_others_dependency_failed(
    server: ServerProcess, cli: Callable[..., Result], tmp_path: Path
) -> None:
    fail = ("--", sys.executable, "-c", "import sys; sys.exit(3)")
    assert cli("submit", "--name", "p2", "--gpus", "0", "--cpus", "1", *fail).code == 0
    cli("submit", "--name", "t2", "--gpus", "2", "--after", "p2", *gated(tmp_path / "never"))
    cli("submit", "--name", "e2", "--after", "t2", *gated(tmp_path / "never"))
    wait_for(server, "p2", "failed")
    wait_for(server, "e2", "dependency-failed")
    listed = cli("list", "--state", "dependency-failed", "--json").json()["jobs"]
    assert [j["name"] for j in listed] == ["t2", "e2"]
    assert "dependency-failed" in cli("list", "--state", "dependency-failed").out
    shown = cli("get", "e2").out
    assert "dependency-failed" in shown
    assert "dependency t2 ended dependency-failed; it had to succeed" in shown


def test_refusals_name_the_flag(cli: Callable[..., Result]) -> None:
    ghost = cli("submit", "--name", "g", "--after", "ghost", "--", "true")
    assert (ghost.code, ghost.err) == (2, "error: --after: no job named 'ghost' to run after\n")
    loop = cli("submit", "--name", "loop", "--after", "loop", "--", "true")
    assert loop.code == 2
    assert loop.err == (
        "error: --after: job 'loop' cannot run after itself (a cycle of dependencies)\n"
    )
    bad = cli("submit", "--after", "x:maybe", "--", "true")
    assert bad.err == "error: --after: 'x:maybe': expected NAME, NAME:ok or NAME:any\n"
    no_cpus = cli("submit", "--gpus", "0", "--", "true")
    assert no_cpus.code == 2
    assert no_cpus.err == (
        "error: --cpus: a job without GPUs (gpus 0) must ask for CPUs (e.g. 2 or 500m)\n"
    )
    assert "g" not in cli("list", "--all").out.split()


def test_the_example_pipeline_files_run_in_order(
    server: ServerProcess, cli: Callable[..., Result]
) -> None:
    stages = ("pipeline-prep", "pipeline-train", "pipeline-eval")
    said = [cli("submit", "-f", f"examples/jobs/{name}.yaml") for name in stages]
    assert [r.code for r in said] == [0, 0, 0], [r.err for r in said]
    assert "pending (waits for pipeline-prep to succeed)" in said[1].out
    ended = [wait_for(server, name, "succeeded") for name in stages]
    assert ended[0]["placement"] == [{"worker": 0, "node": "node-a", "gpus": [], "mig_start": None}]
    assert len(ended[1]["placement"][0]["gpus"]) == 4
    for before, after in itertools.pairwise(ended):
        assert before["ended_at"] <= after["started_at"]
