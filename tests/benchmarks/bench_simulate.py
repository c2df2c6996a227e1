"""Benchmarks (`make bench`, never in CI): wall time of `simulate` on bundled scenarios.

Targets live here, not in unit tests. Each case runs the real command line in a fresh
process (imports and file writing included), REPEATS times, and reports the median.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPEATS = 3

CASES = {
    # name: (scenario, extra args, target seconds)
    "resnet50-1024-ring": ("scenarios/library/resnet50-1024-ring.yaml", [], 30.0),
    "resnet50-1024-ring-trace": ("scenarios/library/resnet50-1024-ring.yaml", ["--trace"], 60.0),
    "demo-resnet50-v100-scaling": ("scenarios/library/resnet50-v100-scaling.yaml", [], 60.0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_simulate_wall_time(name: str, tmp_path: Path) -> None:
    scenario, extra, target = CASES[name]
    times = []
    for i in range(REPEATS):
        started = time.perf_counter()
        subprocess.run(
            [
                sys.executable,
                "-m",
                "sim.cli",
                scenario,
                "--out",
                str(tmp_path / str(i)),
                "--quiet",
                *extra,
            ],
            cwd=ROOT,
            check=True,
            timeout=600,
        )
        times.append(time.perf_counter() - started)
    median = statistics.median(times)
    print(
        f"\nBENCH {name}: median {median:.2f} s over {REPEATS} runs "
        f"(min {min(times):.2f}, max {max(times):.2f}); target < {target:.0f} s"
    )
    assert median < target
