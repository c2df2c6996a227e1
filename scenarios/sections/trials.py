"""Independent trials (a hyperparameter search): the grid both backends run."""

from __future__ import annotations

import itertools
from typing import Any


def trial_grid(trials: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """The cartesian product of the trial lists, in file order."""
    keys = list(trials)
    return [dict(zip(keys, combo, strict=True)) for combo in itertools.product(*trials.values())]
