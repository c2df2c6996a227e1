"""Statistical efficiency: the progress each update of a schedule makes towards a target.

The simulator turns a point's updates (their rates, the samples each averages, the
staleness of each) into a curve of the target metric, and so into steps, samples and time
to the target. The model is the noisy quadratic of McCandlish et al. 2018 ("An Empirical
Model of Large-Batch Training", arXiv 1812.06162, eq. 2.3-2.6). For an update at rate
eps averaging the gradients of B samples, the loss falls by

    dL(eps) = eps |G|^2 - eps^2 / 2 (G'HG) (1 + B_noise / B)

so with r = eps / eps_max (eps_max = |G|^2 / G'HG, the best noiseless rate) the update
makes the fraction

    g = 2 r - r^2 (1 + B_noise / B)

of the progress of the best noiseless update. At the best rate, r* = 1 / (1 + B_noise/B),
g* = B / (B + B_noise): in samples of the small-batch limit, an update is worth
B_noise * g* = B / (1 + B / B_noise). Steps and samples to a target are then McCandlish
et al.'s S = S_min (1 + B_noise / B) and E = E_min (1 + B / B_noise), so that
(S / S_min - 1)(E / E_min - 1) = 1 (their eq. 2.11). Progress is counted in those samples
(`e`, "small-batch samples"), and the metric is a learning curve of them:

    metric(e) = final + (initial - final) (1 + (e / scale_samples) ^ shape) ^ (-exponent / shape)

(`shape` 1 by default: a power law from the start; above 1 the curve starts flat, as the
loss of a network from its initialisation stays near chance before it falls, and ends
on the same power law.)

What the model adds to the quadratic, each a published mechanism:

- **The noise scale grows as training proceeds** (McCandlish et al. sec. 3: B_noise rises
  as the loss falls): B_noise(e) = noise_scale (1 + e / scale_samples) ^ noise_growth.
  With growth, a constant rate stalls where g = 0 (SGD's noise floor, lower for a smaller
  rate over batch), and decay moves it down. `noise_growth: 0` is McCandlish's model with
  one noise scale.
- **The linear scaling rule and where it breaks**: a rate scaled by N for a batch N times
  larger keeps r / B, and so the progress per sample, while B << B_noise (Goyal et al.
  2017); as B nears B_noise, g = x (1 - x) for x = B / B_noise falls to 0 and past it
  the update overshoots (g < 0, the metric gets worse).
- **Early sharpness, and warm-up**: early in training the curvature is high (Goyal et al.
  2017 sec. 2.2: the network changes rapidly; Gilmer et al. 2022), modelled as eps_max
  growing from `early_sharpness x lr_max` to `lr_max` with an e-folding of
  `early_epochs` epochs. A large rate at once overshoots; a gradual warm-up does not.
- **Lasting damage from early overshoot**: what an update loses by overshooting early is
  not only ground regained later. A disruption in the first epochs of training leaves
  a deficit that later training does not recover (Achille et al. 2019, "Critical
  Learning Periods in Deep Networks"; Goyal et al. 2017 Table 1: 8k without warm-up
  ends 1.1 points worse than with it, after 90 epochs). An update is unstable where the
  curvature alone overshoots, eps x lambda > 2, that is r^2 c(tau) > 2 r (noise makes
  an update wander, not diverge); what it overshoots by, B_noise x (r^2 c(tau) - 2 r)
  small-batch samples, is weighed by how early it is, exp(-epochs / early_epochs), and
  their sum L lifts the curve's asymptote towards `initial` by the fraction
  1 - exp(-early_damage x L / scale_samples).
  `early_damage: 0` (the default) is none.
- **Staleness**: a gradient computed tau updates ago. Gradient descent with delay tau on
  a quadratic is stable for eps * lambda < 2 sin(pi / (2 (2 tau + 1))) (the delayed
  linear recurrence's stability bound), so the curvature's part of the overshoot term
  is multiplied by c(tau) = 1 / sin(pi / (2 (2 tau + 1))): c(0) = 1, c(1) = 2,
  c(tau) ~ 4 tau / pi, and g = 2 r - r^2 (c(tau) + B_noise / B). The noise's part is
  not: a stale gradient is as noisy as a fresh one. Small rates are not penalised; the
  largest usable noiseless rate falls by c(tau).
- **Backup workers**: an update averages the gradients that arrived, (N - b) x B samples.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
from pydantic import Field, model_validator

from ..fields import Count, Strict


class ConvergenceSpec(Strict):
    """A model's statistical efficiency on its data set (`model.convergence`), from the
    catalog (with its sources) or a calibration (`run-real --calibrate`)."""

    name: str = "custom"
    base: str | None = None  # the catalog entry it starts from
    metric: Literal["accuracy", "loss"]
    initial: float  # the metric before training (accuracy: chance)
    final: float  # the learning curve's asymptote
    scale_samples: Count  # small-batch samples at which the gap to `final` has halved^(1/exponent)
    exponent: float = Field(default=1.0, gt=0)
    shape: float = Field(default=1.0, gt=0)  # the onset: 1 a power law, above 1 a flat start
    noise_scale: Count  # B_noise at the start of training, samples
    noise_growth: float = Field(default=0.0, ge=0)
    lr_max: float = Field(gt=0)  # the best noiseless rate, once past the early phase
    early_sharpness: float = Field(default=1.0, gt=0, le=1)
    early_epochs: float = Field(default=0.0, ge=0)
    early_damage: float = Field(default=0.0, ge=0)  # per scale_samples overshot early
    source: str = ""

    @model_validator(mode="after")
    def _direction(self) -> ConvergenceSpec:
        if not self.scale_samples > 0 or not self.noise_scale > 0:
            raise ValueError("scale_samples and noise_scale: samples, above 0")
        if self.metric == "accuracy" and not self.initial < self.final:
            raise ValueError(f"final: an accuracy curve rises ({self.initial} to {self.final})")
        if self.metric == "loss" and not self.initial > self.final:
            raise ValueError(f"final: a loss curve falls ({self.initial} to {self.final})")
        return self

    def metric_at(self, e: np.ndarray | float, damage: np.ndarray | float = 0.0) -> np.ndarray:
        """The metric after `e` small-batch samples of progress, with the asymptote moved
        the fraction `damage` of the way back to `initial` (lasting damage, 0 to 1)."""
        e = np.maximum(np.asarray(e, dtype=float), 0.0)
        final = self.final + np.asarray(damage, dtype=float) * (self.initial - self.final)
        k = self.shape
        gap = (1.0 + (e / self.scale_samples) ** k) ** (-self.exponent / k)
        return final + (self.initial - final) * gap  # type: ignore[no-any-return]

    def progress_for(self, metric: float) -> float:
        """The small-batch samples at which the curve reaches `metric` (inf if never)."""
        gap = (metric - self.final) / (self.initial - self.final)
        if gap <= 0:
            return math.inf
        if gap >= 1:
            return 0.0
        k = self.shape
        return float(self.scale_samples * (gap ** (-k / self.exponent) - 1.0) ** (1.0 / k))

    def noise_at(self, e: np.ndarray | float) -> np.ndarray:
        e = np.maximum(np.asarray(e, dtype=float), 0.0)
        return self.noise_scale * (1.0 + e / self.scale_samples) ** self.noise_growth  # type: ignore[no-any-return]

    def lr_max_at(self, epochs: np.ndarray | float) -> np.ndarray:
        """eps_max after `epochs` epochs: from early_sharpness x lr_max towards lr_max."""
        epochs = np.asarray(epochs, dtype=float)
        if self.early_epochs <= 0 or self.early_sharpness >= 1:
            return np.full_like(epochs, self.lr_max)
        rest = (1.0 - self.early_sharpness) * np.exp(-epochs / self.early_epochs)
        return self.lr_max * (1.0 - rest)  # type: ignore[no-any-return]

    def optimal_rate(self, batch: float, e: float = 0.0, epochs: float = math.inf) -> float:
        """McCandlish et al.'s eps_opt(B) = eps_max / (1 + B_noise / B)."""
        return float(self.lr_max_at(epochs) / (1.0 + self.noise_at(e) / batch))
