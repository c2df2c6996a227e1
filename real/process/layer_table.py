"""`trainscale model-table MODEL [--name NAME] [--out FILE]`: a Keras model of your own as
the simulator's layer table (a `model:` mapping), by the catalog's counting rules.

MODEL is a saved Keras file (`.keras`) or a builder `module:function` (importable from the
current directory; called with no arguments, it returns a `keras.Model`). Every layer is
walked in the model's order: trainable parameters are read off its weights and forward
FLOPs per sample computed from its weight and output shapes under `RULES`, the rules
`tools/gen_model_catalog.py` generates the catalog with. A layer the rules do not know is
refused in one line naming it. The YAML written (to FILE, or printed) is a `model:`
mapping: paste it under `model:` in a scenario, or save it as
`scenarios/catalog/models/NAME.yaml` to name it.

Runs Keras in this process (TensorFlow is needed: `make test` installs it).
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from commands.args import ArgumentParser, with_examples
from results.files import write_atomic
from scenarios import UserError

EXAMPLES = [
    "trainscale model-table docs.examples.keras_mlp:build --name my-mlp",
]

#: The counting rules, written into every file's header (and applied by `layer_row`).
RULES = """\
# FLOPs: forward pass, per sample; bias adds ignored; conv/dense = 2 x multiply-accumulates:
#   Conv2D: 2*Kh*Kw*(Cin/groups)*Cout*Hout*Wout; DepthwiseConv2D: 2*Kh*Kw*C*Hout*Wout;
#   Dense: 2*in*out (times the extra positions when applied to a rank>2 tensor);
#   BatchNormalization: 2 FLOP per output element; every other layer: 0.
# params: trainable parameters only (BatchNormalization gamma/beta yes, moving mean/var no).
# Layers with 0 params and 0 FLOPs (input, activation, pooling, add, concat, ...) are omitted."""

#: Layer classes that have neither trainable weights nor FLOPs under `RULES`. Anything not
#: listed here or handled in `layer_row` stops the generator, so a new layer type in a
#: future Keras cannot be silently counted as free.
_ZERO_COST = frozenset(
    {
        "InputLayer",
        "Activation",
        "ReLU",
        "Softmax",
        "Add",
        "Concatenate",
        "ZeroPadding2D",
        "MaxPooling2D",
        "AveragePooling2D",
        "GlobalAveragePooling2D",
        "GlobalMaxPooling2D",
        "Flatten",
        "Dropout",
        "Reshape",
    }
)


def weights_size(weights: list[Any]) -> int:
    return sum(math.prod(int(d) for d in w.shape) for w in weights)


def layer_row(layer: Any) -> dict[str, Any]:
    """`{"name", "params", "flops"}` of one layer of a functional model, under `RULES`."""
    kind = type(layer).__name__
    params = weights_size(layer.trainable_weights)
    if len(layer._inbound_nodes) != 1:  # noqa: SLF001 - no public API for node count
        # A shared layer runs once per call; the tables assume one call per layer.
        raise UserError(f"layer {layer.name} ({kind}) is called more than once")
    out_shape = tuple(layer.output.shape[1:])  # drop the batch dimension
    if kind in ("Conv2D", "DepthwiseConv2D"):
        if layer.data_format != "channels_last":
            raise UserError(f"layer {layer.name}: only channels_last is counted")
        # Conv2D kernel (Kh, Kw, Cin/groups, Cout): each output reads Kh*Kw*Cin/groups inputs.
        # DepthwiseConv2D: each output channel reads one input channel, so Kh*Kw inputs, and
        # Cout = C * depth_multiplier, which is the rule's 2*Kh*Kw*C*Hout*Wout at multiplier 1.
        kh, kw, cin_per_group, _ = (int(d) for d in layer.kernel.shape)
        h_out, w_out, c_out = (int(d) for d in out_shape)
        per_out = cin_per_group if kind == "Conv2D" else 1
        flops = 2 * kh * kw * per_out * c_out * h_out * w_out
    elif kind == "Dense":
        n_in, n_out = (int(d) for d in layer.kernel.shape)
        positions = math.prod(int(d) for d in out_shape[:-1])  # 1 for a rank-2 input
        flops = 2 * n_in * n_out * positions
    elif kind == "BatchNormalization":
        flops = 2 * math.prod(int(d) for d in out_shape)
    elif kind in _ZERO_COST:
        if params:
            raise UserError(f"layer {layer.name} ({kind}) has {params} trainable params")
        flops = 0
    else:
        raise UserError(f"layer {layer.name}: no FLOP rule for {kind}; add one to RULES")
    return {"name": layer.name, "params": params, "flops": flops}


