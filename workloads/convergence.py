"""Statistical efficiency, the math: the progress each update of a schedule makes towards a
target (the model and its parameters: `scenarios.sections.convergence`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from scenarios import vocab
from scenarios.sections.convergence import ConvergenceSpec
from scenarios.sections.training import Target

#: updates integrated one by one; beyond, in this many chunks of equal count
EXACT_UPDATES = 20_000


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

    return pd.DataFrame(
        {
            "point": point_id,
            "replication": replication,
            **{k: curve[k] for k in ("step", "samples", "epoch", "time_s")},
            "metric": metric,
            "value": curve["value"],
        }
    ).reindex(columns=list(vocab.CURVE_COLUMNS))
