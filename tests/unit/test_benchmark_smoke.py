"""Every benchmarks/*.py script takes `--smoke`, as benchmarks/smoke.py (CI) runs each of them.

Only the sources are read here, nothing is run: `make bench-smoke` runs them.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def load_runner() -> ModuleType:
    # benchmarks/ is a folder of scripts, not a package: the runner is loaded from its file.
    spec = importlib.util.spec_from_file_location("benchmark_smoke", BENCHMARKS / "smoke.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


RUNNER = load_runner()
SCRIPTS: list[Path] = RUNNER.scripts()


def test_the_runner_finds_every_script_but_itself_and_the_helpers() -> None:
    found = {p.name for p in SCRIPTS}
    assert {"placement.py", "cli_start.py", "kube_bind.py"} <= found
    assert not found & RUNNER.NOT_BENCHMARKS
    # A name left out that no longer exists would leave out its successor unseen.
    assert all((BENCHMARKS / name).exists() for name in RUNNER.NOT_BENCHMARKS)


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_script_declares_and_documents_smoke(script: Path) -> None:
    tree = ast.parse(script.read_text(), str(script))
    declared = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "add_argument"
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and node.args[0].value == "--smoke"
    ]
    assert len(declared) == 1, f"{script.name}: no parser.add_argument('--smoke', ...)"
    assert any(k.arg == "help" for k in declared[0].keywords), f"{script.name}: --smoke's help"
    assert "--smoke" in (ast.get_docstring(tree) or ""), f"{script.name}: docstring on --smoke"
    used = any(isinstance(n, ast.Attribute) and n.attr == "smoke" for n in ast.walk(tree))
    assert used, f"{script.name}: declares --smoke but never reads args.smoke"
