"""Golden cases: simulated results.csv against committed expectations (STYLE.md rule 16)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from scenarios import load, vocab
from sim import run

CASES = sorted(p for p in (Path(__file__).parent / "golden").iterdir() if p.is_dir())


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_golden(case: Path) -> None:
    expected = pd.read_csv(case / "expected.csv", keep_default_na=False)
    # the intervals come from the validation's errors tables, not from the simulation
    # (tests/test_intervals.py holds them to those tables)
    dropped = [*vocab.WALL_CLOCK_COLUMNS, *vocab.INTERVAL_COLUMNS]
    got = run(load(case / "scenario.yaml")).results.drop(columns=dropped)
    got = pd.read_csv(pd.io.common.StringIO(got.to_csv(index=False)), keep_default_na=False)
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-9, atol=1e-12)
