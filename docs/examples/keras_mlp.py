"""A Keras model of one's own, for `trainscale model-table docs.examples.keras_mlp:build`:
an MLP on 784 inputs, two hidden layers of 512 and 10 classes (669,706 parameters)."""

from __future__ import annotations

from typing import Any


def build() -> Any:
    import keras

    inputs = keras.Input(shape=(784,))
    x = keras.layers.Dense(512, activation="relu", name="hidden1")(inputs)
    x = keras.layers.Dense(512, activation="relu", name="hidden2")(x)
    outputs = keras.layers.Dense(10, activation="softmax", name="logits")(x)
    return keras.Model(inputs, outputs, name="keras-mlp")
