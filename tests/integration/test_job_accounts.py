"""Jobs as their owners (issue 33, finding 2): a server run as root starts each team's jobs as
an account of the team's own, and a job of one team, trying each attack the probe made, is
refused by the kernel: the admin token, the database, another team's log and environment, its
processes. Needs root (to start processes as other users); skipped otherwise, saying so."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server import TOPOSCHED, Api, ServerProcess, running_server, wait_for
from toposched.executors.accounts import DYNAMIC_UIDS, AccountError, Accounts, KeyedBy
from toposched.executors.supervisor import read_pids

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="starting jobs as other users needs root (run the tests as root)"
)

# Each line says whether one thing a job might try was allowed: what the kernel says, nothing
# the test could misread (a refused `cat` exits non-zero).
ATTACK = r"""
try() { if "$@" >/dev/null 2>&1; then echo "ALLOWED $1 ${2:-}"; else echo "DENIED $1 ${2:-}"; fi; }
try cat "$DATA/admin.token"
try cat "$DATA/toposched.db"
try ls "$DATA"
try ls "$DATA/runs"
try cat "$VICTIM_LOG"
try cat "/proc/$VICTIM_PID/environ"
try kill -9 "$VICTIM_PID"
try touch "$TOPOSCHED_CHECKPOINT_DIR/mine"
try touch "$HOME/mine"
echo "uid $(id -u) gid $(id -g) groups $(id -G)"
"""


@pytest.fixture
def open_root() -> Iterator[Path]:
    """A directory every user may pass through, as a data directory's parent often is: only
    the server's own modes keep jobs out of what is under it (pytest's are root's alone)."""
    made = Path(tempfile.mkdtemp(prefix="toposched-accounts-", dir="/tmp"))
    made.chmod(0o755)
    yield made
    shutil.rmtree(made, ignore_errors=True)


@pytest.fixture
def server(open_root: Path) -> Iterator[ServerProcess]:
    with running_server(open_root, args=("--emulate", "dgx1-v100", "--job-accounts", "team")) as s:
        yield s


def team(server: ServerProcess, admin: Api, user: str, name: str) -> Api:
    made = admin.http.post("/api/v1/tokens", json={"user": user, "team": name})
    assert made.status_code == 201, made.text
    return Api(server, made.json()["token"])


def owner(pid: int) -> tuple[int, int]:
    """The real uid and gid of a running process."""
    status = Path(f"/proc/{pid}/status").read_text().splitlines()
    uid = next(line for line in status if line.startswith("Uid:")).split()[1]
    gid = next(line for line in status if line.startswith("Gid:")).split()[1]
    return int(uid), int(gid)


