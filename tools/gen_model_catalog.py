"""Regenerate the model catalog (`scenarios/catalog/models/*.yaml`) from the real Keras models.

Usage, from the repository root, with a Python that has TensorFlow (2.21, Keras 3):

    python tools/gen_model_catalog.py [--out scenarios/catalog/models] [--check]

Every model is built with `real.process.models.build_model` (random weights, nothing downloaded) and
walked layer by layer: trainable parameters are read from the layer's weights, forward FLOPs
per sample are computed from its weight and output shapes with the rules in `RULES` below.
The YAML is written by hand (not `yaml.dump`) so that it keeps its header comments and one
flow-style line per layer; each file is read back with `yaml.safe_load` and compared with
the table it was written from, so the formatting cannot change a number.

`--check` writes nothing and exits 1 if any file differs from what would be generated.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
# The script is run as `python tools/gen_model_catalog.py`: make `real` and `scenarios`
# importable without installing the package.
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from real.process.layer_table import RULES, model_table  # noqa: E402
from real.process.models import build_model  # noqa: E402 - needs the sys.path line above
from results.files import write_atomic  # noqa: E402
from scenarios.keras_layers import DEFAULT_SPECS, layer_table  # noqa: E402

DEFAULT_OUT = REPO_ROOT / "scenarios" / "catalog" / "models"

_TORCHVISION = "https://pytorch.org/vision/stable/models/generated/torchvision.models.{}.html"
_KERAS_APPS = "https://keras.io/api/applications/"


@dataclass(frozen=True)
class Entry:
    """What the catalog file of one model says beyond the numbers read off Keras."""

    name: str
    title: str  # first header line(s): the model and its paper
    built_from: str  # the Keras call, for the "Generated ... from" line(s)
    description: str
    #: Header lines (without "# ") citing the published numbers. "{delta}" is replaced by
    #: the Keras trainable count minus `published_params`, computed, so it cannot go stale.
    published: tuple[str, ...]
    published_params: int | None = None


_RESNET_V1 = (
    "  Keras's ResNet is v1 (stride 2 in the first 1x1 conv of a stage, as in the paper);",
    "  torchvision's is v1.5 (stride in the 3x3 conv), which costs more multiply-adds.",
)

ENTRIES: tuple[Entry, ...] = (
    Entry(
        name="resnet50",
        title='ResNet-50 (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016).',
        built_from="keras.applications.ResNet50(weights=None, classifier_activation=None)",
        description="ResNet-50 image classifier, 224x224x3 input, 1000 classes",
        published=(
            "Published: 25.56 M parameters (25,557,032; torchvision ResNet50_Weights,",
            f"  {_TORCHVISION.format('resnet50')});",
            f"  Keras docs: 25.6M ({_KERAS_APPS}, counts BN moving statistics too).",
            "  Keras gives its convolutions biases (torchvision's have none): {delta} trainable.",
            "  Multiply-adds at 224x224: 3.8 G (He et al. 2016, Table 1); 4.089 G (torchvision).",
            *_RESNET_V1,
        ),
        published_params=25_557_032,
    ),
    Entry(
        name="resnet101",
        title='ResNet-101 (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016).',
        built_from="keras.applications.ResNet101(weights=None, classifier_activation=None)",
        description="ResNet-101 image classifier, 224x224x3 input, 1000 classes",
        published=(
            "Published: 44.5 M parameters (44,549,160; torchvision ResNet101_Weights,",
            f"  {_TORCHVISION.format('resnet101')});",
            f"  Keras docs: 44.7M ({_KERAS_APPS}, counts BN moving statistics too).",
            "  Keras gives its convolutions biases (torchvision's have none): {delta} trainable.",
            "  Multiply-adds at 224x224: 7.6 G (He et al. 2016, Table 1); 7.801 G (torchvision).",
            *_RESNET_V1,
        ),
        published_params=44_549_160,
    ),
    Entry(
        name="resnet152",
        title='ResNet-152 (He et al., "Deep Residual Learning for Image Recognition", CVPR 2016).',
        built_from="keras.applications.ResNet152(weights=None, classifier_activation=None)",
        description="ResNet-152 image classifier, 224x224x3 input, 1000 classes",
        published=(
            "Published: 60.2 M parameters (60,192,808; torchvision ResNet152_Weights,",
            f"  {_TORCHVISION.format('resnet152')});",
            f"  Keras docs: 60.4M ({_KERAS_APPS}, counts BN moving statistics too).",
            "  Keras gives its convolutions biases (torchvision's have none): {delta} trainable.",
            "  Multiply-adds at 224x224: 11.3 G (He et al. 2016, Table 1); 11.514 G (torchvision).",
            *_RESNET_V1,
        ),
        published_params=60_192_808,
    ),
    Entry(
        name="inception_v3",
        title='Inception-v3 (Szegedy et al., "Rethinking the Inception Architecture for\n'
        '  Computer Vision", CVPR 2016).',
        built_from="keras.applications.InceptionV3(weights=None, classifier_activation=None)\n"
        "  with its auto-named layers given stable names "
        "(real.process.models._inception_layer_names)",
        description="Inception-v3 image classifier, 299x299x3 input, 1000 classes",
        published=(
            "Published: 23.8 M parameters without the auxiliary classifier (torchvision",
            "  Inception_V3_Weights lists 27,161,264 with its 3,326,696-parameter auxiliary head,",
            "  so 23,834,568 without it:",
            f"  {_TORCHVISION.format('inception_v3')});",
            f"  Keras docs: 23.9M ({_KERAS_APPS}, counts BN moving statistics too).",
            "  Keras has no auxiliary head and its BatchNorm layers have scale=False (beta only),",
            "  torchvision's have gamma too: {delta} trainable.",
            "  Multiply-adds at 299x299: 5.713 G (torchvision).",
        ),
        published_params=23_834_568,
    ),
    Entry(
        name="vgg16",
        title='VGG-16 (Simonyan & Zisserman, "Very Deep Convolutional Networks for Large-Scale\n'
        '  Image Recognition", ICLR 2015).',
        built_from="keras.applications.VGG16(weights=None, classifier_activation=None)",
        description="VGG-16 image classifier, 224x224x3 input, 1000 classes",
        published=(
            "Published: 138.36 M parameters (138,357,544; torchvision VGG16_Weights,",
            f"  {_TORCHVISION.format('vgg16')});",
            f"  Keras docs: 138.4M ({_KERAS_APPS}). Same architecture: {{delta}} trainable.",
            "  Multiply-adds at 224x224: 15.47 G (torchvision); 15.3 G (He et al. 2016, Sec. 4.1).",
        ),
        published_params=138_357_544,
    ),
    Entry(
        name="alexnet",
        title='AlexNet, single-tower variant (Krizhevsky, "One weird trick for parallelizing\n'
        '  convolutional neural networks", arXiv:1404.5997, 2014).',
        built_from="real.process.models._alexnet "
        "(torchvision's AlexNet; keras.applications has none)",
        description="AlexNet image classifier (torchvision variant), 224x224x3 input, 1000 classes",
        published=(
            "Published: 61.1 M parameters (61,100,840; torchvision AlexNet_Weights,",
            f"  {_TORCHVISION.format('alexnet')}).",
            "  Same architecture: {delta} trainable.",
            "  Multiply-adds at 224x224: 0.714 G (torchvision).",
        ),
        published_params=61_100_840,
    ),
    Entry(
        name="mlp",
        title="MLP: a small multilayer perceptron (Dense + ReLU hidden layers, Dense logits).",
        built_from="real.process.models._mlp (Keras Dense layers)",
        description="MLP classifier for scikit-learn's 8x8 digits, 64 inputs, 2x1024 hidden, "
        "10 classes",
        published=(
            "Published: none (a toy model). scenarios.keras_layers.layer_table computes the",
            "  same table without TensorFlow, for any mlp spec.",
        ),
    ),
    Entry(
        name="small_cnn",
        title="Small CNN: 3x3 Conv2D + ReLU layers, Flatten, Dense + ReLU, Dense logits.",
        built_from="real.process.models._small_cnn (Keras Conv2D and Dense layers)",
        description="Small CNN classifier for scikit-learn's 8x8 digits, 8x8x1 input, 10 classes",
        published=(
            "Published: none (a toy model). scenarios.keras_layers.layer_table computes the",
            "  same table without TensorFlow, for any small_cnn spec.",
        ),
    ),
)

#: The `keras:` spec each catalog file records: the full default spec for the toy builders,
#: so that the file alone says what was built.
SPECS: dict[str, dict[str, Any]] = {
    e.name: DEFAULT_SPECS.get(e.name, {"builder": e.name}) for e in ENTRIES
}

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def _scalar(value: Any) -> str:
    """A YAML flow scalar: names stay plain unless YAML would read them as something else."""
    if isinstance(value, bool):
        raise TypeError("no booleans in a catalog spec")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
            return value
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_scalar(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"cannot write {value!r}")


def _text(value: str) -> str:
    """A block-context YAML string: plain when YAML reads it back unchanged, else quoted."""
    if yaml.safe_load(f"k: {value}") == {"k": value}:
        return value
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _comment(text: str, column: int, comment: str) -> str:
    """`text` then `# comment`, the comment aligned at `column` (at least two spaces after)."""
    return f"{text}{' ' * max(2, column - len(text))}# {comment}"


def render(entry: Entry, model: Any, rows: list[dict[str, Any]], versions: str) -> str:
    """The catalog file text of one model."""
    input_shape = [int(d) for d in model.input_shape[1:]]
    classes = int(model.output_shape[-1])
    params = sum(r["params"] for r in rows)
    flops = sum(r["flops"] for r in rows)
    delta = "" if entry.published_params is None else f"{params - entry.published_params:+,}"
    lines = [
        *(f"# {line}" for line in entry.title.split("\n")),
        "# Generated by tools/gen_model_catalog.py from",
        *(f"#   {line}" for line in entry.built_from.split("\n")),
        f"# with {versions}; do not edit by hand.",
        *(f"# {line.replace('{delta}', delta)}" for line in entry.published),
        RULES,
        f"name: {_scalar(entry.name)}",
        f"description: {_text(entry.description)}",
        _comment(f"params: {params}", 26, "trainable parameters, sum of layers"),
        _comment(
            f"flops_per_sample: {flops} FLOP",
            37,
            'exact integer sum of layers, written as "<int> FLOP"',
        ),
        "dtype: float32",
        f"input_shape: {_scalar(input_shape)}",
        f"classes: {classes}",
        f"keras: {_scalar(SPECS[entry.name])}",
        _comment("layers:", 26, "input -> output order; every layer with params or FLOPs > 0"),
    ]
    lines += [
        f"  - {{name: {_scalar(r['name'])}, params: {r['params']}, flops: {r['flops']} FLOP}}"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def _check_round_trip(entry: Entry, text: str, rows: list[dict[str, Any]]) -> None:
    """Read the text back as YAML: the numbers must be exactly those computed."""
    doc = yaml.safe_load(text)
    back = [(r["name"], r["params"], r["flops"]) for r in doc["layers"]]
    want = [(r["name"], r["params"], f"{r['flops']} FLOP") for r in rows]
    same_meta = (doc["name"], doc["description"], doc["keras"]) == (
        entry.name,
        entry.description,
        SPECS[entry.name],
    )
    if back != want or not same_meta:
        raise SystemExit(f"{entry.name}: the YAML written does not read back as computed")


def _check_pure_python(entry: Entry, rows: list[dict[str, Any]]) -> None:
    """The toy builders' TF-free calculator must agree with Keras, row for row."""
    if entry.name not in DEFAULT_SPECS:
        return
    mine = [(r["name"], r["params"], float(r["flops"])) for r in rows]
    pure = [(r["name"], r["params"], r["flops"]) for r in layer_table(SPECS[entry.name])]
    if mine != pure:
        raise SystemExit(
            f"{entry.name}: scenarios.keras_layers disagrees with Keras:\n"
            f"  keras: {mine}\n  pure:  {pure}"
        )


