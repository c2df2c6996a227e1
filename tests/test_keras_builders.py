"""real.process.models.build_model against the catalog: every builder builds the model its
file describes.

Needs TensorFlow (skipped without it). Each model is built once and walked with the
generator's own code, so this also checks that tools/gen_model_catalog.py would rewrite the
committed file byte for byte (header included, with the TF/Keras versions the file names).
About 30 s on 2 CPU cores, most of it importing TensorFlow and building the big models.
"""

from __future__ import annotations

import importlib.util
import math
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow is first imported
pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

REPO = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO / "scenarios" / "catalog" / "models"
#: The builders that take several seconds each on 2 cores; the rest take about one.
SLOW = {"vgg16", "resnet101", "resnet152", "inception_v3"}


def _generator() -> ModuleType:
    # tools/ is not a package: load the script as a module (it puts the repo on sys.path).
    name = "_test_gen_model_catalog"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "tools" / "gen_model_catalog.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


GEN = _generator()
from real.process.models import build_model  # noqa: E402 - importable once the generator set sys.path

ENTRIES = {e.name: e for e in GEN.ENTRIES}
PARAMS = [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in ENTRIES]


@pytest.fixture(autouse=True)
def _fresh_keras() -> Iterator[None]:
    # Free each model's weights (VGG-16 alone is 0.5 GB) before the next test.
    yield
    keras.backend.clear_session()


@pytest.mark.parametrize("name", PARAMS)
def test_builder_matches_catalog_file(name: str) -> None:
    text = (MODELS_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    versions = re.search(r"^# with (.+); do not edit by hand\.$", text, re.M)
    assert versions, "catalog header lost its 'with <versions>' line"
    doc_params = re.search(r"^params: (\d+)", text, re.M)
    assert doc_params, "catalog file has no 'params:' line"

    # Keras numbers auto-named layers per process: bump its counters first, so a name that
    # depended on what was built before would not match the file.
    keras.layers.Conv2D(1, 1)
    keras.layers.BatchNormalization()
    keras.layers.Activation("relu")
    keras.Input(shape=(1,))
    model = build_model(GEN.SPECS[name])
    names = [layer.name for layer in model.layers]
    assert len(names) == len(set(names))
    assert names[0] == "input"
    trainable = sum(math.prod(int(d) for d in w.shape) for w in model.trainable_weights)
    assert trainable == int(doc_params[1])
    rows = GEN.model_table(model)
    assert GEN.render(ENTRIES[name], model, rows, versions[1]) == text


@pytest.mark.parametrize(
    ("spec", "inputs", "outputs"),
    [
        ({"builder": "mlp", "inputs": 10, "hidden": [7], "classes": 3}, (None, 10), (None, 3)),
        (
            {"builder": "small_cnn", "input_shape": [6, 6, 2], "filters": [4], "classes": 5},
            (None, 6, 6, 2),
            (None, 5),
        ),
        ({"builder": "alexnet", "classes": 10}, (None, 224, 224, 3), (None, 10)),
    ],
)
def test_resized_builders_follow_the_spec(
    spec: dict[str, Any], inputs: tuple[Any, ...], outputs: tuple[Any, ...]
) -> None:
    model = build_model(spec)
    assert model.input_shape == inputs
    assert model.output_shape == outputs
    # Logits, not probabilities: the training loop uses from_logits=True.
    assert model.layers[-1].activation.__name__ == "linear"
    if spec["builder"] in ("mlp", "small_cnn"):
        # The pure-Python table agrees with Keras for resized toy models too.
        from scenarios.keras_layers import layer_table

        keras_rows = [{**r, "flops": float(r["flops"])} for r in GEN.model_table(model)]
        assert keras_rows == layer_table(spec)


def test_bad_spec_is_refused_before_building() -> None:
    with pytest.raises(ValueError, match="unknown keras builder 'lenet'"):
        build_model({"builder": "lenet"})
    with pytest.raises(ValueError, match="unknown key"):
        build_model({"builder": "resnet50", "input_shape": [32, 32, 3]})


def test_module_imports_without_tensorflow() -> None:
    # None in sys.modules makes `import tensorflow` / `import keras` raise ImportError.
    code = (
        "import sys; sys.modules['tensorflow'] = None; sys.modules['keras'] = None; "
        "import real.process.models; real.process.models.build_model"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)


def test_the_optimizer_applies_the_scenarios_schedule() -> None:
    """The rate run-real's optimizer applies at given updates, from the scenario: base 0.05
    scaled linearly by 2 workers to 0.1; an update trains 2 x 16 of the 1,797 digits, so an
    epoch is 56.15625 updates; warm-up over 1 epoch from 0.05, then x0.1 at epochs 2 and 3."""
    import tensorflow as tf

    from real.process.models import build_for_training
    from real.runner import jobs_for
    from scenarios import loads

    scenario = loads(
        """
version: 1
name: schedule
model: {name: m, keras: {builder: mlp, inputs: 64, hidden: [16], classes: 10}}
cluster: {hosts: 1, devices_per_host: 2, device: cpu, host_link: loopback}
training:
  batch_per_worker: 16
  steps: 200
  data: digits
  learning_rate: {base: 0.05, scaling: linear, warmup_epochs: 1,
                  decay: {kind: step, milestones: [2, 3], factor: 0.1}}
"""
    )
    (point,) = scenario.points
    job = jobs_for(point.spec)[0]
    _, optimizer, *_ = build_for_training(tf, job, tf.distribute.get_strategy())
    epoch = 1797 / 32  # 56.15625
    warming = 0.05 / epoch  # the warm-up's step per update
    expected = {
        0: 0.05,
        28: 0.05 + 28 * warming,
        56: 0.05 + 56 * warming,  # the last update of the warm-up
        57: 0.1,
        112: 0.1,  # epoch 2 begins at update 112.3125
        113: 0.01,
        168: 0.01,  # epoch 3 at 168.47
        169: 0.001,
    }
    for update, rate in expected.items():
        optimizer.iterations.assign(update)
        assert float(optimizer.learning_rate) == pytest.approx(rate, rel=1e-6), update