def test_a_job_of_one_team_cannot_touch_the_server_or_another_team(
    server: ServerProcess,
) -> None:
    admin = Api(server)
    vision = team(server, admin, "vera", "vision")
    nlp = team(server, admin, "nils", "nlp")
    said = server.log()
    assert "jobs run as their team's own account" in said, said
    vision.submit(
        name="victim",
        queue="vision",
        command=["sh", "-c", "echo victim up; exec sleep 600"],
        env={"SECRET": "hunter2"},
    )
    vision.until("victim", "running")
    runs = server.data_dir / "runs"
    record = wait_for(lambda: read_pids(runs / "victim" / "attempt-0", 0), "victim's pid")
    victim_uid, victim_gid = owner(record.worker_pid)
    assert victim_uid >= DYNAMIC_UIDS[0] and victim_gid == victim_uid

    nlp.submit(
        name="attacker",
        queue="nlp",
        command=["sh", "-c", ATTACK],
        env={
            "DATA": str(server.data_dir),
            "VICTIM_LOG": str(runs / "victim" / "attempt-0" / "worker-0.log"),
            "VICTIM_PID": str(record.worker_pid),
        },
    )
    done = nlp.until("attacker", "succeeded")
    assert done["state"] == "succeeded"
    log = nlp.http.get("/api/v1/jobs/attacker/logs?worker=0")
    assert log.status_code == 200, log.text
    lines = log.text.splitlines()
    verdicts = {line.split(" ", 1)[1]: line.split(" ", 1)[0] for line in lines if " " in line}
    for path, what in [
        (f"{server.data_dir}/admin.token", "admin.token"),
        (f"{server.data_dir}/toposched.db", "toposched.db"),
        (str(server.data_dir), "ls"),
        (f"{runs}", "ls runs"),
        (f"{runs}/victim/attempt-0/worker-0.log", "victim log"),
        (f"/proc/{record.worker_pid}/environ", "environ"),
    ]:
        verb = "ls" if what.startswith("ls") else "cat"
        assert verdicts.get(f"{verb} {path}") == "DENIED", (what, lines)
    assert verdicts.get("kill -9") == "DENIED", lines
    # What is its own it may use.
    assert any(line.startswith("ALLOWED touch") and "/checkpoint/mine" in line for line in lines)
    assert sum(line.startswith("ALLOWED touch") for line in lines) == 2, lines
    ids = next(line for line in lines if line.startswith("uid "))
    uid = int(ids.split()[1])
    assert uid >= DYNAMIC_UIDS[0] and uid not in (0, victim_uid), ids
    assert ids.split()[3:] == [str(uid), "groups", str(uid)], ids  # none of the server's groups

    # The victim lives on, and its team still reads its log through the API.
    assert vision.state("victim") == "running"
    assert "victim up" in vision.http.get("/api/v1/jobs/victim/logs?worker=0").text
    assert owner(record.worker_pid) == (victim_uid, victim_gid)
    # A team keeps its account: a second job of nlp runs as the same uid.
    nlp.submit(name="again", queue="nlp", command=["sh", "-c", "id -u"])
    nlp.until("again", "succeeded")
    assert nlp.http.get("/api/v1/jobs/again/logs?worker=0").text.strip() == str(uid)
    admin.http.delete("/api/v1/jobs/victim")
    vision.until("victim", "cancelled")
    for client in (admin, vision, nlp):
        client.http.close()


def test_allocations_are_kept_named_accounts_are_checked(tmp_path: Path) -> None:
    accounts = Accounts(tmp_path, KeyedBy.TEAM, uids=(61184, 61185))
    first = accounts.for_job("nlp", "nils")
    second = accounts.for_job("vision", "vera")
    assert (first.uid, second.uid) == (61184, 61185)
    assert accounts.for_job("nlp", "someone-else").uid == 61184
    home = first.home
    assert home.stat().st_uid == 61184 and (home.stat().st_mode & 0o777) == 0o700
    assert (tmp_path / "accounts.json").stat().st_mode & 0o777 == 0o600
    with pytest.raises(AccountError, match="no uid left in 61184-61185 for the team 'ops'"):
        accounts.for_job("ops", "otto")
    again = Accounts(tmp_path, KeyedBy.TEAM, uids=(61184, 61185))
    assert again.allocated() == {"nlp": 61184, "vision": 61185}
    (tmp_path / "u").mkdir()
    by_user = Accounts(tmp_path / "u", KeyedBy.USER, uids=(61184, 61190))
    assert by_user.for_job("nlp", "nils").uid != by_user.for_job("nlp", "nora").uid
    with pytest.raises(AccountError, match="jobs never run as root"):
        Accounts(tmp_path, named={"ops": "root"})
    with pytest.raises(AccountError, match="no Unix user 'nobody-here-at-all'"):
        Accounts(tmp_path, named={"ops": "nobody-here-at-all"})