def generate(entry: Entry, versions: str) -> tuple[str, list[dict[str, Any]]]:
    """Build one model; return its catalog file text and layer rows (after the self-checks)."""
    import keras

    model = build_model(SPECS[entry.name])
    rows = model_table(model)
    text = render(entry, model, rows, versions)
    _check_round_trip(entry, text, rows)
    _check_pure_python(entry, rows)
    del model
    keras.backend.clear_session()  # free the big models' weights before the next build
    return text, rows


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        help="directory for the YAML files (default: %(default)s)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a file differs from the generated text",
    )
    args = parser.parse_args(argv)

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's C++ banner quiet
    import keras
    import tensorflow as tf

    versions = f"TensorFlow {tf.__version__} / Keras {keras.__version__}"
    stale: list[str] = []
    for entry in ENTRIES:
        text, rows = generate(entry, versions)
        path = args.out / f"{entry.name}.yaml"
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(str(path))
            continue
        write_atomic(path, text)
        params = sum(r["params"] for r in rows)
        gflop = sum(r["flops"] for r in rows) / 1e9
        print(f"{path}: {params:,} params, {gflop:.3f} GFLOP forward per sample")
    if stale:
        print("out of date (run tools/gen_model_catalog.py):", *stale, sep="\n  ")
        return 1
    if args.check:
        print(f"{len(ENTRIES)} catalog files up to date in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
