"""Training data for run-real: `training.data: digits` is scikit-learn's bundled digits set.

1,797 images of handwritten digits, 8 x 8 pixels of 0-16, ten classes: real data that
ships with scikit-learn (no download), so the loss of a real run really falls. Pixels are
scaled to [0, 1] and shaped to the model's input: 64 features for an MLP, or 8 x 8 x 1 for
a small CNN. Models whose input is not 64 values are refused before anything starts.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def digits(shape: Any) -> tuple[np.ndarray, np.ndarray]:
    """The whole digits set as (features shaped like the model's input, int32 labels)."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    x = (bunch.data / 16.0).astype(np.float32).reshape((-1, *tuple(shape)))
    return x, bunch.target.astype(np.int32)


def digits_split(shape: Any, holdout: int, seed: int) -> tuple[np.ndarray, ...]:
    """The digits set split into (x_train, y_train, x_held, y_held): `holdout` images
    drawn from a permutation seeded by the run's seed, the same in every process of a
    job; with `holdout` 0, all of it trains and nothing is held out."""
    x, y = digits(shape)
    if holdout <= 0:
        return x, y, x[:0], y[:0]
    order = np.random.default_rng([seed, 0x5EED]).permutation(len(y))
    held, train = order[:holdout], np.sort(order[holdout:])
    return x[train], y[train], x[held], y[held]
