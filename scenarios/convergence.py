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
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import Field, model_validator

from .fields import Count, Strict
from .training import Target

#: updates integrated one by one; beyond, in this many chunks of equal count
EXACT_UPDATES = 20_000


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


def stale_factor(staleness: np.ndarray | float) -> np.ndarray:
    """c(tau) = 1 / sin(pi / (2 (2 tau + 1))): how much the stable rate of gradient
    descent shrinks when its gradient is tau updates old (1 at tau = 0, 2 at tau = 1)."""
    tau = np.maximum(np.asarray(staleness, dtype=float), 0.0)
    return 1.0 / np.sin(np.pi / (2.0 * (2.0 * tau + 1.0)))  # type: ignore[no-any-return]


def gain(
    r: np.ndarray | float,
    batch: np.ndarray | float,
    noise: np.ndarray | float,
    stale: np.ndarray | float = 1.0,
) -> np.ndarray:
    """g: an update's progress as a fraction of the best noiseless update's (`stale`:
    the staleness factor c(tau), on the curvature's part of the overshoot)."""
    r = np.asarray(r, dtype=float)
    return 2.0 * r - r * r * (np.asarray(stale) + np.asarray(noise) / np.asarray(batch))  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Updates:
    """A run's updates in order: the rate of each, the samples it averages and the
    staleness of its gradient, on a training set of `epoch_samples` (None: unknown, and
    every update counts as past the early phase)."""

    rates: np.ndarray
    batches: np.ndarray
    staleness: np.ndarray
    epoch_samples: float | None = None

    def __len__(self) -> int:
        return len(self.rates)

    @property
    def samples(self) -> np.ndarray:
        """The samples trained once each update is applied."""
        return np.cumsum(np.asarray(self.batches, dtype=float))  # type: ignore[no-any-return]

    @property
    def epochs(self) -> np.ndarray:
        """The epochs trained when each update is computed (before it)."""
        if not self.epoch_samples:
            return np.full(len(self), np.inf)
        return (self.samples - self.batches) / self.epoch_samples  # type: ignore[no-any-return]


def progress(spec: ConvergenceSpec, updates: Updates) -> np.ndarray:
    """e after each update (small-batch samples; never below 0, where training started)."""
    return integrate(spec, updates)[0]


def values(spec: ConvergenceSpec, updates: Updates) -> np.ndarray:
    """The metric after each update: its progress, and the lasting damage done so far."""
    e, damage = integrate(spec, updates)
    return spec.metric_at(e, damage)


def integrate(spec: ConvergenceSpec, updates: Updates) -> tuple[np.ndarray, np.ndarray]:
    """e after each update, and the lasting damage done by then (the fraction of the way
    the asymptote has moved back to `initial`).

    Each update adds B_noise(e) x g, and where the curvature alone overshoots, its
    B_noise(e) x (r^2 c - 2 r) weighed by exp(-epochs / early_epochs) adds to the
    damage's sum L.
    Up to EXACT_UPDATES updates are taken one by one; a longer run is taken in
    EXACT_UPDATES chunks of equal count, each at its mean rate, batch, staleness factor
    and epoch and at the noise scale where it starts (the rate changes little within a
    chunk, and the noise scale by less than the chunk's own progress)."""
    n = len(updates)
    if n == 0:
        return np.empty(0), np.empty(0)
    epochs = updates.epochs
    rates = updates.rates / spec.lr_max_at(epochs)
    stale = stale_factor(updates.staleness)
    batches = updates.batches.astype(float)
    early = spec.early_damage > 0 and spec.early_epochs > 0
    weight = np.exp(-epochs / spec.early_epochs) if early else np.zeros(n)
    chunks = min(n, EXACT_UPDATES)
    edges = np.linspace(0, n, chunks + 1).round().astype(int)
    counts = np.diff(edges)
    if chunks < n:
        r, b, c, w = (
            np.add.reduceat(x, edges[:-1]) / counts for x in (rates, batches, stale, weight)
        )
    else:
        r, b, c, w = rates, batches, stale, weight
    r_l, b_l, c_l, w_l, k_l = r.tolist(), b.tolist(), c.tolist(), w.tolist(), counts.tolist()
    noise0, scale, growth = float(spec.noise_scale), float(spec.scale_samples), spec.noise_growth
    out = np.empty(chunks)
    lost = np.zeros(chunks)
    e = overshot = 0.0
    for i in range(chunks):
        noise = noise0 * (1.0 + e / scale) ** growth if growth else noise0
        ri = r_l[i]
        e += k_l[i] * noise * (2.0 * ri - ri * ri * (c_l[i] + noise / b_l[i]))
        unstable = ri * ri * c_l[i] - 2.0 * ri  # the curvature's overshoot alone
        if unstable > 0.0 and early:
            overshot += w_l[i] * k_l[i] * noise * unstable
        if e < 0.0:
            e = 0.0
        out[i] = e
        lost[i] = overshot
    damage = -np.expm1(-spec.early_damage * lost / scale)
    if chunks == n:
        return out, damage
    # within a chunk, progress and damage are spread evenly over its updates
    within = (np.arange(n) - np.repeat(edges[:-1], counts) + 1) / np.repeat(counts, counts)

    def spread(x: np.ndarray) -> np.ndarray:
        before = np.concatenate([[0.0], x[:-1]])
        return np.repeat(before, counts) + within * np.repeat(x - before, counts)  # type: ignore[no-any-return]

    return spread(out), spread(damage)


