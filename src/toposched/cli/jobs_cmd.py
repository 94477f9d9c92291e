"""`toposched submit | get | list | logs | delete | explain`: jobs on a toposched server.

Exit codes of every server command: 0 ok; 1 the server failed; 2 bad input (here or a 422);
3 not found; 4 not allowed (401/403); 5 conflict (409); 6 the server is not reachable.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from toposched.cli.flags import AFTER_DASHES, Arg, CommandContext, Opt, with_options
from toposched.cli.jobview import jobs_table, print_job, speed_text, state_text
from toposched.cli.output import EXIT_BAD_INPUT, console, emit_json, escape, fail
from toposched.cli.submitflags import choices, field_flags, given, options, said_as
from toposched.client.http import (
    UNREACHABLE,
    ApiError,
    BadToken,
    Client,
    ConfigError,
    JobFilters,
    is_local,
)
from toposched.common import jobfields
from toposched.common.frameworks import KindError, kind_of

if TYPE_CHECKING:
    import typer

    from toposched.client.jobfile import JobFile

# The job file's reader (PyYAML) and the quantities (toposched.topology) are imported by the
# functions of `submit` that use them: `list`, `get`, `logs` and `delete` start without them.

EXIT_SERVER_ERROR = 1
EXIT_NOT_FOUND = 3
EXIT_NOT_ALLOWED = 4
EXIT_CONFLICT = 5
EXIT_UNREACHABLE = 6

STATUS_EXIT = {
    UNREACHABLE: EXIT_UNREACHABLE,
    400: EXIT_BAD_INPUT,
    401: EXIT_NOT_ALLOWED,
    403: EXIT_NOT_ALLOWED,
    404: EXIT_NOT_FOUND,
    409: EXIT_CONFLICT,
    413: EXIT_BAD_INPUT,
    422: EXIT_BAD_INPUT,
}

# Every server command takes these two.
SERVER = Opt(
    None,
    "--server",
    metavar="URL",
    help="The toposched server (default: $TOPOSCHED_URL, else http://127.0.0.1:8080).",
)
JSON = Opt(False, "--json", help="Print JSON (the server's answer) instead of text.")


def exit_code(err: ApiError) -> int:
    return STATUS_EXIT.get(err.status, EXIT_SERVER_ERROR)


def die(message: str, code: int) -> NoReturn:
    """`error: ...` on stderr, one such line per line of `message`, and exit `code`."""
    *first, last = message.splitlines() or [message]
    for line in first:
        sys.stderr.write(f"error: {line}\n")
    fail(last, code)


def _retrying(line: str) -> None:
    """A retry the client makes (the server busy, or an answer lost), said on stderr."""
    sys.stderr.write(f"toposched: {line}\n")


@contextmanager
def api(server: str | None) -> Iterator[Client]:
    """A client of the server named by --server / $TOPOSCHED_URL; its errors end the command
    with the documented exit code."""
    try:
        client = Client.from_env(server, on_retry=_retrying)
    except BadToken as err:
        fail(str(err), EXIT_NOT_ALLOWED)
    except ConfigError as err:
        fail(str(err), EXIT_BAD_INPUT)
    try:
        yield client
    except ApiError as err:
        die(err.message, exit_code(err))
    except ConfigError as err:
        fail(str(err), EXIT_BAD_INPUT)
    finally:
        client.close()


# ---------------------------------------------------------------------- formatting


FIELD_FLAGS = field_flags()
# The choices of --restart (typer's enum of them).
Restart = choices(jobfields.BY_NAME["restart"])


def _workdir(spec: dict[str, Any], url: str) -> None:
    """A job on this machine's server runs where it was submitted from, as with sbatch;
    relative directories are taken from here. A remote server gets what was given."""
    if not is_local(url):
        return
    workdir = spec.get("workdir")
    spec["workdir"] = os.path.abspath(workdir) if workdir else os.getcwd()


# What `submit` sends of the submitter's environment to a server on this machine unless
# --export says otherwise: what chooses the programs and libraries a job runs, no secrets.
DEFAULT_EXPORT = ("PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "CONDA_DEFAULT_ENV", "PYTHONPATH")
# Never sent, even with ALL: a job holding it could act as its submitter on the server.
NEVER_EXPORTED = frozenset({"TOPOSCHED_TOKEN"})
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _export(spec: dict[str, Any], url: str, export: str | None) -> None:
    """Add the submitter's variables that --export names (or the default) to the job's env,
    as sbatch does; what env already holds (--env, the job file) is kept."""
    said = (export or "").strip()
    if export is None:
        # An image has its own programs: this machine's PATH would hide them.
        local = is_local(url) and not spec.get("image")
        names = [n for n in DEFAULT_EXPORT if n in os.environ] if local else []
    elif said.upper() == "NONE":
        names = []
    elif said.upper() == "ALL":
        names = sorted(n for n in os.environ if n not in NEVER_EXPORTED and ENV_NAME.match(n))
    else:
        names = [n.strip() for n in said.split(",")]
        bad = [n for n in names if not ENV_NAME.match(n)]
        if bad:
            fail(f"--export: {bad[0]!r} is not a variable name (NAMES, ALL or NONE)")
        unset = [n for n in names if n not in os.environ]
        if unset:
            fail(f"--export: {', '.join(unset)} is not set in your environment")
    env = dict(spec.get("env") or {})
    sent = [n for n in names if n not in env]
    if not sent:
        return
    env.update({n: os.environ[n] for n in sent})
    spec["env"] = env
    spec["exported"] = sent


def _refusal(err: ApiError, jobfile: JobFile | None, overridden: set[str]) -> str:
    """A 422's fields in the user's words: the job file's field and line when the file gave
    it, else the flag that gave it (`--workers must be at least 1`)."""
    if err.status != 422 or not err.fields:
        return err.message
    lines = []
    for loc, msg in err.fields:
        field = loc.removeprefix("body.")
        top = field.split(".")[0]
        from_file = jobfile is not None and top not in overridden
        line = jobfile.line_of(loc) if jobfile is not None and from_file else None
        if jobfile is not None and line is not None:
            lines.append(f"{field}: {msg} ({jobfile.path}:{line})")
        elif field in SUBMIT_FLAGS or top in SUBMIT_FLAGS:
            lines.append(flag_words(SUBMIT_FLAGS.get(field) or SUBMIT_FLAGS[top], msg))
        else:
            lines.append(f"{loc}: {msg}" if loc else msg)
    return "\n".join(lines)


# What gives each field of the API's JobSubmit on `submit`'s command line: its flag, else
# these.
SUBMIT_FLAGS = {
    **said_as(FIELD_FLAGS),
    "kind": "KIND",
    "command": "the command",
    "exported": "--export",
    "checkpoint": "--checkpoint-signal",
    "idle": "--idle-after",
}

# Pydantic's bounds, said of a flag: `Input should be greater than or equal to 1`.
BOUNDS = (
    ("Input should be greater than or equal to ", "must be at least "),
    ("Input should be less than or equal to ", "must be at most "),
    ("Input should be greater than ", "must be more than "),
    ("Input should be less than ", "must be less than "),
    ("Input should be ", "must be "),
)


def flag_words(flag: str, msg: str) -> str:
    """`--workers must be at least 1` for a bound; `--model: unknown model ...` otherwise."""
    for pydantic, ours in BOUNDS:
        if msg.startswith(pydantic):
            return f"{flag} {ours}{msg.removeprefix(pydantic)}"
    return f"{flag}: {msg}"


SUBMIT_USAGE = "toposched submit [KIND] [OPTIONS] -- COMMAND..."
# `submit notebook`: an interactive session that runs Jupyter unless given a command.
NOTEBOOK = "notebook"
NOTEBOOK_COMMAND = (
    "jupyter",
    "lab",
    "--no-browser",
    "--ip=0.0.0.0",
    "--port=$(TOPOSCHED_PORT)",
)


def kind_and_command(
    words: list[str], command: list[str] | None, usage: str = SUBMIT_USAGE
) -> tuple[str | None, list[str] | None]:
    """The job kind among the words before `--` (at most that one word), and the command
    after it: one word is a command line split as a shell would (as a job file's string).
    Without `--`, Arena's form: the command line quoted as one word after the kind (or, with
    no kind, a quoted line of several words). Anything else before `--` is refused, showing
    `usage`."""
    from toposched.client.jobfile import split_command

    kind: str | None = None
    rest = list(words)
    if rest:
        try:
            kind = kind_of(rest[0]).value
            rest = rest[1:]
        except KindError as err:
            if command is not None and len(rest) == 1:
                fail(f"{err}; the command goes after `--`: {usage}", EXIT_BAD_INPUT)
    if command is None and len(rest) == 1 and (kind is not None or len(rest[0].split()) > 1):
        command, rest = rest, []
    if rest:
        shown = shlex.join(rest)
        fail(
            f"{shown!r} is not an option of submit: the command to run goes after `--`, "
            f"options before it: {usage} (for example: {usage.split(' [KIND]')[0]} "
            f"--gpus 1 -- {shown})",
            EXIT_BAD_INPUT,
        )
    if command is not None and len(command) == 1:
        try:
            command = split_command(command[0])
        except ValueError as err:
            fail(f"the command: {err}", EXIT_BAD_INPUT)
    return kind, command or None


# The words before `--` of `submit` and `kube submit`: at most the job kind (kind_and_command).
KIND_WORD = Arg(
    None,
    metavar="[KIND]",
    help="The job kind: pytorch (the default), tensorflow or mpi, or Arena's pytorchjob, tfjob, "
    "mpijob; or notebook, an interactive Jupyter session (--interactive). The command goes "
    "after `--`.",
    show_default=False,
)


@with_options(options(FIELD_FLAGS))
def submit(
    ctx: CommandContext,
    words: list[str] = KIND_WORD,
    file: Path = Opt(
        None, "--file", "-f", metavar="JOB.yaml", help="Job spec file; flags override its fields."
    ),
    gang: bool = Opt(
        False,
        "--gang",
        help="Accepted for Arena's sake and changes nothing: every job is a gang, scheduled "
        "whole (all its workers start together, or none does).",
    ),
    export: str = Opt(
        None,
        "--export",
        metavar="NAMES|ALL|NONE",
        help="Which of your environment variables the workers get, as sbatch's --export: "
        "comma-separated names, ALL (but TOPOSCHED_TOKEN) or NONE. Default, for this "
        "machine's server: PATH, VIRTUAL_ENV, CONDA_PREFIX, CONDA_DEFAULT_ENV and PYTHONPATH "
        "where set (your virtualenv's python runs the job); for a remote one, none. --env "
        "and the job file's env win over it.",
    ),
    server: str = SERVER,
    as_json: bool = JSON,
    **fields: Any,
) -> None:
    """Submit a job: a gang of WORKERS processes with GPUS GPUs each.

    The command goes after `--`, options before it; any other word before `--` is refused.

    One word after `--` is split as a shell would, as a job file's `command:` string is.

    Example: toposched submit tfjob --name tf1 --workers 2 --gpus 1 --ps 1 -- python train.py
    """
    from toposched.client.jobfile import JobFileError, load_job_file, merge_spec

    del gang  # every job is a gang: the flag is only accepted
    words = list(words or [])
    notebook = bool(words) and words[0] == NOTEBOOK
    if notebook:
        words = words[1:]
    kind, command = kind_and_command(words, ctx.meta.get(AFTER_DASHES))
    if notebook and command is None and file is None:
        command = list(NOTEBOOK_COMMAND)
    overrides = given(FIELD_FLAGS, fields)
    if notebook:
        overrides["interactive"] = True
    overrides.update({k: v for k, v in (("kind", kind), ("command", command)) if v is not None})
    jobfile: JobFile | None = None
    base: dict[str, Any] = {}
    if file is not None:
        try:
            jobfile = load_job_file(file)
        except JobFileError as err:
            fail(str(err), EXIT_BAD_INPUT)
        base = jobfile.spec
    spec = merge_spec(base, overrides)
    if spec.get("idle") and "after" not in spec["idle"]:
        fail("--idle-below and --idle-action need --idle-after (how long)", EXIT_BAD_INPUT)
    if not spec.get("command"):
        where = f" or as `command:` in {file}" if file is not None else " (or -f JOB.yaml)"
        fail(f"no command to run: give it after `--`{where}", EXIT_BAD_INPUT)
    with api(server) as client:
        _workdir(spec, client.url)
        _export(spec, client.url, export)
        try:
            job = client.submit(spec)
        except ApiError as err:
            die(_refusal(err, jobfile, set(overrides)), exit_code(err))
    if as_json:
        emit_json(job)
        return
    console.print(
        f"submitted [bold]{escape(job['name'])}[/] to queue {escape(job['queue'])}: "
        f"{state_text(job['state'])} ({escape(job['reason'])})"
    )
    if job.get("predicted"):
        console.print(f"  {speed_text(job)}")


# ---------------------------------------------------------------------- the others


def get(
    name: str = Arg(..., help="Job name."),
    kind: str = Opt(
        None,
        "--type",
        metavar="KIND",
        help="Arena's check: the job must be of this kind (pytorchjob, tfjob, mpijob, or "
        "pytorch, tensorflow, mpi), else it is not found.",
    ),
    server: str = SERVER,
    as_json: bool = JSON,
) -> None:
    """Show a job: state and why, placement (worker, node, GPUs), history."""
    wanted = None
    if kind is not None:
        try:
            wanted = kind_of(kind).value
        except KindError as err:
            fail(f"--type: {err}", EXIT_BAD_INPUT)
    with api(server) as client:
        job = client.job(name)
        url = client.url
    actual = (job.get("spec") or {}).get("kind") or "pytorch"
    if wanted is not None and actual != wanted:
        fail(f"no {wanted} job named {name!r} ({name} is a {actual} job)", EXIT_NOT_FOUND)
    if as_json:
        emit_json(job)
    else:
        print_job(job, url)


def list_jobs(
    all_jobs: bool = Opt(False, "--all", "-a", help="Include ended jobs, and show every page."),
    state: list[str] = Opt(
        None, "--state", help="Only jobs in this state; repeatable (pending, running, ...)."
    ),
    queue: str = Opt(None, "--queue", help="Only jobs of this queue."),
    owner: str = Opt(None, "--owner", help="Only jobs of this user."),
    limit: int = Opt(
        None,
        "--limit",
        min=1,
        help="Jobs per page (server default 100, at most 1000); with --all, at most this "
        "many jobs in all.",
    ),
    continue_: str = Opt(
        None,
        "--continue",
        metavar="TOKEN",
        help="Start after the page that printed this token (give the same filters).",
    ),
    wide: bool = Opt(
        False,
        "--wide",
        "-w",
        help="Also the ring of each job's GPUs, its model and the speed the performance "
        "model predicts there (share of the best placement's).",
    ),
    server: str = SERVER,
    as_json: bool = JSON,
) -> None:
    """List jobs in submission order, one page: the live ones (pending, running, stopping)
    unless --all or --state. --all shows ended jobs too, and every page."""
    filters = JobFilters(states=state, queue=queue, owner=owner, all=all_jobs)
    with api(server) as client:
        if all_jobs:
            size = min(limit or MAX_PAGE, MAX_PAGE)
            walk = client.all_jobs(page_size=size, continue_=continue_, **filters)
            jobs, more = list(itertools.islice(walk, limit)), None
        else:
            page = client.job_page(limit=limit, continue_=continue_, **filters)
            jobs, more = page.jobs, page.continue_
    if as_json:
        emit_json({"jobs": jobs, "metadata": {"continue": more}})
        return
    if not jobs:
        hint = "" if all_jobs or state else " (--all shows ended ones too)"
        console.print(f"no jobs{hint}")
        return
    console.print(jobs_table(jobs, wide=wide))
    if more is not None:
        sys.stderr.write(f"more jobs: {_next_command(more, limit, state, queue, owner)}\n")


# The server's largest page.
MAX_PAGE = 1000


def _next_command(
    token: str, limit: int | None, state: list[str] | None, queue: str | None, owner: str | None
) -> str:
    """The command that shows the next page, with the filters of this one."""
    words = ["toposched", "list"]
    words += [word for value in state or [] for word in ("--state", value)]
    for flag, value in (("--queue", queue), ("--owner", owner), ("--limit", limit)):
        if value is not None:
            words += [flag, str(value)]
    words += ["--continue", token]
    return f"{shlex.join(words)} (or --all for every page)"


def logs(
    name: str = Arg(..., help="Job name."),
    follow: bool = Opt(
        False, "--follow", "-f", help="Keep printing until the workers of this attempt end."
    ),
    worker: int = Opt(0, "--worker", "-w", min=0, help="Worker rank (default 0)."),
    tail: int = Opt(
        None,
        "--tail",
        "-n",
        min=0,
        metavar="N",
        help="Only the last N lines (then, with --follow, what comes after).",
    ),
    server: str = SERVER,
    as_json: bool = Opt(
        False, "--json", help='One JSON object per line: {"job", "worker", "line"}.'
    ),
) -> None:
    """Print a worker's output (stdout and stderr) of the job's latest attempt."""
    with api(server) as client:
        chunks = client.logs(name, worker=worker, follow=follow, tail=tail)
        try:
            if as_json:
                _json_lines(name, worker, chunks)
            else:
                out = sys.stdout.buffer
                for chunk in chunks:
                    out.write(chunk)
                    out.flush()
        except BrokenPipeError:
            # The reader went away (| head): not an error; keep Python from complaining at exit.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except KeyboardInterrupt:
            raise SystemExit(130) from None


def _json_lines(name: str, worker: int, chunks: Iterator[bytes]) -> None:
    pending = b""
    for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        for line in lines:
            text = line.decode("utf-8", errors="replace")
            sys.stdout.write(json.dumps({"job": name, "worker": worker, "line": text}) + "\n")
        sys.stdout.flush()
    if pending:
        text = pending.decode("utf-8", errors="replace")
        sys.stdout.write(json.dumps({"job": name, "worker": worker, "line": text}) + "\n")


def delete(
    names: list[str] = Arg(..., metavar="NAME...", help="Job names."),
    keep: bool = Opt(
        False,
        "--keep",
        help="Only cancel a live job: it stays (state, logs) until deleted again.",
    ),
    server: str = SERVER,
    as_json: bool = Opt(
        False, "--json", help="Print each job as the server answers, one JSON object a line."
    ),
) -> None:
    """Delete jobs, as kubectl and Arena do: each is gone once it has stopped.

    A waiting job ends and goes at once; a running one gets its stop signal (its checkpoint
    signal, else SIGTERM), then SIGKILL after its grace time, and goes once its workers have
    stopped. A job that is gone has a free name; its record is kept, its logs are not.
    Each job is tried; the exit status is that of the first that failed."""
    failed: list[tuple[str, ApiError]] = []
    with api(server) as client:
        for name in names:
            try:
                job = client.cancel(name, delete_when_ended=not keep)
            except ApiError as err:
                for line in err.message.splitlines():
                    sys.stderr.write(f"error: {name}: {line}\n")
                failed.append((name, err))
                continue
            if as_json:
                emit_json(job)
            else:
                _deleted(job, keep)
    if failed:
        if len(names) > 1:
            said = ", ".join(name for name, _ in failed)
            sys.stderr.write(f"error: not deleted: {said} ({len(failed)} of {len(names)})\n")
        raise SystemExit(exit_code(failed[0][1]))


def _deleted(job: dict[str, Any], keep: bool) -> None:
    name = escape(job["name"])
    if job.get("deleted"):
        console.print(f"deleted [bold]{name}[/] ({state_text(job['state'])}): its name is free")
    elif job["state"] == "stopping" and keep:
        console.print(f"cancelling [bold]{name}[/]: {state_text('stopping')} its workers")
    elif job["state"] == "stopping":
        console.print(
            f"deleting [bold]{name}[/]: {state_text('stopping')} its workers; "
            "its name is free once they have stopped"
        )
    elif job["state"] == "cancelled":
        console.print(f"cancelled [bold]{name}[/]")
    else:
        console.print(f"{name}: {state_text(job['state'])} ({escape(job['reason'])})")


def explain(
    name: str = Arg(..., help="Job name."),
    server: str = SERVER,
    as_json: bool = JSON,
) -> None:
    """Why a job waits, or why it runs where it runs."""
    with api(server) as client:
        found = client.explain(name)
    if as_json:
        emit_json(found)
    else:
        console.print(escape(found["text"]))


def register(app: typer.Typer) -> None:
    from toposched.cli.flags import typer_function
    from toposched.cli.submit_command import SubmitCommand

    app.command("submit", cls=SubmitCommand)(typer_function(submit))
    app.command("get")(typer_function(get))
    app.command("list")(typer_function(list_jobs))
    app.command("logs")(typer_function(logs))
    app.command("delete")(typer_function(delete))
    app.command("explain")(typer_function(explain))
