"""The learning-rate schedule both backends apply, as a function of the update count.

An update is one step of the optimizer: a synchronous step, or one asynchronous push.
With `training.learning_rate = {base, scaling, warmup_epochs, decay}`:

- the scaled rate is `base x k` (`linear`, Goyal et al. 2017), `base x sqrt(k)` (`sqrt`,
  Krizhevsky 2014) or `base` (`none`). With `base_batch`, k = B / base_batch, B the
  samples an update averages before backup workers drop any (the global batch when
  synchronous, one worker's batch when asynchronous, the copies' batches of a
  pipeline): Goyal et al.'s rule on the minibatch. Without it, k = N, the workers whose
  gradients an update averages (the job's workers when synchronous, 1 when
  asynchronous), whatever their batch;
- warm-up (Goyal et al.'s gradual warm-up): from `base` at update 0 (or the scaled rate,
  where that is lower) the rate grows by the same amount every update, to the scaled
  rate at `warmup_epochs`;
- after it, `decay`: `none`; `step` (the scaled rate times `factor` at each of the
  `milestones`, in epochs: Goyal et al. divide by 10 at epochs 30, 60 and 80); or `cosine`
  (Loshchilov & Hutter 2017, without restarts: from the scaled rate at the end of the
  warm-up to 0 at the last update).

An epoch is `dataset_samples / samples_per_update` updates: the training set over the
samples one update applies (the global batch when synchronous, less the gradients backup
workers drop; one worker's batch when asynchronous).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from scenarios.sections.training import scale_of

if TYPE_CHECKING:
    from scenarios.spec import ScenarioSpec


@dataclass(frozen=True)
class Schedule:
    """The rate at every update (SI: updates are counts, rates plain numbers)."""

    base: float  # the rate at update 0 when warming up
    peak: float  # the scaled rate, reached at the end of the warm-up
    warmup_updates: float = 0.0
    decay: str = "none"  # none | step | cosine
    milestones: tuple[float, ...] = ()  # step: updates at which the rate is multiplied
    factor: float = 0.1
    total_updates: float = 0.0  # cosine: the last update

    @classmethod
    def of(cls, fields: dict[str, Any]) -> Schedule:
        """The schedule from its fields as a job carries them (JSON: milestones a list)."""
        return cls(**{**fields, "milestones": tuple(fields.get("milestones", ()))})

    def rates(self, updates: np.ndarray) -> np.ndarray:
        """The rate at each update count of `updates` (0 is the first update)."""
        u = np.asarray(updates, dtype=float)
        if self.decay == "step":
            passed = (u[..., None] >= np.asarray(self.milestones, dtype=float)).sum(axis=-1)
            after = self.peak * self.factor**passed
        elif self.decay == "cosine":
            span = max(self.total_updates - self.warmup_updates, 1.0)
            done = np.clip((u - self.warmup_updates) / span, 0.0, 1.0)
            after = self.peak * 0.5 * (1.0 + np.cos(np.pi * done))
        else:
            after = np.full_like(u, self.peak)
        if self.warmup_updates <= 0:
            return after
        warming = self.base + (self.peak - self.base) * u / self.warmup_updates
        return np.where(u < self.warmup_updates, warming, after)

    def rate(self, update: float) -> float:
        return float(self.rates(np.array([update]))[0])


def schedule(
    base: float,
    scaling: str,
    k: float,
    samples_per_update: float,
    dataset_samples: float | None,
    warmup_epochs: float = 0.0,
    decay: str = "none",
    milestones_epochs: tuple[float, ...] = (),
    factor: float = 0.1,
    total_updates: float = 0.0,
) -> Schedule:
    """The schedule of a job whose updates are k times the base's (`scale_of`) and apply
    `samples_per_update` samples, on a training set of `dataset_samples` (needed only where
    epochs are: a warm-up or step milestones)."""
    needs_epochs = warmup_epochs > 0 or (decay == "step" and milestones_epochs)
    if needs_epochs and not dataset_samples:
        raise ValueError("epochs need the training set's size (training.dataset_samples)")
    epoch = (dataset_samples or 0.0) / samples_per_update
    peak = base * scale_of(scaling, k)
    return Schedule(
        base=min(base, peak),
        peak=peak,
        warmup_updates=warmup_epochs * epoch,
        decay=decay,
        milestones=tuple(m * epoch for m in milestones_epochs),
        factor=factor,
        total_updates=total_updates,
    )


def schedule_of(spec: ScenarioSpec, workers: int | None = None) -> Schedule:
    """The schedule of a point (with `workers` workers in place of its own): the rate
    scales with the batch a synchronous update averages, or with its workers without
    `base_batch` (asynchronous: one worker's gradient each; a pipeline: its copies'
    batches); an update applies the gradients backup workers leave; the last update is
    the job's last step, warm-up steps included."""
    training, st = spec.training, spec.strategy
    n = spec.workers if workers is None else workers
    per_host = spec.cluster.devices_per_host
    averaged, kept = st.averaged(n, per_host), st.kept(n, per_host)
    lr = training.learning_rate
    return schedule(
        lr.base,
        lr.scaling,
        lr.ratio(averaged, averaged * training.batch_per_worker),
        kept * training.batch_per_worker,
        training.epoch_samples,
        lr.warmup_epochs,
        lr.decay.kind,
        lr.decay.milestones,
        lr.decay.factor,
        training.warmup_steps + training.steps,
    )
