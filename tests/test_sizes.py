"""The source packages stay readable (STYLE.md rule 19): no module over 500 lines and no
function over 80, the catalog's generated tables and the tests aside; the maintainers'
scripts in tools/ under 500 lines each."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import ROOT
from test_strategy import PACKAGES

MODULE_LINES = 500
FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(p for package in (*PACKAGES, "real") for p in (ROOT / package).rglob("*.py"))


def _too_long(text: str, name: str) -> list[str]:
    """What of one module's text breaks the limits, one line each."""
    found = []
    if len(text.splitlines()) > MODULE_LINES:
        found.append(f"{name}: {len(text.splitlines())} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > FUNCTION_LINES:
                found.append(f"{name}:{node.lineno}: {node.name} has {length} lines")
    return found


def test_no_module_or_function_is_too_long() -> None:
    found = [
        line
        for path in _modules()
        for line in _too_long(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not found, "\n".join(found)


def test_no_tool_is_too_long() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {lines} lines"
        for path in sorted((ROOT / "tools").glob("*.py"))
        if (lines := len(path.read_text().splitlines())) > MODULE_LINES
    ]
    assert not found, "\n".join(found)


def test_the_check_finds_a_long_function_and_a_long_module() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(FUNCTION_LINES))
    assert _too_long(f"def f():\n{body}\n", "m.py") == ["m.py:1: f has 81 lines"]
    assert _too_long("x = 1\n" * (MODULE_LINES + 1), "m.py") == ["m.py: 501 lines"]
    assert _too_long(f"def f():\n{body[: body.rindex(chr(10))]}\n", "m.py") == []
