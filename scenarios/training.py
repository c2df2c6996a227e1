"""The scenario's `training` section: batch, steps, data and the learning-rate schedule
(the rates themselves: `scenarios/schedule.py`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from .fields import Strict, _LocatedError

#: images in scikit-learn's bundled digits set (`training.data: digits`)
DIGITS_SAMPLES = 1797


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
    base: float = Field(default=0.1, gt=0)
    scaling: Literal["linear", "sqrt", "none"] = "linear"
    warmup_epochs: float = Field(default=0.0, ge=0)
    decay: Decay = Decay()

    @model_validator(mode="before")
    @classmethod
    def _plain_number(cls, data: Any) -> Any:
        return (
            {"base": data} if isinstance(data, int | float) and not isinstance(data, bool) else data
        )


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

    @property
    def epoch_samples(self) -> int | None:
        """The samples of one epoch, where known."""
        if self.dataset_samples is not None:
            return self.dataset_samples
        return DIGITS_SAMPLES if self.data == "digits" else None

    @model_validator(mode="after")
    def _epochs_known(self) -> TrainingSpec:
        lr = self.learning_rate
        uses = (
            "learning_rate.warmup_epochs"
            if lr.warmup_epochs > 0
            else "learning_rate.decay.milestones"
            if lr.decay.milestones
            else None
        )
        if uses and self.epoch_samples is None:
            raise _LocatedError(
                ("dataset_samples",),
                f"needed by {uses} (an epoch is the training set's samples); give it, or "
                "train on data: digits",
            )
        return self
