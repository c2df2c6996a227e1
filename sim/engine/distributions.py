"""Small distribution objects (Ciw's `dists`): they check parameters, expose `mean`, print well."""

from __future__ import annotations

import math

import numpy as np


class LogNormal:
    """Lognormal multiplier with mean 1 and a given coefficient of variation.

    For CV c: sigma^2 = ln(1 + c^2) and mu = -sigma^2 / 2, so E[X] = 1 and sd(X) = c.
    """

    def __init__(self, cv: float):
        if not (cv >= 0 and math.isfinite(cv)):
            raise ValueError(f"LogNormal: cv must be a finite number >= 0, not {cv!r}")
        self.cv = float(cv)
        self.sigma = math.sqrt(math.log1p(self.cv**2))
        self.mu = -0.5 * self.sigma**2

    @property
    def mean(self) -> float:
        return 1.0

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        if self.cv == 0:
            return np.ones(size)
        return rng.lognormal(self.mu, self.sigma, size)

    def __repr__(self) -> str:
        return f"LogNormal(cv={self.cv:g})"
