"""The quick path (toposched.cli.quick) calls each server command as typer would, and leaves
to typer every use it does not take plainly (issue 32)."""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

import pytest

from toposched.cli import app, quick
from toposched.cli.flags import AFTER_DASHES
from toposched.cli.jobs_cmd import Restart

# Plain uses of each quick command: the quick path must take each, as typer would.
PLAIN: dict[tuple[str, ...], list[list[str]]] = {
    ("list",): [
        [],
        ["--all"],
        ["-a"],
        ["--state", "running", "--state", "pending"],
        ["--queue=q", "--owner", "o"],
        ["--limit", "5", "--all"],
        ["--continue", "tok", "-w"],
        ["--json", "--server", "http://h:1"],
        ["--queue", "-"],
    ],
    ("get",): [
        ["job"],
        ["job", "--type", "tfjob"],
        ["--json", "job"],
        ["--server=http://h:1", "j"],
    ],
    ("logs",): [
        ["j"],
        ["j", "-f"],
        ["j", "--worker", "2", "--tail", "3"],
        ["-n", "0", "j", "--json"],
        ["j", "-w", "1", "--follow"],
    ],
    ("delete",): [["a"], ["a", "b", "--keep"], ["--json", "a", "b", "c"]],
    ("explain",): [["j"], ["j", "--json"]],
    ("submit",): [
        ["--", "true"],
        ["--name", "x", "--gpus", "2", "--workers", "4", "--", "sleep", "1"],
        ["tfjob", "--ps", "1", "--", "python", "t.py"],
        ["-f", "job.yaml"],
        ["--file=job.yaml", "--name", "y"],
        ["--restart", "on-failure", "--max-restarts", "2", "--", "true"],
        ["--command-hidden", "--", "x"],
        ["--command-visible", "--mixed-types", "--gang", "--interactive", "--", "x"],
        ["--env", "A=1", "-e", "B=2", "--gpu-type", "V100", "--selector", "k=v", "--", "x"],
        ["--checkpoint-every", "1.5", "--limit", "60", "--idle-below", "5", "--", "x"],
        ["--time", "1:00:00", "-t", "nan", "--", "x"],  # text: its own reader judges it
        ["--checkpoint-signal", "SIGUSR1", "--checkpoint-grace", "30", "--", "x"],
        ["--idle-after", "30m", "--idle-action", "stop", "--", "x"],
        ["notebook"],
        ["--", "--name", "x", "--help"],
        ["--gputopology", "false", "--image", "img", "--model", "vgg16", "--", "x"],
        ["--cpus", "500m", "--memory", "1Gi", "--gpu-memory", "16Gi", "--", "x"],
        ["--min-gpu-memory", "32Gi", "--gpumemory", "8Gi", "--", "x"],
        ["--after", "a:ok", "--after", "b", "--export", "ALL", "--workdir", "/w", "--", "x"],
        ["--queue", "q", "--priority", "7", "--locality", "rack", "--elastic", "1:4", "--", "x"],
        ["--json", "pytorch", "--", "x", "--", "y"],
        ["python train.py"],
    ],
    ("top", "node"): [[], ["--json"]],
    ("top", "job"): [[], ["--server", "http://h:1", "--json"]],
    ("whoami",): [[], ["--json"]],
}

# Uses the quick path leaves to typer (its help, its errors, what it parses its own way).
TYPERS: dict[tuple[str, ...], list[list[str]]] = {
    ("list",): [
        ["--help"],
        ["--limit", "0"],  # below its min: typer says so
        ["--limit", "x"],
        ["--limit", "007"],
        ["-aw"],
        ["--bogus"],
        ["--all=yes"],
        ["extra"],
        ["--state"],
        ["--", "x"],
    ],
    ("get",): [[], ["a", "b"], ["-h"], ["--type"]],
    ("logs",): [["j", "-n5"], ["j", "--worker", "-1"], ["j", "--tail", " 1"]],
    ("delete",): [[], ["--keep"]],
    ("submit",): [
        ["--priority", "-5", "--", "x"],  # a value that starts with `-`
        ["--restart", "sometimes", "--", "x"],
        ["--checkpoint-every", "nan", "--", "x"],
        ["--checkpoint-every", "1e3", "--", "x"],
        ["-f", "", "--", "x"],
        ["--help"],
    ],
}


