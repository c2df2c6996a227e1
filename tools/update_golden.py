"""Regenerate tests/golden/<case>/expected.csv after an intended change of the numbers."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from results.files import write_atomic  # noqa: E402
from scenarios import load, vocab  # noqa: E402
from sim import run  # noqa: E402


def main() -> None:
    for case in sorted((ROOT / "tests" / "golden").iterdir()):
        if not (case / "scenario.yaml").exists():
            continue
        results = run(load(case / "scenario.yaml")).results
        results = results.drop(columns=list(vocab.WALL_CLOCK_COLUMNS))
        write_atomic(case / "expected.csv", results.to_csv(index=False))
        print(f"wrote {case / 'expected.csv'} ({len(results)} points)")


if __name__ == "__main__":
    main()
