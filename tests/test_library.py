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
        # its interval (tests/test_intervals.py holds them to the errors tables)
        assert row["interval_class"] and row["interval_level"] == 0.9
        if not row["interval_class"].startswith("unvalidated"):
            low, high = row["throughput_low_samples_per_s"], row["throughput_high_samples_per_s"]
            assert low < high and row["interval_figures"] >= 10
        if point.spec.strategy.sync:  # async over 2 updates measures bursts, not a rate
            assert row["scaling_efficiency"] <= 1 + 1e-12
        assert row["training_time_s"] > 0


def test_gpt2_xl_activations_are_what_a_transformer_layer_keeps() -> None:
    """`activations` is what a layer keeps for its backward (docs/scenarios.md): for a
    transformer layer s h (34 + 5 a s / h) bytes per sequence at 16 bits (Korthikanti et
    al. 2022, eq. 1), taken as elements of 2 bytes; not its s h output."""
    s, h, a = 1024, 1600, 25  # GPT-2 XL: context, d_model, heads (Radford et al. 2019)
    by_hand = 1024 * 1600 * (34 + 5 * 25 * 1024 / 1600) / 2  # = 1024 x 1600 x 57
    assert by_hand == 93_388_800 == 57 * s * h
    assert 5 * a * s / h == 80
    root = Path(__file__).resolve().parent.parent
    docs = (root / "docs" / "scenarios.md").read_text(encoding="utf-8")
    assert "93,388,800" in docs and "34 + 5 a s / h" in docs
    for name in ("gpt2-xl-pipeline", "gpt2-xl-hybrid-64"):
        model = load(root / "scenarios" / "library" / f"{name}.yaml").points[0].spec.model
        assert model.layers is not None and len(model.layers) == 48
        for layer in model.layers:
            assert layer.activations == pytest.approx(by_hand, rel=1e-4), name
        # 374 MB a layer, 17.9 GB a sequence in float32 (docs/simulator.md, "Memory")
        kept = sum(layer.activations or 0.0 for layer in model.layers) * model.bytes_per_param
        assert kept == pytest.approx(17.93e9, rel=1e-3)
