"""`toposched kube submit | list | get | explain | logs | delete | top node`: jobs on a cluster.

The same job file and flags as `toposched submit`, and the same output and `--json` as the
standalone commands; the kubeconfig says which cluster. Exit codes: 0 ok; 1 the cluster or the
scheduler failed; 2 bad input (nothing made); 3 no such job or pod.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.markup import escape

from toposched.cli.flags import AFTER_DASHES
from toposched.cli.jobs_cmd import KIND_WORD, kind_and_command
from toposched.cli.output import EXIT_BAD_INPUT, console, emit_json, fail
from toposched.client.jobfile import JobFileError, load_job_file, merge_spec, parse_env_pairs
from toposched.common.frameworks import KindError, kind_of

EXIT_CLUSTER = 1
EXIT_NOT_FOUND = 3
KUBECONFIG = typer.Option(
    None, "--kubeconfig", help="A kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)."
)
NAMESPACE = typer.Option(
    None,
    "--namespace",
    "-n",
    help="The job's namespace (default: the kubeconfig context's, as kubectl, else default).",
)
SCHEDULER_NS = typer.Option(
    "toposched-system", "--scheduler-namespace", help="Where the scheduler's Service is."
)
JSON = typer.Option(False, "--json", help="Print JSON (the scheduler's answer) instead of text.")
# Fields of a job file that have no meaning on a cluster yet: refused, never silently dropped.
LOCAL_ONLY = ("elastic", "checkpoint", "restart", "max_restarts", "limit_s", "workdir", "priority")


@contextmanager
def cluster(kubeconfig: Path | None) -> Iterator[Any]:
    """The cluster's API; its errors end the command with a message and exit code 1 (3 for
    something that does not exist)."""
    from toposched.kube.api import ApiError, KubeApi
    from toposched.kube.reads import NotFound

    try:
        api = KubeApi.connect(str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG"))
    except Exception as err:  # a missing or unreadable kubeconfig
        fail(f"cannot use the kubeconfig: {err}", EXIT_BAD_INPUT)
    try:
        yield api
    except NotFound as err:
        fail(str(err), EXIT_NOT_FOUND)
    except ApiError as err:
        fail(f"the cluster answered {err}", EXIT_NOT_FOUND if err.status == 404 else EXIT_CLUSTER)


def job_namespace(namespace: str | None, kubeconfig: Path | None) -> str:
    """The namespace given, else the one the kubeconfig's current context names."""
    if namespace:
        return namespace
    from toposched.kube.api import KubeApi

    return KubeApi.context_namespace(
        str(kubeconfig) if kubeconfig else os.environ.get("KUBECONFIG")
    )


@contextmanager
def scheduler(kubeconfig: Path | None, namespace: str) -> Iterator[Any]:
    """The scheduler's read API (`SchedulerApi`) behind its Service, through `cluster`."""
    from toposched.kube.reads import SchedulerApi

    with cluster(kubeconfig) as api:
        yield SchedulerApi(api, namespace)


KUBE_SUBMIT_USAGE = "toposched kube submit [KIND] [OPTIONS] -- COMMAND..."


