"""Every bundled scenario loads and simulates (STYLE.md rule 17), so none rots."""

from __future__ import annotations

from pathlib import Path

import pytest

from scenarios import load
from sim.runner import simulate_point

LIBRARY = sorted((Path(__file__).resolve().parent.parent / "scenarios" / "library").glob("*.yaml"))
# a few steps are enough here: 16, as many updates as the largest asynchronous job has
# workers (fewer would measure less than one iteration of each worker: refused)
SHORT = ("training.steps=16", "training.warmup_steps=1")


def test_library_is_not_empty() -> None:
    assert len(LIBRARY) >= 5


@pytest.mark.parametrize("path", LIBRARY, ids=[p.stem for p in LIBRARY])
def test_bundled_scenario_simulates(path: Path) -> None:
    full = load(path)
    assert full.points and full.points[0].spec.description, "describe every bundled scenario"
    bound = full.points[0].spec.training
    unbounded = ("training.max_epochs=null", "training.max_steps=null")  # steps in its place
    scenario = load(path, SHORT + (unbounded if bound.max_epochs or bound.max_steps else ()))
    for point in scenario.points:
        row = simulate_point(point).row
        if not row["fits"]:  # marked and not timed (tests/test_pipeline.py)
            assert row["peak_memory_bytes"] > point.spec.cluster.device.memory
            continue
        assert row["throughput_samples_per_s"] > 0
        assert row["scaling_efficiency"] > 0
        if point.spec.strategy.sync:  # async over 2 updates measures bursts, not a rate
            assert row["scaling_efficiency"] <= 1 + 1e-12
        assert row["training_time_s"] > 0
