"""`trainscale model-table` (real/process/layer_table.py): a Keras model of one's own as a
layer table, by the catalog's counting rules; checked against the pure-Python count of
the same MLP (scenarios/keras_layers.py) and loaded back as a scenario's model."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import ROOT

from scenarios.keras_layers import layer_table
from scenarios.sections.model import ModelSpec

pytest.importorskip("tensorflow")


def test_a_builder_becomes_the_table_of_the_pure_python_count(tmp_path: Path) -> None:
    out = tmp_path / "mlp.yaml"
    proc = subprocess.run(
        [sys.executable, "-m", "real.process.layer_table", "docs.examples.keras_mlp:build",
         "--name", "my-mlp", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    model = ModelSpec.model_validate(yaml.safe_load(out.read_text()))
    # the same MLP counted without TensorFlow: 784 -> 512 -> 512 -> 10, 2 in x out FLOPs
    expected = layer_table({"builder": "mlp", "inputs": 784, "hidden": [512, 512], "classes": 10})
    assert [(r[1], r[2]) for r in model.layer_table()] == [
        (float(row["params"]), float(row["flops"])) for row in expected
    ]
    assert model.total_params == 784 * 512 + 512 + 512 * 512 + 512 + 512 * 10 + 10


@pytest.mark.parametrize(
    ("source", "says"),
    [("nowhere:build", "cannot import it"), ("missing.keras", "no such file"),
     ("plain", "give a .keras file or module:function")],
)  # fmt: skip
def test_a_model_it_cannot_read_is_one_line(source: str, says: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "real.process.layer_table", source],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], proc.stderr


@pytest.mark.real
def test_a_transformer_trains_for_real_under_data_parallelism(tmp_path: Path) -> None:
    # the tiny GPT of scenarios/library/tiny-gpt-localhost.yaml, built by run-real from its
    # shape: the same parameters as the simulator's table (Eq. 2 leaves out the final
    # norm's 2h), and two processes train it on synthetic tokens
    from real.process.models import build_model
    from scenarios import load

    path = ROOT / "scenarios" / "library" / "tiny-gpt-localhost.yaml"
    spec = load(path).points[1].spec
    assert spec.model.keras is not None
    built = build_model(spec.model.keras.model_dump())
    h = spec.model.transformer.hidden  # type: ignore[union-attr]
    assert built.count_params() == spec.model.total_params + 2 * h
    out = tmp_path / "real"
    proc = subprocess.run(
        [sys.executable, "-m", "real.cli", str(path), "--out", str(out),
         "--set", "training.steps=3", "--set", "training.warmup_steps=1"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    import pandas as pd

    results = pd.read_csv(out / "results.csv")
    assert list(results["workers"]) == [1, 2]
    assert (results["throughput_samples_per_s"] > 0).all()