def submit(
    ctx: typer.Context,
    words: list[str] = KIND_WORD,
    file: Path | None = typer.Option(None, "--file", "-f", help="A job file (YAML)."),
    image: str = typer.Option(..., "--image", help="The container image of every member."),
    kind_option: str | None = typer.Option(
        None,
        "--kind",
        help="The job kind, as the KIND word says it (kept for scripts that pass it so).",
    ),
    name: str | None = typer.Option(None, "--name", help="Job name (default: the file's)."),
    workers: int | None = typer.Option(None, "--workers", help="GPU workers."),
    gpus: int | None = typer.Option(None, "--gpus", help="GPUs per worker."),
    ps: int | None = typer.Option(None, "--ps", help="Parameter servers (tensorflow; no GPU)."),
    queue: str | None = typer.Option(None, "--queue", help="Queue (default: the namespace)."),
    priority_class: str | None = typer.Option(None, "--priority-class", help="A PriorityClass."),
    locality: str | None = typer.Option(None, "--locality", help="node, rack, any, node,rack@600"),
    env: list[str] = typer.Option([], "--env", "-e", help="KEY=VALUE; repeatable."),
    accept_unknown_topology: bool = typer.Option(
        False, "--accept-unknown-topology", help="May run on nodes whose topology is unknown."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        help="What it trains, by the performance catalog's name (placement by the model).",
    ),
    namespace: str | None = NAMESPACE,
    kubeconfig: Path | None = KUBECONFIG,
    as_json: bool = JSON,
) -> None:
    """Make a job on the cluster: a PodGroup, a headless Service and one pod per member.

    Example: toposched kube submit tfjob --image IMG --workers 4 --gpus 2 --ps 1 --
    python train.py"""
    namespace = job_namespace(namespace, kubeconfig)
    from toposched.kube.submit import KubeJob, SubmitError, create

    word, command = kind_and_command(words or [], ctx.meta.get(AFTER_DASHES), KUBE_SUBMIT_USAGE)
    spec = _spec(file, name, workers, gpus, locality, env, command)
    try:
        kinds = {kind_of(k) for k in (word, kind_option) if k is not None}
        if len(kinds) > 1:
            raise KindError(f"two job kinds given: {word} and --kind {kind_option}")
        kind = kinds.pop() if kinds else kind_of(spec.get("kind") or "pytorch")
        job = KubeJob(
            name=spec.get("name") or "",
            image=image,
            command=spec.get("command") or [],
            kind=kind,
            namespace=namespace,
            workers=spec.get("workers", 1),
            gpus=spec.get("gpus", 1),
            ps=spec.get("ps", 0) if ps is None else ps,
            env=spec.get("env") or {},
            queue=queue or spec.get("queue"),
            priority_class=priority_class,
            locality=spec.get("locality") or "any",
            accept_unknown_topology=accept_unknown_topology,
            model=model,
        )
        job.check()
    except (KindError, SubmitError) as err:
        fail(str(err), EXIT_BAD_INPUT)
    with cluster(kubeconfig) as api:
        made = create(api, job)
    if as_json:
        emit_json({"name": job.name, "namespace": namespace, "objects": made})
        return
    console.print(
        f"submitted [bold]{escape(job.name)}[/] to {escape(namespace)}: {len(made)} objects"
    )


def _spec(
    file: Path | None,
    name: str | None,
    workers: int | None,
    gpus: int | None,
    locality: str | None,
    env: list[str],
    command: list[str] | None,
) -> dict[str, Any]:
    """The job file's fields with the flags on top; fields a cluster cannot honour refused."""
    base: dict[str, Any] = {}
    if file is not None:
        try:
            base = load_job_file(file).spec
        except JobFileError as err:
            fail(str(err), EXIT_BAD_INPUT)
        unusable = [key for key in LOCAL_ONLY if key in base]
        if unusable:
            fail(
                f"{file}: {', '.join(unusable)}: not available on a cluster yet "
                "(priority comes from --priority-class)",
                EXIT_BAD_INPUT,
            )
    given = {"name": name, "workers": workers, "gpus": gpus, "locality": locality}
    overrides: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if command:
        overrides["command"] = list(command)
    if env:
        try:
            overrides["env"] = parse_env_pairs(env)
        except ValueError as err:
            fail(f"--env: {err}", EXIT_BAD_INPUT)
    spec = merge_spec(base, overrides)
    if not spec.get("name"):
        fail("a job on a cluster needs a name: --name or `name:` in the job file", EXIT_BAD_INPUT)
    return spec


