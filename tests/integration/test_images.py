"""Jobs in a container image (`submit --image`), run by a real podman where one works here.

The image is made here, from this machine's own `sh` and `cat` and their libraries (no
registry can be reached): `podman import` of that root. Where podman is missing or cannot run
a container (CI machines without it, say) those tests are skipped and say why; the refusal
of an image where no runtime exists runs everywhere.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_job_accounts import PRELOAD
from tests.server import Api, ServerProcess, running_server, wait_for

IMAGE = "localhost/toposched-test:1"
# What a machine may need for `podman run` to work, tried in order: nothing; and, on VMs such
# as the one this was written on, runc (crun refuses cgroups in hybrid mode) with limits no
# higher than the machine's own (podman's default nofile and nproc are above them).
ARG_SETS: tuple[tuple[str, ...], ...] = (
    (),
    ("--runtime=runc", "--ulimit=nofile=1024:1024", "--ulimit=nproc=1000:1000"),
)


def _root(into: Path) -> None:
    """A root with sh, cat and their shared libraries, and an os-release of its own."""
    for program in ("sh", "cat", "sleep"):
        found = shutil.which(program)
        assert found is not None
        real = Path(found).resolve()
        (into / "bin").mkdir(parents=True, exist_ok=True)
        shutil.copy2(real, into / "bin" / program)
        libs = subprocess.run(["ldd", str(real)], capture_output=True, text=True).stdout
        for word in libs.split():
            if word.startswith("/"):
                target = into / word.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(word, target)
    (into / "etc").mkdir(exist_ok=True)
    (into / "etc" / "os-release").write_text("ID=toposched-test\n")
    # What an image may carry to gain root: a setuid-root copy of cat
    shutil.copy2(into / "bin" / "cat", into / "bin" / "suidcat")
    (into / "bin" / "suidcat").chmod(0o4755)


@pytest.fixture(scope="module")
def podman_args(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, ...]:
    """The `--container-arg`s this machine needs, once the test image is made."""
    if shutil.which("podman") is None:
        pytest.skip("podman is not installed (apt-get install podman runc)")
    root = tmp_path_factory.mktemp("image") / "root"
    _root(root)
    tar = root.parent / "root.tar"
    subprocess.run(["tar", "-C", str(root), "-cf", str(tar), "."], check=True)
    made = subprocess.run(["podman", "import", "-q", str(tar), IMAGE], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"podman cannot import an image here: {made.stderr.decode().strip()}")
    tried = []
    for args in ARG_SETS:
        ran = subprocess.run(
            ["podman", "run", "--rm", *args, IMAGE, "/bin/cat", "/etc/os-release"],
            capture_output=True,
            text=True,
        )
        if ran.returncode == 0 and ran.stdout == "ID=toposched-test\n":
            return args
        tried.append(f"{' '.join(args) or 'no arguments'}: {ran.stderr.strip()}")
    pytest.skip("podman cannot run a container here: " + "; ".join(tried))


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, podman_args: tuple[str, ...]
) -> Iterator[ServerProcess]:
    args = ["--emulate", "dgx1-v100", "--container-runtime", "podman"]
    args += [f"--container-arg={arg}" for arg in podman_args]
    with running_server(tmp_path_factory.mktemp("srv"), args=args) as srv:
        yield srv


def _containers() -> list[str]:
    listed = subprocess.run(
        ["podman", "ps", "--all", "--format", "{{.Names}}"], capture_output=True, text=True
    )
    return [name for name in listed.stdout.split() if name.startswith("toposched-")]


def test_workers_run_in_the_image_with_the_executors_environment(server: ServerProcess) -> None:
    api = Api(server)
    show = (
        "echo rank=$RANK of $WORLD_SIZE gpus=$CUDA_VISIBLE_DEVICES job=$TOPOSCHED_JOB "
        "$(cat /etc/os-release)"
    )
    job = api.submit(name="boxed", workers=2, image=IMAGE, command=["/bin/sh", "-c", show])
    gpus = [w["gpus"][0] for w in job["placement"]]
    done = api.until("boxed", "succeeded", timeout_s=60)
    assert done["spec"]["image"] == IMAGE
    for rank in (0, 1):
        log = api.http.get("/api/v1/jobs/boxed/logs", params={"worker": rank}).text
        # Emulated GPUs: no devices to pass, the indices as the executor gives them.
        assert f"rank={rank} of 2 gpus={gpus[rank]} job=boxed ID=toposched-test" in log
    assert not _containers()  # removed once they ended


def test_a_cancelled_image_job_leaves_no_container(server: ServerProcess) -> None:
    api = Api(server)
    api.submit(name="long", image=IMAGE, command=["/bin/sleep", "600"])
    wait_for(lambda: "toposched-long-0-0" in _containers(), "the container to run", 60)
    assert api.http.delete("/api/v1/jobs/long").status_code == 202  # accepted: stopping
    api.until("long", "cancelled", timeout_s=60)
    wait_for(lambda: not _containers(), "the container to be removed", 60)


def test_an_image_is_refused_where_no_runtime_runs(tmp_path: Path) -> None:
    args = ["--emulate", "dgx1-v100", "--container-runtime", "/no/such/podman"]
    with running_server(tmp_path, args=args) as server:
        api = Api(server)
        refused = api.submit(expect=422, image=IMAGE, command=["true"])
        [detail] = refused["detail"]
        assert detail["loc"] == ["body", "image"]
        assert detail["msg"] == (
            "no container runtime on the server to run an image (install podman or docker); "
            "/no/such/podman: not installed (not on PATH)"
        )
        assert api.get("/api/v1/jobs?all=true")["jobs"] == []  # nothing was stored
        bad = api.submit(expect=422, image="-v /:/host", command=["true"])
        assert "is not an image reference" in bad["detail"][0]["msg"]


@pytest.fixture(scope="module")
def shared_server(
    tmp_path_factory: pytest.TempPathFactory, podman_args: tuple[str, ...]
) -> Iterator[ServerProcess]:
    """A server as teams share one: run as root, each team's jobs as an account of its own."""
    if os.geteuid() != 0:
        pytest.skip("starting jobs as other users needs root (run the tests as root)")
    opened = tmp_path_factory.mktemp("shared")
    opened.chmod(0o755)
    args = ["--emulate", "dgx1-v100", "--container-runtime", "podman", "--job-accounts", "team"]
    args += [f"--container-arg={arg}" for arg in podman_args]
    with running_server(opened, args=args) as srv:
        yield srv


