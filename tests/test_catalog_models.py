"""The model catalog (scenarios/catalog/models/*.yaml) against published numbers. No TensorFlow.

The files are generated from the real Keras models by tools/gen_model_catalog.py; these tests
read them with plain yaml.safe_load and check them against numbers published elsewhere.

Published parameter counts (trainable):
  ResNet-50 25.56 M (25,557,032), ResNet-101 44.5 M (44,549,160), ResNet-152 60.2 M
  (60,192,808), VGG-16 138.36 M (138,357,544), AlexNet 61.1 M (61,100,840): torchvision
  model docs, https://pytorch.org/vision/stable/models/generated/torchvision.models.<name>.html
  (the `num_params` of each model's weights). Inception-v3 23.8 M: torchvision lists
  27,161,264 including the 3,326,696-parameter auxiliary classifier (InceptionAux: 1x1 conv
  768->128 + BN, 5x5 conv 128->768 + BN, Linear 768->1000), so 23,834,568 without it; Keras
  has no auxiliary classifier.
  Keras docs (https://keras.io/api/applications/) list 25.6M / 44.7M / 60.4M / 138.4M / 23.9M;
  those count the BatchNorm moving mean/variance too, which are not trainable.
Why Keras differs from torchvision:
  * Keras's ResNets give their convolutions biases (torchvision's have none, since BatchNorm
    follows), so ResNet-50 is 25,583,592 trainable vs the 25,557,032 usually published:
    +26,560, one bias per conv output channel, which equals half the BatchNorm parameters.
  * Keras's Inception-v3 BatchNorm has scale=False (beta only, no gamma): 17,216 fewer.
Published multiply-adds (MACs) per 224x224 image (299x299 for Inception-v3), torchvision's
`_ops` / "GFLOPS" column on the same pages, which counts multiply-adds:
  ResNet-50 4.089 G, ResNet-101 7.801 G, ResNet-152 11.514 G, VGG-16 15.47 G,
  Inception-v3 5.713 G, AlexNet 0.714 G.
  He et al., "Deep Residual Learning for Image Recognition" (CVPR 2016), Table 1: ResNet-50
  3.8e9, ResNet-101 7.6e9, ResNet-152 11.3e9 "FLOPs" (multiply-adds). Keras's ResNet is the
  paper's v1 (stride 2 in the first 1x1 conv of a stage) and matches these within 2%;
  torchvision's is v1.5 (stride in the 3x3 conv) and costs ~5% more.
The catalog's forward FLOPs are 2 x MACs plus 2 FLOP per BatchNorm output element.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from scenarios import catalog
from scenarios.sections.model import ModelSpec

REPO = Path(__file__).resolve().parents[1]
MODELS_DIR = REPO / "scenarios" / "catalog" / "models"
MODELS = (
    "resnet50",
    "resnet101",
    "resnet152",
    "inception_v3",
    "vgg16",
    "alexnet",
    "mlp",
    "small_cnn",
)
TOP_KEYS = [
    "name",
    "description",
    "params",
    "flops_per_sample",
    "dtype",
    "input_shape",
    "classes",
    "keras",
    "layers",
]

#: Published trainable parameter counts, as usually quoted (sources in the module docstring).
PUBLISHED_PARAMS = {
    "resnet50": 25.56e6,
    "resnet101": 44.5e6,
    "resnet152": 60.2e6,
    "vgg16": 138.36e6,
    "inception_v3": 23.8e6,
    "alexnet": 61_100_840,
}
#: Exact torchvision counts, to check that the explained Keras differences are the only ones.
TORCHVISION_PARAMS = {
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "vgg16": 138_357_544,
    "alexnet": 61_100_840,
    "inception_v3": 27_161_264 - 3_326_696,  # without the auxiliary classifier
}
#: torchvision multiply-adds per sample (sources in the module docstring).
TORCHVISION_MACS = {
    "resnet50": 4.089e9,
    "resnet101": 7.801e9,
    "resnet152": 11.514e9,
    "vgg16": 15.47e9,
    "inception_v3": 5.713e9,
    "alexnet": 0.714e9,
}
#: He et al. 2016, Table 1: multiply-adds of the paper's (v1) ResNets, which Keras builds.
PAPER_RESNET_MACS = {"resnet50": 3.8e9, "resnet101": 7.6e9, "resnet152": 11.3e9}


@functools.cache  # parsing the big tables with pure-Python PyYAML dominates the run time
def _load(name: str) -> dict[str, Any]:
    """The parsed catalog file (shared between tests: do not modify it)."""
    with open(MODELS_DIR / f"{name}.yaml", encoding="utf-8") as f:
        return yaml.safe_load(f)


def _flop(value: object) -> int:
    """The integer of a '<int> FLOP' string; anything else fails the test."""
    assert isinstance(value, str), value
    match = re.fullmatch(r"(\d+) FLOP", value)
    assert match, f"expected '<int> FLOP', got {value!r}"
    return int(match[1])


def _keras_layers() -> ModuleType:
    # Load the module from its file rather than via `import scenarios.keras_layers`: the
    # package __init__ pulls in pint and pydantic, and this module must stay pure Python,
    # so the test runs (and proves that) with nothing but the standard library and PyYAML.
    name = "_catalog_test_keras_layers"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "scenarios" / "keras_layers.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


#: the models written in closed form by tools/gen_published_models.py, which have no Keras
#: builder (tested in tests/test_workloads_published.py)
CLOSED_FORM = ("bert_large", "gpt3_175b", "retinanet_resnext50")


#: the transformers given by their shape (`transformer:`), their tables by the counting
#: rules (scenarios/transformer.py; tests/test_transformer_workload.py holds the counts)
SHAPED = tuple(
    sorted(
        p.stem
        for p in MODELS_DIR.glob("*.yaml")
        if "transformer" in yaml.safe_load(p.read_text(encoding="utf-8"))
        and p.stem not in CLOSED_FORM
    )
)


def test_catalog_has_exactly_the_generated_models() -> None:
    names = sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))
    assert names == sorted(MODELS + CLOSED_FORM + SHAPED)


@pytest.mark.parametrize("name", SHAPED)
def test_a_shaped_transformer_has_its_published_size(name: str) -> None:
    # each file's header names its size; Narayanan et al.'s Table 1 sizes to their
    # printed 0.1 B, the released Llama and Mixtral counts exactly
    exact = {
        "llama2_7b": 6_738_415_616,
        "llama2_70b": 68_976_648_192,
        "llama3_8b": 8_030_261_248,
        "mixtral_8x7b": 46_702_792_704,
    }
    model = ModelSpec.model_validate(catalog.entry("model", name))
    if name in exact:
        assert model.total_params == exact[name]
    elif name.startswith("gpt_") and name not in ("gpt_175b", "gpt_22b", "gpt_1t"):
        assert round(model.total_params / 1e9, 1) == float(name[4:-1])
    assert len(model.layers or ()) == model.transformer.layers + 3  # type: ignore[union-attr]


@pytest.mark.parametrize("name", MODELS)
def test_file_shape(name: str) -> None:
    text = (MODELS_DIR / f"{name}.yaml").read_text(encoding="utf-8")
    assert "Generated by tools/gen_model_catalog.py" in text
    assert "do not edit by hand" in text
    doc = yaml.safe_load(text)
    assert list(doc) == TOP_KEYS
    assert doc["name"] == name
    assert doc["keras"]["builder"] == name
    assert doc["dtype"] == "float32"
    assert isinstance(doc["params"], int)
    _flop(doc["flops_per_sample"])
    assert all(isinstance(d, int) and d > 0 for d in doc["input_shape"])
    assert isinstance(doc["classes"], int) and doc["classes"] > 0
    names = [layer["name"] for layer in doc["layers"]]
    assert len(names) == len(set(names)), "layer names must be unique"
    for layer in doc["layers"]:
        assert list(layer) == ["name", "params", "flops"]
        assert isinstance(layer["params"], int) and layer["params"] >= 0
        # Layers with neither params nor FLOPs are omitted.
        assert layer["params"] > 0 or _flop(layer["flops"]) > 0, layer


@pytest.mark.parametrize("name", MODELS)
def test_params_is_the_sum_of_layers(name: str) -> None:
    doc = _load(name)
    assert doc["params"] == sum(layer["params"] for layer in doc["layers"])


@pytest.mark.parametrize("name", MODELS)
def test_flops_per_sample_is_the_sum_of_layers(name: str) -> None:
    doc = _load(name)
    assert _flop(doc["flops_per_sample"]) == sum(_flop(ly["flops"]) for ly in doc["layers"])


@pytest.mark.parametrize(("name", "published"), PUBLISHED_PARAMS.items())
def test_params_match_published_totals(name: str, published: float) -> None:
    params = _load(name)["params"]
    assert params == pytest.approx(published, rel=0.005)


@pytest.mark.parametrize("name", ["resnet50", "resnet101", "resnet152"])
def test_resnet_excess_over_torchvision_is_exactly_the_conv_biases(name: str) -> None:
    # Every Keras ResNet conv is followed by a BatchNorm over the same channels, so the conv
    # biases number half the BatchNorm parameters (gamma + beta per channel).
    doc = _load(name)
    bn = sum(ly["params"] for ly in doc["layers"] if ly["name"].endswith("_bn"))
    assert doc["params"] - bn // 2 == TORCHVISION_PARAMS[name]


def test_inception_shortfall_is_exactly_the_missing_batchnorm_gammas() -> None:
    # Keras BatchNorm(scale=False) keeps beta only: one parameter per channel; torchvision
    # also trains gamma, one more per channel.
    doc = _load("inception_v3")
    bn = sum(ly["params"] for ly in doc["layers"] if ly["name"].endswith("_bn"))
    assert bn == 17_216
    assert doc["params"] + bn == TORCHVISION_PARAMS["inception_v3"]


@pytest.mark.parametrize("name", ["vgg16", "alexnet"])
def test_same_architecture_same_count(name: str) -> None:
    assert _load(name)["params"] == TORCHVISION_PARAMS[name]


@pytest.mark.parametrize(("name", "macs"), TORCHVISION_MACS.items())
def test_forward_flops_match_published_multiply_adds(name: str, macs: float) -> None:
    flops = _flop(_load(name)["flops_per_sample"])
    assert flops == pytest.approx(2 * macs, rel=0.10)


@pytest.mark.parametrize(("name", "macs"), PAPER_RESNET_MACS.items())
def test_resnet_flops_match_the_paper_v1_numbers(name: str, macs: float) -> None:
    # Tighter than the torchvision check: Keras builds the paper's v1 ResNet.
    flops = _flop(_load(name)["flops_per_sample"])
    assert flops == pytest.approx(2 * macs, rel=0.03)


@pytest.mark.parametrize("name", ["mlp", "small_cnn"])
def test_pure_python_layer_table_reproduces_the_catalog(name: str) -> None:
    keras_layers = _keras_layers()
    doc = _load(name)
    assert doc["keras"] == keras_layers.DEFAULT_SPECS[name]
    want = [
        {"name": ly["name"], "params": ly["params"], "flops": float(_flop(ly["flops"]))}
        for ly in doc["layers"]
    ]
    assert keras_layers.layer_table(doc["keras"]) == want
    # The builder alone means the default spec.
    assert keras_layers.layer_table({"builder": name}) == want


def test_pure_python_layer_table_for_resized_models() -> None:
    keras_layers = _keras_layers()
    mlp = keras_layers.layer_table({"builder": "mlp", "inputs": 10, "hidden": [4], "classes": 3})
    assert mlp == [
        {"name": "hidden1", "params": 10 * 4 + 4, "flops": 2.0 * 10 * 4},
        {"name": "logits", "params": 4 * 3 + 3, "flops": 2.0 * 4 * 3},
    ]
    no_hidden = keras_layers.layer_table({"builder": "mlp", "hidden": []})
    assert no_hidden == [{"name": "logits", "params": 64 * 10 + 10, "flops": 2.0 * 64 * 10}]
    cnn = keras_layers.layer_table(
        {"builder": "small_cnn", "input_shape": [4, 5, 2], "filters": [3], "dense": 6}
    )
    assert cnn == [
        {"name": "conv1", "params": 9 * 2 * 3 + 3, "flops": 2.0 * 9 * 2 * 3 * 4 * 5},
        {"name": "fc", "params": 4 * 5 * 3 * 6 + 6, "flops": 2.0 * 4 * 5 * 3 * 6},
        {"name": "logits", "params": 6 * 10 + 10, "flops": 2.0 * 6 * 10},
    ]


def test_variable_sizes_are_kernel_then_bias_per_layer() -> None:
    keras_layers = _keras_layers()
    # Keras creates each Dense/Conv2D layer's kernel, then its bias
    assert keras_layers.variable_sizes({"builder": "mlp"}) == [
        64 * 1024,
        1024,
        1024 * 1024,
        1024,
        1024 * 10,
        10,
    ]
    cnn = {"builder": "small_cnn", "input_shape": [4, 5, 2], "filters": [3, 7], "dense": 6}
    want = [9 * 2 * 3, 3, 9 * 3 * 7, 7, 4 * 5 * 7 * 6, 6, 6 * 10, 10]
    assert keras_layers.variable_sizes(cnn) == want
    for spec in ({"builder": "mlp"}, cnn, {"builder": "small_cnn"}):
        rows = keras_layers.layer_table(spec)
        sizes = keras_layers.variable_sizes(spec)
        pairs = zip(sizes[0::2], sizes[1::2], strict=True)
        assert [kernel + bias for kernel, bias in pairs] == [r["params"] for r in rows]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"builder": "resnet50"}, "use the catalog entry"),
        ({"builder": "alexnet", "classes": 10}, "use the catalog entry"),
        ({"builder": "lenet"}, "unknown keras builder 'lenet'"),
        ({}, "unknown keras builder None"),
        ("mlp", "must be a mapping"),
        ({"builder": "mlp", "hiden": [8]}, "unknown key"),
        ({"builder": "mlp", "classes": 0}, "'classes' must be a positive integer"),
        ({"builder": "mlp", "classes": True}, "'classes' must be a positive integer"),
        ({"builder": "mlp", "hidden": 8}, "'hidden' must be a list"),
        ({"builder": "mlp", "hidden": [8, 2.5]}, r"'hidden\[1\]' must be a positive integer"),
        ({"builder": "small_cnn", "input_shape": [8, 8]}, "'input_shape' must have 3 entries"),
        ({"builder": "small_cnn", "dense": -1}, "'dense' must be a positive integer"),
    ],
)
def test_layer_table_rejects_bad_specs(spec: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _keras_layers().layer_table(spec)


def test_layer_table_does_not_modify_its_argument() -> None:
    spec = {"builder": "mlp", "hidden": (8,)}
    _keras_layers().layer_table(spec)
    assert spec == {"builder": "mlp", "hidden": (8,)}
