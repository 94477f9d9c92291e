"""The `toposched` command loads each sub-command's module only when it is used (issue 32).

What is imported is asserted here, never how long it takes: benchmarks/cli_start.py times it.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import json
import os
import subprocess
import sys
from typing import Any

import pytest
from typer._click import Context as ClickContext

from toposched.cli import main

# What a command that only talks to the server must not load.
HEAVY = (
    "numpy",
    "fastapi",
    "starlette",
    "uvicorn",
    "sqlalchemy",
    "pydantic",
    "matplotlib",
    "toposched.placement",
    "toposched.core",
    "toposched.perf",
    "toposched.sim",
    "toposched.server",
    "toposched.store",
    "toposched.dashboard",
    "toposched.executors",
    "toposched.discovery",
    "toposched.kube",
)

# Runs ARGS as `toposched` does in a fresh interpreter, against a server that is not there
# (port 1: refused at once, exit 6), and prints the modules it had loaded as it ended.
RUN = """
import atexit, json, sys
atexit.register(lambda: print(json.dumps(sorted(sys.modules)), file=sys.__stdout__))
sys.argv = ["toposched", *sys.argv[1:]]
from toposched.cli.main import main
main()
"""


def modules_after(*args: str) -> tuple[int, set[str]]:
    env = {**os.environ, "TOPOSCHED_URL": "http://127.0.0.1:1", "TOPOSCHED_TOKEN": "t"}
    done = subprocess.run(
        [sys.executable, "-c", RUN, *args], capture_output=True, text=True, env=env, timeout=60
    )
    return done.returncode, set(json.loads(done.stdout.splitlines()[-1]))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


@pytest.mark.parametrize(
    "args",
    [
        ("list",),
        ("get", "job-1"),
        ("logs", "job-1"),
        ("delete", "job-1"),
        ("explain", "job-1"),
        ("top", "node"),
        ("top", "job"),
        ("submit", "--name", "a", "--gpus", "1", "--cpus", "2", "--", "true"),
    ],
)
def test_a_server_command_loads_nothing_heavy(args: tuple[str, ...]) -> None:
    code, modules = modules_after(*args)
    assert code == 6  # it did try the server
    assert loaded(modules, HEAVY) == []
    # Only the job commands' module (and top's) of all the CLI's.
    commands = {m for m in modules if m.startswith("toposched.cli.") and m.endswith("_cmd")}
    assert commands <= {"toposched.cli.jobs_cmd", "toposched.cli.admin_cmd"}
    # The job file's reader and the quantities (toposched.topology) only for submit (and the
    # quantities' texts for top node's answer, which a server that is not there never gives).
    assert ("yaml" in modules) == (args[0] == "submit")
    assert ("toposched.topology" in modules) == (args[0] == "submit")


@pytest.mark.parametrize("args", [("list",), ("logs", "job-1"), ("top", "node")])
def test_a_plain_http_server_is_reached_without_httpx(
    args: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [n for n in os.environ if n.lower().endswith("_proxy")]:
        monkeypatch.delenv(name)  # a proxy is httpx's to go through
    code, modules = modules_after(*args)
    assert code == 6
    assert loaded(modules, ("httpx", "httpcore", "certifi")) == []
    assert "toposched.client.stdlib_wire" in modules


def test_the_job_commands_module_imports_nothing_heavy() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import json, sys, toposched.cli.jobs_cmd, toposched.cli.admin_cmd; "
            "print(json.dumps(sorted(sys.modules)))",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    modules = set(json.loads(done.stdout))
    assert loaded(modules, (*HEAVY, "yaml", "httpx", "toposched.topology")) == []


def test_the_roots_help_loads_no_command() -> None:
    code, modules = modules_after("--help")
    assert code == 0
    assert sorted(m for m in modules if m.startswith("toposched.cli.") and m.endswith("_cmd")) == []
    assert loaded(modules, (*HEAVY, "httpx")) == []


def help_of(group: Any) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.suppress(SystemExit):
        group.main(args=["--help"], prog_name="toposched", standalone_mode=False)
    return out.getvalue()


def test_the_listed_help_is_each_commands_own(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    listed = help_of(main.command())  # from COMMANDS, nothing loaded
    whole = main.command()
    commands = [whole.commands[name] for name in whole.commands]  # every one loaded
    assert help_of(whole) == listed
    for lazy in main.COMMANDS:
        command = whole.commands[lazy.name]
        own = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0]
        assert lazy.help == own.strip(), f"COMMANDS' help of {lazy.name} is not its own"
    names = [c.name for c in commands]
    assert names == list(whole.commands) and names[12:14] == ["completion", "topology"]
    assert len(names) == 20


def test_completion_lists_commands_without_loading_them() -> None:
    lazy, whole = main.command(), main.command()
    for name in whole.commands:
        whole.commands[name]  # every one loaded
    for incomplete in ("", "to", "s", "l", "x"):
        said = lazy.shell_complete(ClickContext(lazy), incomplete)
        own = whole.shell_complete(ClickContext(whole), incomplete)
        assert [(i.value, i.help) for i in said] == [(i.value, i.help) for i in own]
    assert [i.value for i in lazy.shell_complete(ClickContext(lazy), "to")] == [
        "topology",
        "top",
        "token",
    ]
    assert lazy.commands.loaded == {}


# Values as click hands them to typer, for each kind of parameter QuickValue answers.
SAMPLES: dict[Any, list[Any]] = {
    str: ["x", "", " a b ", "ü", "--", "0"],
    int: ["0", "-0", "7", "-3", "42", "007", "+1", " 1", "1_000", "1.0", "x", 0, 5, -1, True],
    float: ["0", "-0", "1.5", "-0.25", "2", "1e3", "nan", "inf", ".5", "5.", 1.5, 2, "x"],
    list[str]: [("a", "b"), ["a"], (), "a"],
}


def test_quick_values_are_typers_own() -> None:
    from typer._coercion import build_runtime_param

    group = main.command()
    checked = 0
    for name in group.commands:
        for command in main._walk(group.commands[name]):
            ctx = ClickContext(command)
            for param in command.params:
                if not isinstance(param._runtime_param, main.QuickValue):
                    continue
                typers = build_runtime_param(param.type_descriptor)
                values = [None, *SAMPLES.get(param.type_descriptor.annotation, [])]
                for value in values:
                    quick = main.plain_value(value, param)
                    if quick is main.NOT_PLAIN:
                        continue
                    theirs = typers.coerce(value, param=param, ctx=ctx)
                    assert (quick, type(quick)) == (theirs, type(theirs)), (param.name, value)
                    checked += 1
    assert checked > 200


def test_out_of_bounds_and_odd_numbers_go_to_typer() -> None:
    group = main.command()
    [limit] = [p for p in group.commands["list"].params if p.name == "limit"]
    assert main.plain_value("5", limit) == 5
    for value in ("0", "-1", "007", "1_000", " 5", "5.0", "x"):
        assert main.plain_value(value, limit) is main.NOT_PLAIN, value
