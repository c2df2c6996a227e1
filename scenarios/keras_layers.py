"""Per-layer parameter and FLOP tables for the small Keras builders, without TensorFlow.

The catalog files in `scenarios/catalog/models/` are generated from real Keras models by
`tools/gen_model_catalog.py`. Scenarios may also resize the two toy builders (`mlp`,
`small_cnn`); their tables are simple enough to compute here in pure Python, so the
simulator never needs TensorFlow to price a resized toy model. The generator checks that
this module agrees with Keras for the default specs, and `tests/test_catalog_models.py`
checks it against the committed YAML.

Counting rules (the same as the generator's):

* Conv2D: 2 * Kh * Kw * Cin * Cout * Hout * Wout FLOP (bias adds ignored);
  params Kh * Kw * Cin * Cout + Cout.
* Dense: 2 * in * out FLOP; params in * out + out.
* Every other layer (Input, Flatten, activations) has 0 params and 0 FLOP and is omitted.

The small builders use 3x3 "same" convolutions with stride 1, so a convolution keeps the
spatial size of its input.
"""

from __future__ import annotations

import copy
from typing import Any

#: The full default spec of each builder computable here, exactly as written in the
#: `keras:` field of its catalog file and as accepted by `real.process.models.build_model`.
#: mlp takes 64 inputs so that it trains on scikit-learn's 8x8 digits (flattened).
DEFAULT_SPECS: dict[str, dict[str, Any]] = {
    "mlp": {"builder": "mlp", "inputs": 64, "hidden": [1024, 1024], "classes": 10},
    "small_cnn": {
        "builder": "small_cnn",
        "input_shape": [8, 8, 1],
        "filters": [32, 64],
        "dense": 128,
        "classes": 10,
    },
}

#: Builders that only Keras can count (keras.applications and the hand-written AlexNet):
#: their tables live in the catalog, generated once from the real models.
CATALOG_ONLY_BUILDERS: tuple[str, ...] = (
    "resnet50",
    "resnet101",
    "resnet152",
    "inception_v3",
    "vgg16",
    "alexnet",
)

#: Builders of a transformer by its shape (`model.transformer`, whose counting rules give
#: the table: scenarios/transformer.py): a GPT decoder, tied output, learned positions.
SHAPED_BUILDERS: dict[str, tuple[str, ...]] = {
    "transformer": ("layers", "hidden", "heads", "ffn_hidden", "sequence", "vocab"),
}

#: Spec keys each catalog-only builder accepts besides `builder`.
_CATALOG_ONLY_KEYS: frozenset[str] = frozenset({"classes"})

#: Size of the square kernel of every small_cnn convolution.
_CNN_KERNEL = 3


def builders() -> tuple[str, ...]:
    """Every builder name that `real.process.models.build_model` knows, in catalog order."""
    return CATALOG_ONLY_BUILDERS + tuple(DEFAULT_SPECS) + tuple(SHAPED_BUILDERS)


def _positive_int(builder: str, key: str, value: object) -> int:
    # bool is an int subclass: `classes: true` is a typo, not a count.
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise ValueError(
            f"keras spec for '{builder}': '{key}' must be a positive integer, got {value!r}"
        )
    return value


def _int_list(builder: str, key: str, value: object, length: int | None = None) -> list[int]:
    if not isinstance(value, list | tuple):
        raise ValueError(
            f"keras spec for '{builder}': '{key}' must be a list of positive "
            f"integers, got {value!r}"
        )
    if length is not None and len(value) != length:
        raise ValueError(
            f"keras spec for '{builder}': '{key}' must have {length} entries, got {list(value)!r}"
        )
    return [_positive_int(builder, f"{key}[{i}]", v) for i, v in enumerate(value)]