def evaluations(updates: int, every: int) -> np.ndarray:
    """The update counts after which the metric is measured: every `every` updates, and
    after the last."""
    marks = np.arange(every, updates + 1, every)
    if updates and (not len(marks) or marks[-1] != updates):
        marks = np.append(marks, updates)
    return marks


def curve(
    spec: ConvergenceSpec,
    updates: Updates,
    ends: np.ndarray,
    every: int,
    eval_s: float,
    start: float = 0.0,
    held: bool = False,
) -> dict[str, np.ndarray]:
    """The predicted curve, as run-real measures it: the metric after every `every`
    updates (and the last), with the samples and epochs trained and the time at the end
    of that evaluation. `ends[k]` is when update k was applied in a run without
    evaluations; each evaluation takes `eval_s` and holds up every update after it (the
    job waits for it), so the j-th evaluation ends j x eval_s later. With `held`, `ends`
    already holds the evaluations before each (the engine ran them): the j-th ends
    eval_s after its update. Times from `start`."""
    metric = values(spec, updates)
    marks = evaluations(len(updates), every)
    if not len(marks):
        empty = np.empty(0)
        return {
            "step": empty.astype(int),
            "samples": empty,
            "epoch": empty,
            "time_s": empty,
            "value": empty,
        }
    samples = updates.samples[marks - 1]
    return {
        "step": marks,
        "samples": samples,
        "epoch": samples / updates.epoch_samples if updates.epoch_samples else samples * np.nan,
        "time_s": ends[marks - 1] - start + eval_s * (1 if held else np.arange(1, len(marks) + 1)),
        "value": metric[marks - 1],
    }


def to_target(
    curve: dict[str, np.ndarray], metric: str, value: float
) -> tuple[dict[str, float], str | None]:
    """results.csv's time-to-target columns from a curve (its evaluations in order:
    `step`, `samples`, `epoch`, `time_s`, `value`, as `curve` gives them), and why they
    are empty where the target was not met (None where it was). Both backends call it on
    the curve they write to curves.csv."""
    target = Target(metric=metric, value=value)  # type: ignore[arg-type]
    steps, values = curve["step"], curve["value"]
    final = float(values[-1]) if len(values) else math.nan
    row = dict.fromkeys(
        ("steps_to_target", "samples_to_target", "epochs_to_target", "time_to_target_s"), math.nan
    )
    row["final_metric"] = final
    met = [i for i, v in enumerate(values) if target.met(float(v))]
    if not met:
        last = int(steps[-1]) if len(steps) else 0
        sign = "<" if metric == "accuracy" else ">"
        return row, (
            f"not reached in {last} updates: {metric} {final:.4g} {sign} {value:g} at the last "
            "evaluation"
        )
    i = met[0]
    row.update(
        steps_to_target=float(steps[i]),
        samples_to_target=float(curve["samples"][i]),
        epochs_to_target=float(curve["epoch"][i]),
        time_to_target_s=float(curve["time_s"][i]),
    )
    return row, None


def curve_frame(point_id: str, replication: int, metric: str, curve: dict[str, np.ndarray]) -> Any:
    """curves.csv's rows of one run (replication) of a point, from its curve."""
    import pandas as pd

    from . import vocab

    return pd.DataFrame(
        {
            "point": point_id,
            "replication": replication,
            **{k: curve[k] for k in ("step", "samples", "epoch", "time_s")},
            "metric": metric,
            "value": curve["value"],
        }
    ).reindex(columns=list(vocab.CURVE_COLUMNS))
