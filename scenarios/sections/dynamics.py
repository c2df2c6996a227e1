"""The scenario's stragglers, failures and checkpoints: what interrupts or slows a job."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator

from ..fields import Bandwidth, PositiveSeconds, Seconds, Strict


class SlowWorkers(Strict):
    workers: tuple[Annotated[int, Field(ge=0)], ...] = Field(min_length=1)
    factor: float = Field(gt=0)


class Transient(Strict):
    probability: float = Field(ge=0, le=1)
    delay: Seconds


class StragglerSpec(Strict):
    jitter: float = Field(default=0.0, ge=0)  # coefficient of variation, lognormal
    # each device's own speed, drawn once per run: a coefficient of variation (lognormal,
    # mean 1) of the factor its compute takes at every step, as chips of one model differ
    variability: float = Field(default=0.0, ge=0)
    slow: tuple[SlowWorkers, ...] = ()
    transient: Transient | None = None


class ScheduledFailure(Strict):
    role: Literal["worker", "ps", "chief"]
    index: int = Field(default=0, ge=0)
    at_step: int | None = Field(default=None, ge=0)
    at_time: Seconds | None = None
    downtime: Seconds = 0.0

    @model_validator(mode="after")
    def _one_trigger(self) -> ScheduledFailure:
        if (self.at_step is None) == (self.at_time is None):
            raise ValueError("give exactly one of at_step or at_time")
        return self


class RandomFailureParams(Strict):
    mtbf_per_host: PositiveSeconds
    downtime: Seconds = 0.0
    roles: tuple[Literal["worker", "ps", "chief"], ...] = ("worker", "ps", "chief")


class RandomFailure(Strict):
    random: RandomFailureParams


def _failure_kind(value: Any) -> Any:
    if isinstance(value, dict) and "random" in value:
        return RandomFailure.model_validate(value)
    return value


FailureSpec = Annotated[ScheduledFailure | RandomFailure, BeforeValidator(_failure_kind)]


class CheckpointSpec(Strict):
    every_steps: int | None = Field(default=None, ge=1)
    write_bandwidth: Bandwidth = Field(default="1 GB/s", validate_default=True)
    restart_overhead: Seconds = Field(default="30 s", validate_default=True)