def resolve_spec(keras_spec: dict[str, Any]) -> dict[str, Any]:
    """Return `keras_spec` validated and completed with the builder's defaults.

    Raises ValueError naming the builder and the bad key for an unknown builder, an
    unknown key or a value of the wrong type, so a typo in a scenario is caught before
    anything is built. The input is not modified.
    """
    if not isinstance(keras_spec, dict):
        raise ValueError(f"keras spec must be a mapping with a 'builder' key, got {keras_spec!r}")
    builder = keras_spec.get("builder")
    if builder in CATALOG_ONLY_BUILDERS:
        allowed = _CATALOG_ONLY_KEYS
        spec: dict[str, Any] = {"builder": builder}
    elif builder in DEFAULT_SPECS:
        spec = copy.deepcopy(DEFAULT_SPECS[builder])
        allowed = frozenset(spec) - {"builder"}
    elif builder in SHAPED_BUILDERS:
        keys = SHAPED_BUILDERS[builder]
        missing = [k for k in keys if k not in keras_spec]
        if missing:
            raise ValueError(f"keras spec for '{builder}': needs {', '.join(missing)}")
        spec = {"builder": builder}
        allowed = frozenset(keys)
    else:
        raise ValueError(
            f"unknown keras builder {builder!r}; known builders: {', '.join(builders())}"
        )
    unknown = sorted(set(keras_spec) - allowed - {"builder"})
    if unknown:
        raise ValueError(
            f"keras spec for '{builder}': unknown key(s) {', '.join(unknown)}; "
            f"allowed: {', '.join(sorted(allowed))}"
        )
    spec.update(copy.deepcopy({k: v for k, v in keras_spec.items() if k != "builder"}))

    if "classes" in spec:
        spec["classes"] = _positive_int(builder, "classes", spec["classes"])
    if builder == "mlp":
        spec["inputs"] = _positive_int(builder, "inputs", spec["inputs"])
        spec["hidden"] = _int_list(builder, "hidden", spec["hidden"])
    elif builder in SHAPED_BUILDERS:
        for key in SHAPED_BUILDERS[builder]:
            spec[key] = _positive_int(builder, key, spec[key])
    elif builder == "small_cnn":
        spec["input_shape"] = _int_list(builder, "input_shape", spec["input_shape"], length=3)
        spec["filters"] = _int_list(builder, "filters", spec["filters"])
        spec["dense"] = _positive_int(builder, "dense", spec["dense"])
    return spec


def _dense(name: str, n_in: int, n_out: int) -> dict[str, Any]:
    return {"name": name, "params": n_in * n_out + n_out, "flops": float(2 * n_in * n_out)}


def layer_table(keras_spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Per-layer `{"name", "params", "flops"}` rows, input to output, for mlp or small_cnn.

    Names, trainable parameter counts and forward FLOPs per sample are exactly those that
    `tools/gen_model_catalog.py` derives from the Keras model `real.process.models.build_model`
    builds for the same spec. Raises ValueError for a bad spec, and for the big models,
    whose tables come from their catalog entries.
    """
    spec = resolve_spec(keras_spec)
    builder = spec["builder"]
    if builder in CATALOG_ONLY_BUILDERS:
        raise ValueError(
            f"the layer table of '{builder}' needs TensorFlow to compute; use the "
            f"catalog entry scenarios/catalog/models/{builder}.yaml"
        )

    rows: list[dict[str, Any]] = []
    if builder == "mlp":
        width = spec["inputs"]
        for i, units in enumerate(spec["hidden"], start=1):
            rows.append(_dense(f"hidden{i}", width, units))
            width = units
        rows.append(_dense("logits", width, spec["classes"]))
        return rows

    # small_cnn: "same" 3x3 convolutions with stride 1 keep height and width.
    height, width, channels = spec["input_shape"]
    taps = _CNN_KERNEL * _CNN_KERNEL
    for i, filters in enumerate(spec["filters"], start=1):
        rows.append(
            {
                "name": f"conv{i}",
                "params": taps * channels * filters + filters,
                "flops": float(2 * taps * channels * filters * height * width),
            }
        )
        channels = filters
    rows.append(_dense("fc", height * width * channels, spec["dense"]))
    rows.append(_dense("logits", spec["dense"], spec["classes"]))
    return rows


def variable_sizes(keras_spec: dict[str, Any]) -> list[int]:
    """Sizes of the model's trainable variables in the order Keras creates them, for mlp or
    small_cnn: each Dense and Conv2D layer makes its kernel, then its bias.

    TensorFlow's ParameterServerStrategy places variables on the servers round-robin in
    that order, so this, not the layer table, is what a parameter-server shard holds.
    """
    spec = resolve_spec(keras_spec)
    if spec["builder"] in CATALOG_ONLY_BUILDERS:
        raise ValueError(f"the variables of '{spec['builder']}' need TensorFlow to list")
    sizes: list[int] = []
    for row in layer_table(spec):
        units = _units(spec, row["name"])
        sizes += [int(row["params"]) - units, units]
    return sizes


def _units(spec: dict[str, Any], layer: str) -> int:
    """The bias length (output units or filters) of a layer of `layer_table(spec)`."""
    if layer == "logits":
        return int(spec["classes"])
    if layer == "fc":
        return int(spec["dense"])
    kind, number = layer.rstrip("0123456789"), int(layer[len(layer.rstrip("0123456789")) :])
    return int(spec["hidden" if kind == "hidden" else "filters"][number - 1])


def output_sizes(keras_spec: dict[str, Any]) -> list[int]:
    """Each row of `layer_table(spec)`'s output, in elements per sample (what its forward
    keeps for the backward, and what crosses a pipeline cut after it)."""
    spec = resolve_spec(keras_spec)
    if spec["builder"] == "mlp":
        return [*spec["hidden"], spec["classes"]]
    height, width, _ = spec["input_shape"]
    return [height * width * f for f in spec["filters"]] + [spec["dense"], spec["classes"]]
