"""The scenario's `training` section: batch, steps, data, the learning-rate schedule (the
rates themselves: `workloads/schedule.py`), and the target training runs to (`target`,
bounded by `max_steps` or `max_epochs`, measured on a held-out split every
`evaluation.every_steps` updates)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from ..fields import Bytes, Strict, _LocatedError

#: images in scikit-learn's bundled digits set (`training.data: digits`)
DIGITS_SAMPLES = 1797


def scale_of(scaling: str, k: float) -> float:
    """The factor on the base rate for an update k times the base's (k workers' gradients,
    or k times `base_batch` samples)."""
    return {"linear": float(k), "sqrt": math.sqrt(k), "none": 1.0}[scaling]


class Decay(Strict):
    """What the rate does after the warm-up: `none`, `step` (times `factor` at each of the
    `milestones`, in epochs) or `cosine` (to 0 at the last update)."""

    kind: Literal["none", "step", "cosine"] = "none"
    milestones: tuple[float, ...] = ()  # epochs, increasing (step)
    factor: float = Field(default=0.1, gt=0)

    @model_validator(mode="before")
    @classmethod
    def _plain_kind(cls, data: Any) -> Any:
        return {"kind": data} if isinstance(data, str) else data

    @model_validator(mode="after")
    def _milestones(self) -> Decay:
        if self.kind == "step" and not self.milestones:
            raise ValueError("milestones: step decay needs the epochs to decay at")
        if self.kind != "step" and self.milestones:
            raise ValueError(f"milestones: only step decay has them, not {self.kind}")
        if any(b <= a for a, b in zip(self.milestones, self.milestones[1:], strict=False)):
            raise ValueError(f"milestones: must increase, not {list(self.milestones)}")
        if any(m <= 0 for m in self.milestones):
            raise ValueError("milestones: epochs after the start (> 0)")
        return self


class LearningRate(Strict):
    """The rate rule (workloads/schedule.py): `base` is the rate for a batch of
    `base_batch` samples, scaled by `scaling` with the batch an update averages (Goyal et
    al.: 0.1 per 256 images, linear). Without `base_batch`, `base` is the rate of one
    worker's batch and scales with the workers an update averages, whatever the batch."""

    base: float = Field(default=0.1, gt=0)
    base_batch: int | None = Field(default=None, ge=1)
    scaling: Literal["linear", "sqrt", "none"] = "linear"
    warmup_epochs: float = Field(default=0.0, ge=0)
    decay: Decay = Decay()

    def ratio(self, workers: int, batch: float) -> float:
        """k, what `scaling` applies to, for an update that averages `workers` gradients
        of `batch` samples in all: batch / base_batch, or the workers without it."""
        return batch / self.base_batch if self.base_batch else float(workers)

    def peak(self, workers: int, batch: float) -> float:
        """The scaled rate of such an update: base x k (linear), x sqrt(k), or x 1."""
        return self.base * scale_of(self.scaling, self.ratio(workers, batch))

    @model_validator(mode="before")
    @classmethod
    def _plain_number(cls, data: Any) -> Any:
        return (
            {"base": data} if isinstance(data, int | float) and not isinstance(data, bool) else data
        )


class Target(Strict):
    """What training runs to: `accuracy` at least `value`, or `loss` at most `value`, on
    the held-out split."""

    metric: Literal["accuracy", "loss"]
    value: float

    @model_validator(mode="after")
    def _in_range(self) -> Target:
        if self.metric == "accuracy" and not 0 < self.value <= 1:
            raise _LocatedError(("value",), f"{self.value}: an accuracy is a fraction in (0, 1]")
        if self.metric == "loss" and self.value <= 0:
            raise _LocatedError(("value",), f"{self.value}: a loss target is above 0")
        return self

    def met(self, metric: float) -> bool:
        if metric != metric:  # NaN: a diverged run meets nothing
            return False
        return metric >= self.value if self.metric == "accuracy" else metric <= self.value


class Evaluation(Strict):
    """How the target metric is measured: every `every_steps` updates (and after the
    last), on the `holdout` fraction of the data set, held out of training."""

    every_steps: int = Field(default=10, ge=1)
    holdout: float = Field(default=0.2, gt=0, lt=1)
    # the held-out samples each evaluation reads, where the data set is not bundled
    # (ImageNet's validation set: 50,000); digits: the holdout fraction of its images
    samples: int | None = Field(default=None, ge=1)


class TrainingSpec(Strict):
    batch_per_worker: int = Field(default=32, ge=1)
    # strong scaling: a global batch fixed across a sweep of worker counts; the scenario
    # then resolves batch_per_worker = global_batch / workers (it must divide evenly)
    global_batch: int | None = Field(default=None, ge=1)
    steps: int = Field(default=100, ge=1)
    # equal work across strategies: the samples the measured steps train, all workers
    # together; the scenario then resolves each point's steps from it (see
    # ScenarioSpec._resolve_samples)
    samples: int | None = Field(default=None, ge=1)
    warmup_steps: int = Field(default=5, ge=0)
    data: Literal["synthetic", "digits"] = "synthetic"
    # the samples of one epoch (the training set); digits: its 1,797 images
    dataset_samples: int | None = Field(default=None, ge=1)
    learning_rate: LearningRate = LearningRate()
    # the optimizer's state per parameter, where it is not one slot of the parameters'
    # size (SGD with momentum, what run-real trains with): Adam in mixed precision keeps
    # fp32 master weights, momentum and variance, 12 B (Rajbhandari et al. 2020's K)
    optimizer_state: Bytes | None = None
    # train until the target is met on the held-out split, or the bound
    target: Target | None = None
    # the bound: updates (warm-up steps included), or epochs of them; either replaces steps
    max_steps: int | None = Field(default=None, ge=1)
    max_epochs: float | None = Field(default=None, gt=0)
    evaluation: Evaluation = Evaluation()

    @property
    def holdout_samples(self) -> int:
        """The samples held out for evaluation (digits with a target: that fraction of its
        images; otherwise none, or the user's data set is what `dataset_samples` says)."""
        if self.target is None or self.data != "digits" or self.dataset_samples is not None:
            return 0
        return round(DIGITS_SAMPLES * self.evaluation.holdout)

    @property
    def eval_samples(self) -> int:
        """The samples one evaluation reads."""
        if self.evaluation.samples is not None:
            return self.evaluation.samples
        return self.holdout_samples

    @property
    def epoch_samples(self) -> int | None:
        """The samples of one epoch (the training split), where known."""
        if self.dataset_samples is not None:
            return self.dataset_samples
        return DIGITS_SAMPLES - self.holdout_samples if self.data == "digits" else None

    @model_validator(mode="after")
    def _one_bound(self) -> TrainingSpec:
        if self.max_steps is not None and self.max_epochs is not None:
            raise _LocatedError(("max_epochs",), "give max_steps or max_epochs, not both")
        return self

    @model_validator(mode="after")
    def _epochs_known(self) -> TrainingSpec:
        lr = self.learning_rate
        uses = (
            "learning_rate.warmup_epochs"
            if lr.warmup_epochs > 0
            else "learning_rate.decay.milestones"
            if lr.decay.milestones
            else "max_epochs"
            if self.max_epochs is not None
            else None
        )
        if uses and self.epoch_samples is None:
            raise _LocatedError(
                ("dataset_samples",),
                f"needed by {uses} (an epoch is the training set's samples); give it, or "
                "train on data: digits",
            )
        return self
