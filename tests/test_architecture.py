"""The tree reads like docs/architecture.md (STYLE.md rule 25): a folder is a concept of
about a dozen modules, and every path the document's "Where a change goes" names exists."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT
from test_strategy import PACKAGES

#: the most modules one folder of the library holds directly (its __init__.py aside)
FOLDER_MODULES = 12
DOC = ROOT / "docs" / "architecture.md"


def _folders() -> list[Path]:
    roots = [ROOT / package for package in (*PACKAGES, "real")]
    return sorted({p.parent for root in roots for p in root.rglob("*.py")})


def _crowded(folder: Path) -> int:
    return len([p for p in folder.glob("*.py") if p.name != "__init__.py"])


def test_no_folder_holds_more_than_a_dozen_modules() -> None:
    found = [
        f"{folder.relative_to(ROOT)}: {count} modules"
        for folder in _folders()
        if (count := _crowded(folder)) > FOLDER_MODULES
    ]
    assert not found, "\n".join(found)


def where_paths(text: str) -> list[str]:
    """The paths named in backticks in the "where" column of the "Where a change goes"
    table: `dir/`, `dir/module.py` (globs like `real/strategies/<kind>.py` skipped)."""
    section = text.split("## Where a change goes", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    paths = []
    for row in rows[1:]:  # the header row names the columns
        where = row.rstrip(" |").rsplit(" | ", 1)[1]
        for name in re.findall(r"`([^`\s]+)`", where):
            if "/" in name and not re.search(r"[<>*]", name):
                paths.append(name)
    return paths


def test_every_path_of_the_table_exists() -> None:
    paths = where_paths(DOC.read_text())
    assert len(paths) > 40  # the table names the tree, not a few corners of it
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, missing


def test_the_table_reader_finds_paths_and_skips_globs() -> None:
    text = (
        "## Where a change goes\n\n| the change | where |\n|---|---|\n"
        "| a thing | `sim/engine/` and `real/strategies/<kind>.py`, `make schema` |\n"
        "| another | `scenarios/spec.py` (`Spec`) |\n\n## Next\n| x | `not/this.py` |\n"
    )
    assert where_paths(text) == ["sim/engine/", "scenarios/spec.py"]
