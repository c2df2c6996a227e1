"""Keras model builders for the catalog models, keyed by the `keras:` spec of a catalog file.

TensorFlow is imported inside `build_model`, not at module level, so that the simulator
(and anything that merely lists builders) imports this module without TensorFlow.

Every builder returns logits (no softmax on the last layer): the training loop can then use
one loss, `SparseCategoricalCrossentropy(from_logits=True)`, for every model, and that is
numerically safer than a softmax followed by a log. The activation adds no parameters, so
the catalog tables are the same either way.

Layer names are explicit and stable: the catalog's per-layer tables are keyed by them.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from scenarios.keras_layers import resolve_spec
from workloads.schedule import Schedule

from ..job import Model

if TYPE_CHECKING:  # only for annotations; importing keras at runtime needs TensorFlow
    import keras

#: keras.applications constructor name and default input shape of each application builder.
_APPLICATIONS: dict[str, tuple[str, tuple[int, int, int]]] = {
    "resnet50": ("ResNet50", (224, 224, 3)),
    "resnet101": ("ResNet101", (224, 224, 3)),
    "resnet152": ("ResNet152", (224, 224, 3)),
    "inception_v3": ("InceptionV3", (299, 299, 3)),
    "vgg16": ("VGG16", (224, 224, 3)),
}

#: Classes of the ImageNet-1k classifiers when a spec does not say.
_IMAGENET_CLASSES = 1000


def _keras() -> Any:
    # Deferred import: see the module docstring. Keras 3 ships with TensorFlow 2.16+.
    import keras

    return keras


def _application(spec: dict[str, Any]) -> keras.Model:
    keras = _keras()
    constructor, input_shape = _APPLICATIONS[spec["builder"]]
    # weights=None: random initialisation, never a download (the real machines are offline).
    return getattr(keras.applications, constructor)(
        include_top=True,
        weights=None,
        # An explicit Input: otherwise Keras numbers "input_layer" per process.
        input_tensor=keras.Input(shape=input_shape, name="input"),
        classes=spec.get("classes", _IMAGENET_CLASSES),
        classifier_activation=None,
    )


#: Names keras.applications.InceptionV3 sets itself; every other layer is auto-named.
_INCEPTION_EXPLICIT = re.compile(r"mixed\d+(_\d+)?|avg_pool|predictions")
#: Name stem of each auto-named layer kind, by class name.
_INCEPTION_KINDS = {
    "Conv2D": "conv",
    "MaxPooling2D": "maxpool",
    "AveragePooling2D": "avgpool",
    "Concatenate": "concat",
}


def _inception_layer_names(model: keras.Model) -> dict[str, str]:
    """Explicit, stable names for keras.applications.InceptionV3's auto-named layers.

    Keras names most InceptionV3 layers automatically (`conv2d_57`, `batch_normalization_57`),
    numbering them per process, so the names depend on what was built before. This maps them
    to names fixed by the architecture: `<block>_conv<i>` with its `_bn` and `_relu`, where
    the block is `stem` or the `mixed<k>` concatenation the layer feeds, and `i` counts in
    the model's (topological) layer order within the block.
    """
    producer: dict[int, str] = {}  # id of a layer's output tensor -> that layer's name
    consumers: Counter[int] = Counter()  # id of a tensor -> how many layers read it
    for layer in model.layers:
        producer[id(layer.output)] = layer.name
        if type(layer).__name__ != "InputLayer":
            inputs = layer.input if isinstance(layer.input, list) else [layer.input]
            consumers.update(id(t) for t in inputs)

    names: dict[str, str] = {}
    counts: Counter[tuple[str, str]] = Counter()
    block = "stem"
    for layer in model.layers:
        kind = type(layer).__name__
        if kind == "InputLayer":
            new = "input"
        elif _INCEPTION_EXPLICIT.fullmatch(layer.name):
            new = layer.name
        # InceptionV3 always chains conv -> BN -> ReLU: name the two after their convolution.
        elif kind == "BatchNormalization":
            new = names[producer[id(layer.input)]] + "_bn"
        elif kind == "Activation":
            new = names[producer[id(layer.input)]].removesuffix("_bn") + "_relu"
        elif kind in _INCEPTION_KINDS:
            counts[block, kind] += 1
            new = f"{block}_{_INCEPTION_KINDS[kind]}{counts[block, kind]}"
        else:
            raise ValueError(f"InceptionV3 layer {layer.name}: unexpected layer type {kind}")
        names[layer.name] = new
        mixed = re.fullmatch(r"mixed(\d+)", layer.name)
        if mixed:
            block = f"mixed{int(mixed[1]) + 1}"
        elif block == "stem" and consumers[id(layer.output)] > 1:
            block = "mixed0"  # the stem ends where the first block branches
    return names


def _inception_v3(spec: dict[str, Any]) -> keras.Model:
    """keras.applications.InceptionV3, cloned with the stable names of `_inception_layer_names`.

    Cloning builds fresh layers from their configs (new weights, random like the original),
    so the weight paths carry the new names too.
    """
    keras = _keras()
    original = _application(spec)
    names = _inception_layer_names(original)

    def rename(layer: Any) -> Any:
        config = layer.get_config()
        config["name"] = names[layer.name]
        return layer.__class__.from_config(config)

    # The clone's new Input keeps the original's name, "input" (see `_application`).
    return keras.models.clone_model(original, clone_function=rename)


def _alexnet(spec: dict[str, Any]) -> keras.Model:
    """torchvision's single-tower AlexNet ("One weird trick", Krizhevsky 2014) in Keras.

    torchvision pads the first convolution by 2 on every side; Keras has no symmetric
    numeric padding on Conv2D, so an explicit ZeroPadding2D(2) comes first. At 224x224 the
    feature map before the classifier is 6x6x256, which makes torchvision's
    AdaptiveAvgPool2d((6, 6)) an identity, so it is left out. 61,100,840 parameters.
    """
    keras = _keras()
    layers = keras.layers
    classes = spec.get("classes", _IMAGENET_CLASSES)
    inputs = keras.Input(shape=(224, 224, 3), name="input")
    x = layers.ZeroPadding2D(padding=2, name="conv1_pad")(inputs)
    x = layers.Conv2D(64, 11, strides=4, padding="valid", activation="relu", name="conv1")(x)
    x = layers.MaxPooling2D(pool_size=3, strides=2, name="pool1")(x)
    x = layers.Conv2D(192, 5, padding="same", activation="relu", name="conv2")(x)
    x = layers.MaxPooling2D(pool_size=3, strides=2, name="pool2")(x)
    x = layers.Conv2D(384, 3, padding="same", activation="relu", name="conv3")(x)
    x = layers.Conv2D(256, 3, padding="same", activation="relu", name="conv4")(x)
    x = layers.Conv2D(256, 3, padding="same", activation="relu", name="conv5")(x)
    x = layers.MaxPooling2D(pool_size=3, strides=2, name="pool5")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dropout(0.5, name="drop6")(x)
    x = layers.Dense(4096, activation="relu", name="fc6")(x)
    x = layers.Dropout(0.5, name="drop7")(x)
    x = layers.Dense(4096, activation="relu", name="fc7")(x)
    outputs = layers.Dense(classes, name="predictions")(x)
    return keras.Model(inputs, outputs, name="alexnet")


def _mlp(spec: dict[str, Any]) -> keras.Model:
    """Dense + ReLU hidden layers, then a Dense logits layer."""
    keras = _keras()
    inputs = keras.Input(shape=(spec["inputs"],), name="input")
    x = inputs
    for i, units in enumerate(spec["hidden"], start=1):
        x = keras.layers.Dense(units, activation="relu", name=f"hidden{i}")(x)
    outputs = keras.layers.Dense(spec["classes"], name="logits")(x)
    return keras.Model(inputs, outputs, name="mlp")


def _small_cnn(spec: dict[str, Any]) -> keras.Model:
    """3x3 "same" Conv2D + ReLU per filter count, Flatten, Dense + ReLU, Dense logits."""
    keras = _keras()
    layers = keras.layers
    inputs = keras.Input(shape=tuple(spec["input_shape"]), name="input")
    x = inputs
    for i, filters in enumerate(spec["filters"], start=1):
        x = layers.Conv2D(filters, 3, padding="same", activation="relu", name=f"conv{i}")(x)
    x = layers.Flatten(name="flatten")(x)
    x = layers.Dense(spec["dense"], activation="relu", name="fc")(x)
    outputs = layers.Dense(spec["classes"], name="logits")(x)
    return keras.Model(inputs, outputs, name="small_cnn")


def _transformer(spec: dict[str, Any]) -> keras.Model:
    """A GPT decoder by its shape (`model.transformer`, style gpt): token and learned
    position embeddings, `layers` pre-norm blocks (LayerNorm, causal multi-head attention,
    residual; LayerNorm, Dense `ffn_hidden` with GeLU, Dense back, residual), a final
    LayerNorm, and logits over the vocabulary through the embedding's own matrix (tied,
    as GPT's; Narayanan et al. 2021's Eq. 2 counts these parameters, the final norm's 2h
    aside)."""
    keras = _keras()
    layers, ops = keras.layers, keras.ops
    h, s = spec["hidden"], spec["sequence"]
    class Positions(layers.Layer):  # type: ignore[misc,name-defined]
        """A learned embedding of each position, added to the tokens' (s x h weights)."""

        def build(self, input_shape: Any) -> None:
            self.table = self.add_weight(shape=(s, h), initializer="uniform", name="table")

        def call(self, inputs: Any) -> Any:
            return inputs + self.table

    tokens = keras.Input(shape=(s,), dtype="int32", name="tokens")
    embed = layers.Embedding(spec["vocab"], h, name="embeddings")
    x = Positions(name="positions")(embed(tokens))
    for i in range(spec["layers"]):
        y = layers.LayerNormalization(epsilon=1e-5, name=f"layer{i}_norm1")(x)
        y = layers.MultiHeadAttention(
            spec["heads"], h // spec["heads"], name=f"layer{i}_attention"
        )(y, y, use_causal_mask=True)
        x = x + y
        y = layers.LayerNormalization(epsilon=1e-5, name=f"layer{i}_norm2")(x)
        y = layers.Dense(spec["ffn_hidden"], activation="gelu", name=f"layer{i}_mlp1")(y)
        x = x + layers.Dense(h, name=f"layer{i}_mlp2")(y)
    x = layers.LayerNormalization(epsilon=1e-5, name="final_norm")(x)

    class TiedLogits(layers.Layer):  # type: ignore[misc,name-defined]
        """x E^T: the output layer shares the embedding's matrix."""

        def call(self, inputs: Any) -> Any:
            return ops.matmul(inputs, ops.transpose(embed.embeddings))

    logits = TiedLogits(name="logits")(x)
    return keras.Model(tokens, logits, name="transformer")


