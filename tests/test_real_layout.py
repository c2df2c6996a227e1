"""real/'s layout (STYLE.md rules 23 and 24): nothing compares strategy kinds, the
orchestration runs without TensorFlow, and no project import hides inside a function.

Import circles and the wall between real/process/ and the rest are import-linter's
contracts (pyproject.toml, `make lint`); these checks are what it cannot see.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from conftest import ROOT
from test_strategy import KIND_COMPARISON

#: the project's packages: an import of one of them inside a function dodges a circle
PROJECT = ("real", "sim", "scenarios", "results", "workloads", "engines", "commands", "reports")
PROJECT += ("measured", "costing", "planner")


def _sources() -> list[Path]:
    return sorted((ROOT / "real").rglob("*.py"))


def test_real_compares_no_kind_strings() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for path in _sources()
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if KIND_COMPARISON.search(line)
    ]
    ask = "ask StrategySpec (scenarios/sections/strategy.py) instead:\n"
    assert not found, ask + "\n".join(found)


def _function_imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for inner in ast.walk(node):
            if isinstance(inner, ast.ImportFrom):
                module = "." * inner.level + (inner.module or "")
                if inner.level or module.split(".")[0] in PROJECT:
                    found.append((inner.lineno, module))
            elif isinstance(inner, ast.Import):
                found += [
                    (inner.lineno, a.name) for a in inner.names if a.name.split(".")[0] in PROJECT
                ]
    return found


def test_no_project_import_inside_a_function() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{line}: {module}"
        for path in _sources()
        for line, module in _function_imports(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert not found, "import at module level (a circle means a piece belongs lower):\n" + (
        "\n".join(found)
    )


def test_the_check_finds_an_import_inside_a_function() -> None:
    tree = ast.parse("def f():\n    from .runner import run\n    import sim.cli\n    import os\n")
    assert _function_imports(tree) == [(2, ".runner"), (3, "sim.cli")]


def test_the_orchestration_imports_no_tensorflow() -> None:
    code = (
        "import sys, real.cli, real.compare, real.runner, real.calibrate.measure, "
        "real.spark.stage, real.spark.task; "
        "print(sorted({'tensorflow', 'keras', 'sklearn'} & set(sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"
