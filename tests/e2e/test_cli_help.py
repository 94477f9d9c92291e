"""Every command's help reads as words to type (no Python types), and shells can complete."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.e2e.conftest import Result
from toposched.cli.main import command

# What typer shows when a parameter names no metavar: `<bool>`, `<int range>`,
# `<list[str]>`, and `{name}` for a required argument in the usage line.
PLACEHOLDER = re.compile(r"<[a-z_]+[a-z_\[\], |]*>|\{[a-z_]+\}", re.IGNORECASE)


def commands(cmd: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    yield path
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from commands(sub, (*path, name))


def help_text(path: tuple[str, ...]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        command().main(args=[*path, "--help"], prog_name="toposched", standalone_mode=False)
    return out.getvalue()


def test_no_help_shows_a_type_placeholder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")  # one line per option: nothing cut
    paths = list(commands(command()))
    assert ("submit",) in paths and ("kube", "submit") in paths and len(paths) > 30
    found = {}
    for path in paths:
        text = help_text(path)
        assert "Usage: toposched" in text, path
        hits = PLACEHOLDER.findall(text)
        if hits:
            found[" ".join(path) or "toposched"] = sorted(set(hits))
    assert found == {}


def test_arguments_and_flags_are_shown_as_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "300")
    get = help_text(("get",))
    assert "Usage: toposched get [OPTIONS] NAME" in get
    delete = help_text(("delete",))
    assert "Usage: toposched delete [OPTIONS] NAME..." in delete
    listing = help_text(("list",))
    assert re.search(r"--limit\s+INTEGER", listing) and re.search(r"--state\s+TEXT", listing)
    assert re.search(r"--all\s+-a\s+Include ended jobs", listing)


def test_completion_prints_a_script_that_completes(cli: Callable[..., Result]) -> None:
    bash = cli("completion", "bash")
    assert bash.code == 0, bash.err
    assert "complete -o default -F _toposched_completion toposched" in bash.out
    assert "_TOPOSCHED_COMPLETE=complete_bash" in bash.out
    for shell, said in (("zsh", "#compdef toposched"), ("fish", "complete --command toposched")):
        script = cli("completion", shell)
        assert script.code == 0 and said in script.out, script.err
    # What bash asks while the user types `toposched sub<TAB>` and `toposched list --st<TAB>`.
    words = cli(_TOPOSCHED_COMPLETE="complete_bash", COMP_WORDS="toposched sub", COMP_CWORD="1")
    assert words.out.split() == ["submit"]
    flags = cli(
        _TOPOSCHED_COMPLETE="complete_bash", COMP_WORDS="toposched list --st", COMP_CWORD="2"
    )
    assert flags.out.split() == ["--state"]
    assert cli("completion", "tcsh").code == 2
