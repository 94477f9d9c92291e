"""MIG jobs on a real server (issue 42 items 2 and 3): an emulated DGX-1 whose `pynvml` is
FakeNvml with GPUs 0 and 1 in MIG mode (H100 80GB; no NVIDIA GPU on CI machines, tests/fakes).
`--mig 3g.40gb` jobs get the instance the core chose by its MIG-UUID, the one listed there or
one created and destroyed at their end; whole-GPU jobs stay off GPUs in MIG mode; profiles
the GPUs lack are refused naming --mig; a creation NVML refuses is the job's reason."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.conftest import Result, run_cli
from tests.server import Api, ServerProcess, envs, fake_nvml_server, wait_for, worker

# GPU 0 has a 3g.40gb at memory slices 4-7 already (the fake's UUID for it), GPU 1 none.
CARVED = {"0": [["3g.40gb", 4]], "1": []}
CARVED_UUID = "MIG-00000000-0000-4000-8000-000000000004"
PROFILE_3G = (9, 4)  # nvidia-smi's profile ID of an H100's 3g.40gb, and its memory slices


@pytest.fixture(scope="module")
def nvml(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ServerProcess, Path]]:
    with fake_nvml_server(tmp_path_factory.mktemp("mig"), mig=CARVED) as found:
        yield found


def cli(server: ServerProcess, *args: str) -> Result:
    return run_cli(*args, **{"TOPOSCHED_URL": server.url, "TOPOSCHED_TOKEN": server.token})


def carved(state: Path) -> dict[str, list[list[object]]]:
    """The fake NVML's instances per MIG GPU, as written after its last create or destroy."""
    written = state.with_suffix(".mig.json")
    return json.loads(written.read_text()) if written.exists() else {}


def test_mig_jobs_get_their_instances_by_uuid_and_created_ones_are_destroyed(
    nvml: tuple[ServerProcess, Path], tmp_path: Path
) -> None:
    server, state = nvml
    api = Api(server)
    whole = api.submit(name="whole", gpus=6, command=["sleep", "600"])["name"]
    seen: dict[str, tuple[int, int, str]] = {}
    for name in ("m1", "m2"):
        out = tmp_path / name
        out.mkdir()
        api.submit(name=name, mig="3g.40gb", **worker(out, wait="go"))
        (slot,) = api.until(name, "running")["placement"]
        (gpu,) = slot["gpus"]
        env = wait_for(lambda out=out: envs(out, 0), f"{name}'s environment")[0]
        seen[name] = (gpu, slot["mig_start"], env["CUDA_VISIBLE_DEVICES"])
    assert sorted(api.job(whole)["placement"][0]["gpus"]) == [2, 3, 4, 5, 6, 7]
    (g1, s1, uuid1), (g2, s2, uuid2) = seen.values()
    assert (g1, s1) != (g2, s2) and uuid1 != uuid2
    assert {g1, g2} <= {0, 1} and {s1, s2} <= {0, 4}  # a 3g.40gb starts at slice 0 or 4
    # Each worker sees the instance at its placement, with the profile it asked.
    now = carved(state)
    for gpu, start, uuid in seen.values():
        assert [uuid, *PROFILE_3G[:1], start, PROFILE_3G[1], True] in now[str(gpu)], now
        if (gpu, start) == (0, 4):
            assert uuid == CARVED_UUID  # the one listed there is handed over, not another
    created = {uuid for gpu, start, uuid in seen.values() if (gpu, start) != (0, 4)}
    assert created
    for name in seen:
        (tmp_path / name / "go").touch()
        api.until(name, "succeeded")
    # What toposched created is gone at the end; the instance it found stays.
    wait_for(
        lambda: carved(state) == {"0": [[CARVED_UUID, 9, 4, 4, True]], "1": []},
        "the created instances to be destroyed",
    )
    api.drain()


def test_a_profile_unknown_or_missing_on_the_gpus_is_refused_naming_mig(
    nvml: tuple[ServerProcess, Path],
) -> None:
    server, _ = nvml
    for profile in ("9g.90gb", "3g.20gb"):  # none anywhere; an A100 40GB's, not an H100's
        refused = cli(server, "submit", "--mig", profile, "--", "sleep", "1")
        assert refused.code != 0
        assert "--mig" in refused.err, refused.err
        assert "3g.40gb" in refused.err and "7g.80gb" in refused.err, refused.err
    assert Api(server).get("/api/v1/jobs")["jobs"] == []


def test_a_creation_nvml_refuses_is_the_jobs_reason(tmp_path: Path) -> None:
    with fake_nvml_server(tmp_path, mig={"0": []}, mig_root=False) as (server, _):
        api = Api(server)
        api.submit(name="m", mig="3g.40gb", command=["sleep", "600"])
        ended = api.until("m", "failed")
        assert "could not start" in ended["reason"], ended["reason"]
        assert "creating MIG instances needs root" in ended["reason"], ended["reason"]
