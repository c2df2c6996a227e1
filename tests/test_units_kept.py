"""The values with units kept between runs (scenarios/units.py): a later run reads them
without pint, equal to the bit; refusals are never kept; a broken file is ignored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# parse the values given, print their repr, then whether pint was imported
SCRIPT = """
import sys
from scenarios.units import parse
for text, kind in zip(sys.argv[1::2], sys.argv[2::2]):
    try:
        print(repr(parse(text, kind)))
    except ValueError as exc:
        print("refused:", exc)
print("pint" in sys.modules)
"""


def _run_pint(cache: str, *pairs: str) -> tuple[list[str], bool]:
    """The values parsed in a process of their own, and whether it imported pint."""
    env = {**os.environ, "TRAINSCALE_CACHE_DIR": cache}
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, *pairs],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    *lines, imported = out.stdout.splitlines()
    return lines, imported == "True"


def _run(cache: str, *pairs: str) -> list[str]:
    return _run_pint(cache, *pairs)[0]


VALUES = ("25 Gbit/s", "bandwidth", "64 MiB", "bytes", "10 us", "time", "7 Gbps", "bandwidth")


def test_a_later_run_reads_the_values_without_pint(tmp_path: Path) -> None:
    first, imported = _run_pint(str(tmp_path), *VALUES)
    assert imported
    # what they are: 25e9 / 8, 64 * 2**20, 10e-6, 7e9 / 8 (pint's last bit aside)
    truth = [25e9 / 8, 64 * 2**20, 10e-6, 7e9 / 8]
    assert [float(x) for x in first] == pytest.approx(truth, rel=1e-15)
    (kept,) = tmp_path.glob("units-*.json")
    assert json.loads(kept.read_text())["bytes\t64 MiB"] == 64 * 2**20
    # a later run never imports pint: every value comes from the file, the same to the bit
    assert _run_pint(str(tmp_path), *VALUES) == (first, False)


def test_refusals_are_not_kept(tmp_path: Path) -> None:
    lines = _run(str(tmp_path), "64 MiB", "time", "1.25 s", "time")
    assert lines[0].startswith("refused:") and lines[1] == "1.25"
    (kept,) = tmp_path.glob("units-*.json")
    found = json.loads(kept.read_text())
    assert found["time\t1.25 s"] == 1.25 and "time\t64 MiB" not in found
    # refused again in a later run (pint still asked), with the file there
    assert _run(str(tmp_path), "64 MiB", "time")[0].startswith("refused:")


def test_a_broken_file_is_ignored_and_replaced(tmp_path: Path) -> None:
    _run(str(tmp_path), "1 s", "time")
    (kept,) = tmp_path.glob("units-*.json")
    kept.write_text("{not json")
    assert _run(str(tmp_path), "2 ms", "time") == ["0.002"]
    assert json.loads(kept.read_text())["time\t2 ms"] == 0.002


def test_off_keeps_nothing(tmp_path: Path) -> None:
    # every place a file could go is under tmp_path: the home and XDG cache directories,
    # and the working directory (where a directory named "off" would be made)
    env = {
        **os.environ,
        "TRAINSCALE_CACHE_DIR": "off",
        "HOME": str(tmp_path / "home"),
        "XDG_CACHE_HOME": str(tmp_path / "xdg"),
        "PYTHONPATH": str(ROOT),
    }
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, "1 s", "time"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.splitlines()[0] == "1.0"
    assert not list(tmp_path.rglob("units-*.json"))