def model_table(model: Any) -> list[dict[str, Any]]:
    """Rows of every layer with params or FLOPs, in the model's (topological) layer order."""
    rows = [layer_row(layer) for layer in model.layers]
    rows = [r for r in rows if r["params"] or r["flops"]]
    total = weights_size(model.trainable_weights)
    if sum(r["params"] for r in rows) != total:
        # Nested models or weights outside layers would be missed by the walk above.
        raise UserError(f"{model.name}: layer params do not add up to {total}")
    return rows


def _keras() -> Any:
    """Keras, imported with the standard error stream closed: TensorFlow's C++ start-up
    lines (absl's, which no environment variable of TF 2.21 silences) would stand before
    the one line a refusal gets."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            import keras
    finally:
        os.dup2(saved, 2)
        os.close(saved)
    return keras


def load_model(source: str) -> Any:
    """The Keras model a `.keras` file holds, or a `module:function` builder returns."""
    if source.endswith(".keras"):
        if not Path(source).is_file():
            raise UserError(f"MODEL: {source}: no such file")
        try:
            return _keras().saving.load_model(source)
        except (ValueError, OSError) as exc:
            raise UserError(f"MODEL: {source}: not a Keras model file ({exc})") from None
    module_name, _, function = source.partition(":")
    if not module_name or not function:
        raise UserError(f"MODEL: {source}: give a .keras file or module:function")
    keras = _keras()
    sys.path.insert(0, os.getcwd())
    try:
        builder = getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as exc:
        raise UserError(f"MODEL: {source}: cannot import it ({exc})") from None
    model = builder()
    if not isinstance(model, keras.Model):
        raise UserError(f"MODEL: {source}: returned {type(model).__name__}, not a keras.Model")
    return model


def mapping(model: Any, name: str) -> dict[str, Any]:
    """The `model:` mapping of a Keras model: its totals, input shape and layer table."""
    rows = model_table(model)
    dtypes = {str(w.dtype) for w in model.trainable_weights}
    dtype = dtypes.pop() if len(dtypes) == 1 else "float32"
    return {
        "name": name,
        "params": sum(r["params"] for r in rows),
        "flops_per_sample": f"{sum(r['flops'] for r in rows)} FLOP",
        "dtype": dtype if dtype in ("float16", "bfloat16", "float32", "float64") else "float32",
        "input_shape": [int(d) for d in model.inputs[0].shape[1:]],
        "layers": [
            {"name": r["name"], "params": r["params"], "flops": f"{r['flops']} FLOP"}
            for r in rows
        ],
    }


def build_parser() -> ArgumentParser:
    parser = ArgumentParser(
        prog="model-table", description=(__doc__ or "").split("\n\n")[0],
        **with_examples(EXAMPLES),
    )  # fmt: skip
    parser.add_argument("model", metavar="MODEL", help="a .keras file or module:function")
    parser.add_argument("--name", default=None, help="the model's name (default: Keras')")
    parser.add_argument("--out", metavar="FILE", help="write the YAML here (default: print)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's C++ logs
    try:
        model = load_model(args.model)
        table = mapping(model, args.name or model.name)
    except UserError as exc:
        print(f"model-table: error: {exc}", file=sys.stderr)
        return 2
    header = "\n".join(
        [f"# {args.model} as the simulator's layer table (trainscale model-table)", RULES]
    )
    text = header + "\n" + yaml.safe_dump(table, sort_keys=False, width=100)
    if args.out:
        write_atomic(Path(args.out), text)
        params, flops = table["params"], table["flops_per_sample"]
        print(f"wrote {args.out}: {params:,} params, {flops} forward per sample")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