def list_jobs(
    all_jobs: bool = typer.Option(False, "--all", "-a", help="Include ended jobs."),
    queue: str | None = typer.Option(None, "--queue", help="Only jobs of this queue."),
    scheduler_namespace: str = SCHEDULER_NS,
    kubeconfig: Path | None = KUBECONFIG,
    as_json: bool = JSON,
) -> None:
    """List the scheduler's jobs: the live ones unless --all."""
    from toposched.cli.jobview import jobs_table

    with scheduler(kubeconfig, scheduler_namespace) as read:
        jobs = read.jobs(all_jobs, queue)
    if as_json:
        emit_json({"jobs": jobs, "metadata": {"continue": None}})  # list --all --json's shape
    elif not jobs:
        console.print("no jobs" + ("" if all_jobs else " (--all shows ended ones too)"))
    else:
        console.print(jobs_table(jobs))


def get(
    name: str = typer.Argument(..., help="Job name (its PodGroup's, or namespace/name#N)."),
    namespace: str | None = NAMESPACE,
    scheduler_namespace: str = SCHEDULER_NS,
    kubeconfig: Path | None = KUBECONFIG,
    as_json: bool = JSON,
) -> None:
    """Show a job: state and why, placement (worker, node, GPUs), history."""
    namespace = job_namespace(namespace, kubeconfig)
    from toposched.cli.jobview import print_job

    with scheduler(kubeconfig, scheduler_namespace) as read:
        job = read.job(namespace, name)
    if as_json:
        emit_json(job)
    else:
        print_job(job)


def explain(
    name: str = typer.Argument(..., help="Job name."),
    namespace: str | None = NAMESPACE,
    scheduler_namespace: str = SCHEDULER_NS,
    kubeconfig: Path | None = KUBECONFIG,
    as_json: bool = JSON,
) -> None:
    """Why a job waits, or why it runs where it runs."""
    namespace = job_namespace(namespace, kubeconfig)
    with scheduler(kubeconfig, scheduler_namespace) as read:
        answer = read.explain(namespace, name)
    if as_json:
        emit_json(answer)
    else:
        console.print(escape(answer["text"]))


def logs(
    name: str = typer.Argument(..., help="Job name."),
    worker: int = typer.Option(0, "--worker", "-w", min=0, help="Worker rank (default 0)."),
    role: str = typer.Option("worker", "--role", help="worker, ps or launcher."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Until the container ends."),
    tail: int | None = typer.Option(None, "--tail", min=0, help="Only the last N lines."),
    namespace: str | None = NAMESPACE,
    kubeconfig: Path | None = KUBECONFIG,
) -> None:
    """Print one member's output, through the API server (`pods/log`)."""
    namespace = job_namespace(namespace, kubeconfig)
    from toposched.kube.reads import pod_log

    with cluster(kubeconfig) as api:
        try:
            for chunk in pod_log(api, namespace, f"{name}-{role}-{worker}", follow, tail):
                sys.stdout.buffer.write(chunk)
                sys.stdout.buffer.flush()
        except BrokenPipeError:  # the reader went away (| head): not an error
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def delete(
    name: str = typer.Argument(..., help="Job name."),
    namespace: str | None = NAMESPACE,
    kubeconfig: Path | None = KUBECONFIG,
    as_json: bool = JSON,
) -> None:
    """Delete every object of the job (pods, Service, hostfile, PodGroup)."""
    namespace = job_namespace(namespace, kubeconfig)
    from toposched.kube.reads import NotFound
    from toposched.kube.submit import delete as delete_job

    with cluster(kubeconfig) as api:
        gone = delete_job(api, namespace, name)
        if not gone:
            raise NotFound(f"no job {name!r} in namespace {namespace!r}")
    if as_json:
        emit_json({"name": name, "namespace": namespace, "deleted": gone})
    else:
        console.print(f"deleted [bold]{escape(name)}[/]: {len(gone)} objects")


def top_node(
    scheduler_namespace: str = SCHEDULER_NS,
    kubeconfig: Path | None = KUBECONFIG,
    as_json: bool = JSON,
) -> None:
    """Each node's GPU map, as the scheduler sees it: which job holds each GPU, and the links."""
    from toposched.cli.admin_cmd import print_nodes

    with scheduler(kubeconfig, scheduler_namespace) as read:
        nodes = read.nodes()
    if as_json:
        emit_json({"nodes": nodes})
    else:
        print_nodes(nodes)