def _team(server: ServerProcess, name: str) -> Api:
    made = Api(server).http.post("/api/v1/tokens", json={"user": name, "team": name})
    assert made.status_code == 201, made.text
    return Api(server, made.json()["token"])


def test_an_image_job_gains_no_root_on_the_host_or_in_its_container(
    shared_server: ServerProcess,
) -> None:
    """The job's LD_PRELOAD does not reach the runtime's client (which runs as root), a
    setuid file of the image gives no root inside, and a workdir the team could not enter is
    not mounted for it."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the preloaded library")
    bait = shared_server.data_dir.parent / "bait"
    bait.mkdir()
    bait.chmod(0o1777)
    (bait / "preload.c").write_text(PRELOAD)
    library = bait / "preload.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(library), str(bait / "preload.c")], check=True
    )
    library.chmod(0o755)
    evidence = bait / "evidence"
    api = _team(shared_server, "vision")
    env = {"LD_PRELOAD": str(library), "EVIDENCE": str(evidence), "SPACED": " a=b "}
    show = 'echo "spaced=[$SPACED]"; /bin/suidcat /proc/self/status'
    api.submit(name="boxed", queue="vision", image=IMAGE, command=["/bin/sh", "-c", show], env=env)
    done = api.until("boxed", "succeeded", timeout_s=60)
    assert done["state"] == "succeeded", done
    # Nothing ran the library as root: podman, started as root, never saw the variable.
    said = evidence.read_text().splitlines() if evidence.exists() else []
    assert not any(" uid 0 " in f"{line} " for line in said), said
    log = api.http.get("/api/v1/jobs/boxed/logs", params={"worker": 0}).text
    assert "spaced=[ a=b ]" in log, log  # the values as given, through the env file
    ids = next(line for line in log.splitlines() if line.startswith("Uid:")).split()[1:]
    caps = next(line for line in log.splitlines() if line.startswith("CapEff:")).split()[1]
    # The setuid bit gave nothing: real, effective, saved ids all the team's; no capability.
    assert len(set(ids)) == 1 and ids[0] != "0", log
    assert int(caps, 16) == 0, log
    refused = api.submit(
        name="peek",
        queue="vision",
        image=IMAGE,
        command=["/bin/cat", "admin.token"],
        workdir=str(shared_server.data_dir),
    )
    assert refused["name"] == "peek"
    failed = api.until("peek", "failed", timeout_s=60)
    assert "workdir" in failed["reason"] and "is not for" in failed["reason"], failed
    assert not _containers()