def quick_command(words: tuple[str, ...]) -> Any:
    found = quick.QUICK[words]
    return getattr(importlib.import_module(found.module), found.attr)


def typers_call(
    monkeypatch: pytest.MonkeyPatch, words: tuple[str, ...], args: list[str]
) -> dict[str, Any]:
    """The keyword arguments the typer app calls the command with, for `args`."""
    found = quick.QUICK[words]
    seen: list[dict[str, Any]] = []
    function = quick_command(words)
    recorder = functools.wraps(function)(lambda **kwargs: seen.append(kwargs))
    monkeypatch.setattr(importlib.import_module(found.module), found.attr, recorder)
    group = app.command()
    command = group.commands[words[0]]
    if len(words) > 1:
        command = command.commands[words[1]]
    command.main(args=list(args), prog_name="toposched", standalone_mode=False)
    monkeypatch.undo()
    [kwargs] = seen
    return kwargs


def comparable(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The arguments, a context as what the command reads of it (its meta's command)."""
    out = dict(kwargs)
    if "ctx" in out:
        out["ctx"] = out["ctx"].meta.get(AFTER_DASHES)
    return {name: (value, type(value)) for name, value in out.items()}


@pytest.mark.parametrize(
    ("words", "args"), [(words, args) for words, uses in PLAIN.items() for args in uses]
)
def test_a_plain_use_is_called_as_typer_calls_it(
    monkeypatch: pytest.MonkeyPatch, words: tuple[str, ...], args: list[str]
) -> None:
    ours = quick.parse(quick_command(words), list(args), quick.QUICK[words].dashes)
    assert comparable(ours) == comparable(typers_call(monkeypatch, words, args))


@pytest.mark.parametrize(
    ("words", "args"), [(words, args) for words, uses in TYPERS.items() for args in uses]
)
def test_any_other_use_is_left_to_typer(words: tuple[str, ...], args: list[str]) -> None:
    with pytest.raises(quick.NotPlain):
        quick.parse(quick_command(words), list(args), quick.QUICK[words].dashes)


def test_the_quick_parser_knows_exactly_typers_flags() -> None:
    group = app.command()
    for words in quick.QUICK:
        command = group.commands[words[0]]
        if len(words) > 1:
            command = command.commands[words[1]]
        theirs = {
            flag
            for param in command.params
            if param.param_type_name == "option"
            for flag in (*param.opts, *param.secondary_opts)
        }
        flags, arguments = quick.parameters(quick.declared(quick_command(words)))
        assert set(flags) == theirs, words
        args = [p.name for p in command.params if p.param_type_name == "argument"]
        assert [a.name for a in arguments] == args, words


def test_the_quick_commands_are_the_apps_server_commands() -> None:
    group = app.command()
    for words in quick.QUICK:
        command = group.commands[words[0]]
        if len(words) > 1:
            assert words[1] in command.commands, words
    assert {words[0] for words in quick.QUICK} >= {"list", "get", "submit", "logs", "delete"}
    assert ("top", "node") in quick.QUICK and ("top", "job") in quick.QUICK


def test_values_are_typers_types() -> None:
    submit = quick_command(("submit",))
    words = ["-f", "j.yaml", "--restart", "never", "--checkpoint-every", "2", "--limit", "2"]
    said = quick.parse(submit, words, True)
    assert said["file"] == Path("j.yaml") and said["restart"] is Restart.NEVER
    assert said["checkpoint_every"] == 2.0 and type(said["checkpoint_every"]) is float
    assert said["time"] == "2"  # Slurm's minutes, read by its own reader (submitflags)


def test_completion_and_non_quick_commands_go_to_typer(monkeypatch: pytest.MonkeyPatch) -> None:
    assert quick.find(["top"]) is None and quick.find(["node", "list"]) is None
    assert quick.find(["place"]) is None and quick.find([]) is None
    monkeypatch.setenv(quick.COMPLETE_VAR, "complete_bash")
    assert quick.run(["list"]) is False