_BUILDERS: dict[str, Callable[[dict[str, Any]], keras.Model]] = {
    **dict.fromkeys(_APPLICATIONS, _application),
    "inception_v3": _inception_v3,
    "alexnet": _alexnet,
    "mlp": _mlp,
    "small_cnn": _small_cnn,
    "transformer": _transformer,
}


def build_model(keras_spec: dict[str, Any]) -> keras.Model:
    """Build the (uncompiled, randomly initialised) Keras model a catalog `keras:` spec names.

    `keras_spec["builder"]` picks the builder; the other keys are the builder's options,
    defaults filled in from `scenarios.keras_layers.DEFAULT_SPECS`. Raises ValueError for an
    unknown builder or a bad option, before TensorFlow is imported.
    """
    spec = resolve_spec(keras_spec)
    return _BUILDERS[spec["builder"]](spec)


def rate_schedule(s: Schedule) -> Any:
    """`workloads.schedule.Schedule` as a Keras schedule of the optimizer's update count
    (its `iterations`, which a checkpoint restores): the rate each update applies."""
    import keras
    from keras import ops

    class Scheduled(keras.optimizers.schedules.LearningRateSchedule):  # type: ignore[misc]
        def __call__(self, step: Any) -> Any:
            u = ops.cast(step, "float32")
            if s.decay == "step":
                passed = sum(ops.cast(u >= m, "float32") for m in s.milestones)
                after = s.peak * ops.power(s.factor, passed)
            elif s.decay == "cosine":
                span = max(s.total_updates - s.warmup_updates, 1.0)
                done = ops.clip((u - s.warmup_updates) / span, 0.0, 1.0)
                after = s.peak * 0.5 * (1.0 + ops.cos(math.pi * done))
            else:
                after = s.peak + 0.0 * u
            if s.warmup_updates <= 0:
                return after
            warming = s.base + (s.peak - s.base) * u / s.warmup_updates
            return ops.where(u < s.warmup_updates, warming, after)

        def get_config(self) -> dict[str, Any]:
            return dataclasses.asdict(s)

    return Scheduled()


def build_for_training(tf: Any, job: Model, strategy: Any) -> tuple[Any, ...]:
    """Model and optimizer under the strategy, the loss, the input shape and class count.

    SGD with momentum 0.9 at the job's schedule (`rate_schedule`) or `job.learning_rate`;
    the optimizer's slots are made at once, under the strategy (made lazily inside a
    replica function they are not distributed, and the all-reduce finds no destinations).
    """
    keras = tf.keras
    with strategy.scope():
        model = build_model(job.keras)
        rate = job.learning_rate if job.schedule is None else rate_schedule(job.schedule)
        optimizer = keras.optimizers.SGD(learning_rate=rate, momentum=0.9)
        optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction="none")
    shape = tuple(model.inputs[0].shape[1:])
    classes = int(model.outputs[0].shape[-1])
    return model, optimizer, loss_fn, shape, classes
