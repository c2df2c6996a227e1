"""A transformer's layout for real (real/process/tensor.py, real/strategies/hybrid.py):
tensor and data parallelism over DTensor clients compute what one device computes, what
they cannot run is refused in one line, and the simulator's calibrated machine for a
layout (sim/strategies/hybrid/machine.py) reads the profile as its closed forms say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from conftest import ROOT

from measured.entries import CollectiveFit
from real.process.tensor import parameter_count
from scenarios import load
from scenarios.keras_layers import resolve_spec
from scenarios.loader import set_path
from sim.network import fabric
from sim.strategies.hybrid.machine import WEIGHTS_OUTSIDE, WEIGHTS_PER_LAYER, Machine

BIN = Path(sys.executable).parent
LIBRARY = ROOT / "scenarios" / "library" / "tiny-gpt-tensor-localhost.yaml"


def _document(**sets: Any) -> dict[str, Any]:
    doc = yaml.safe_load(LIBRARY.read_text())
    doc.pop("sweep")
    for path, value in sets.items():
        set_path(doc, path, value)
    return doc


def test_the_laid_out_model_has_the_catalogs_parameters() -> None:
    # Narayanan et al. 2021's Eq. 2 (the catalog's layer table) and the final norm's 2h
    spec = load(LIBRARY).points[0].spec
    assert spec.model.keras is not None
    keras = resolve_spec(spec.model.keras.model_dump())
    h = 64
    assert parameter_count(keras) == sum(row[1] for row in spec.model.layer_table()) + 2 * h


@pytest.mark.parametrize(
    ("sets", "says"),
    [
        ({"strategy.pipeline": 2, "strategy.tensor": 1}, "strategy.pipeline: 2 (run-real lays"),
        ({"strategy.attention": "flash"}, "strategy.attention: flash"),
        ({"strategy.recompute": "full"}, "strategy.recompute: full"),
        ({"strategy.sequence_parallel": True}, "strategy.sequence_parallel: true"),
    ],
)
def test_what_a_mesh_cannot_run_is_one_line(
    tmp_path: Path, sets: dict[str, Any], says: str
) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text(yaml.safe_dump(_document(**sets)))
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(BIN / "trainscale"), "run-real", str(scenario), "--out", str(out)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def test_the_calibrated_machine_reads_the_profile_as_measured() -> None:
    # a measured all-reduce among n processes, t = a + S / B, read as a ring: the
    # tensor group's all-reduce of S takes it exactly, a reduce-scatter half of it; the
    # data-parallel reduction pays the latency again for every further weight tensor
    # (DTensor all-reduces each on its own); the GEMMs run at the step's FLOPs over the
    # measured step
    spec = load(LIBRARY).points[1].spec
    fit = CollectiveFit.model_validate(
        {"workers": 2, "latency": "2 ms", "bandwidth": "3.2 Gbit/s", "r2": 1.0,
         "max_rel_residual": 0.0}
    )  # fmt: skip

    class Measured:  # what Machine.of reads of a calibration
        step_s = 0.010
        one_machine = True

        class profile:  # noqa: N801
            allreduce = [fit]

    machine = Machine.of(spec, Measured())  # type: ignore[arg-type]
    path = machine.path([0, 1])
    size = 1e6
    assert fabric.all_reduce_s(size, 2, path) == pytest.approx(fit.latency + size / fit.bandwidth)
    assert fabric.gather_s(size, 2, path) == pytest.approx((fit.latency + size / fit.bandwidth) / 2)
    tensors = WEIGHTS_PER_LAYER * 2 + WEIGHTS_OUTSIDE
    reduced = fit.latency + size / fit.bandwidth + (tensors - 1) * fit.latency
    assert machine.reduction_s(size, 2, path) == pytest.approx(reduced)
    s, h, v, layers, b = 64, 64, 256, 2, 8
    forward = layers * (24 * b * s * h * h + 4 * b * s * s * h)  # N21's appendix
    step = 3 * forward + 6 * b * s * h * v
    assert machine.flops == pytest.approx(step / 0.010)
    assert not machine.derated and machine.memory == 0.0


@pytest.mark.real
@pytest.mark.usefixtures("own")
def test_tensor_and_data_parallelism_compute_what_one_device_computes(tmp_path: Path) -> None:
    # the same 16 sequences a step, from the same seed, on one device, on two as data
    # parallelism and on two as tensor parallelism: the same losses (what runs where
    # differs, not what is computed)
    pytest.importorskip("tensorflow")
    doc = _document(**{"training.steps": 3, "training.warmup_steps": 1,
                       "training.learning_rate": {"base": 0.01, "base_batch": 16}})  # fmt: skip
    doc["sweep"] = {
        "cluster.devices_per_host,strategy.tensor,training.batch_per_worker": [
            [1, 1, 16], [2, 1, 8], [2, 2, 16],
        ]
    }  # fmt: skip
    scenario = tmp_path / "layouts.yaml"
    scenario.write_text(yaml.safe_dump(doc))
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(BIN / "trainscale"), "run-real", str(scenario), "--out", str(out), "--quiet"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    steps = pd.read_csv(out / "steps.csv")
    losses = {
        point: group.sort_values("step")["loss"].to_numpy()
        for point, group in steps.groupby("point")
    }
    assert len(losses) == 3
    first, *others = losses.values()
    assert first[-1] < first[0]  # it trains
    for other in others:
        assert other == pytest.approx(first, rel=1e-4)
