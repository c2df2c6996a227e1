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