def test_the_server_says_when_jobs_share_its_account_and_refuses_root_as_a_team(
    tmp_path: Path,
) -> None:
    (tmp_path / "shared").mkdir()
    with running_server(tmp_path / "shared") as shared:
        assert "jobs run as this server's own user (root, uid 0)" in shared.log()
        assert "fit for one team or trusted users only (--job-accounts server)" in shared.log()
    # pytest's own directories are root's alone: the server says the jobs cannot reach theirs.
    (tmp_path / "closed").mkdir()
    args = ("--emulate", "dgx1-v100", "--job-accounts", "team")
    with running_server(tmp_path / "closed", args=args) as closed:
        assert re.search(r"warning: \S+ is closed to other users \(mode 7[0-7]0\)", closed.log())
    data = tmp_path / "refused"
    proc = subprocess.run(
        [*TOPOSCHED, "serve", "--data-dir", str(data), "--job-account", "ops=root"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "--job-account ops=root: jobs never run as root" in proc.stderr


# Code a job may leave for whatever loads it: a sitecustomize.py that any Python started with
# the job's PYTHONPATH runs, and a library that any program started with the job's LD_PRELOAD
# runs; each writes the uid it ran as where the test can read it.
SITECUSTOMIZE = """
import os
with open(os.environ["EVIDENCE"], "a") as f:
    f.write(f"python uid {os.getuid()} euid {os.geteuid()}\\n")
"""
PRELOAD = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
__attribute__((constructor)) static void loaded(void) {
    const char *path = getenv("EVIDENCE");
    FILE *f = path ? fopen(path, "a") : NULL;
    if (f) { fprintf(f, "preload uid %d euid %d\n", (int)getuid(), (int)geteuid()); fclose(f); }
}
"""


def test_a_jobs_environment_runs_nothing_as_root(server: ServerProcess, open_root: Path) -> None:
    """The job's PYTHONPATH and LD_PRELOAD reach its worker, run as its team's account, and
    no process of the server's (its supervisor): what they load runs as the team alone."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler (cc) to build the preloaded library")
    bait = open_root / "bait"
    bait.mkdir()
    bait.chmod(0o1777)  # the evidence is written by whoever runs the bait
    (bait / "sitecustomize.py").write_text(SITECUSTOMIZE)
    (bait / "preload.c").write_text(PRELOAD)
    library = bait / "preload.so"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-o", str(library), str(bait / "preload.c")], check=True
    )
    for path in (bait / "sitecustomize.py", library):
        path.chmod(0o755)
    evidence = bait / "evidence"
    admin = Api(server)
    nlp = team(server, admin, "nils", "nlp")
    env = {"PYTHONPATH": str(bait), "LD_PRELOAD": str(library), "EVIDENCE": str(evidence)}
    nlp.submit(name="bait", queue="nlp", command=["python3", "-c", "pass"], env=env)
    assert nlp.until("bait", "succeeded")["state"] == "succeeded"
    lines = evidence.read_text().splitlines()
    # Both ran in the worker, as the team's account ...
    assert any(line.startswith("python uid ") for line in lines), lines
    assert any(line.startswith("preload uid ") for line in lines), lines
    uids = {int(word) for line in lines for word in line.split()[2::2]}
    # ... and nowhere else: not as root in the supervisor that started it.
    assert 0 not in uids and len(uids) == 1 and min(uids) >= DYNAMIC_UIDS[0], lines
    nlp.http.close()
    admin.http.close()


def test_a_workdir_the_account_may_not_enter_is_refused(
    server: ServerProcess, open_root: Path
) -> None:
    """A worker enters its workdir before it drops root: one the team's account could not
    reach by itself (the data directory, a directory under a closed one) fails the start,
    saying why, and runs nothing."""
    admin = Api(server)
    nlp = team(server, admin, "nils", "nlp")
    closed = open_root / "closed"
    (closed / "inside").mkdir(parents=True)
    closed.chmod(0o700)
    (closed / "inside").chmod(0o755)
    for name, workdir, why in [
        ("in-data", server.data_dir, f"it may not list and enter {server.data_dir}"),
        ("in-closed", closed / "inside", f"it may not pass through {closed} (mode 700"),
    ]:
        nlp.submit(name=name, queue="nlp", command=["sh", "-c", "ls"], workdir=str(workdir))
        done = nlp.until(name, "failed")
        assert done["state"] == "failed", done
        assert f"workdir {str(workdir)!r} is not for" in done["reason"], done
        assert why in done["reason"], done
    opened = open_root / "opened"
    opened.mkdir()
    opened.chmod(0o755)
    nlp.submit(name="in-open", queue="nlp", command=["pwd"], workdir=str(opened))
    assert nlp.until("in-open", "succeeded")["state"] == "succeeded"
    assert nlp.http.get("/api/v1/jobs/in-open/logs?worker=0").text.strip() == str(opened)
    nlp.http.close()
    admin.http.close()
