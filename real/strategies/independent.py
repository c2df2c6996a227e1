"""`strategy.kind: independent` for real: one single-worker training process per trial
(real/trials.py runs them on the slots)."""

from __future__ import annotations

import dataclasses

from scenarios.sections.trials import trial_grid
from scenarios.spec import ScenarioSpec
from workloads.schedule import schedule_of

from ..job import Job, Place, Training, Trial, make
from .base import Probe, stragglers_of

#: the hyperparameters a trial's job itself takes
TAKEN = ("batch_per_worker", "steps", "learning_rate")


class Independent:
    def problems(self, spec: ScenarioSpec) -> list[str]:
        return ["failures with independent trials"] if spec.failures else []

    def jobs(self, spec: ScenarioSpec, place: Place, training: Training) -> list[Job]:
        """One single-worker job per combination of `strategy.trials`, with worker 0's
        stragglers, whatever the slots or `place.workers`: a trial trains alone, so its
        rate is one worker's (unscaled), whatever `training` was scaled for. The
        hyperparameters the job itself takes (batch, steps, learning rate) are set in
        it."""
        alone = schedule_of(spec, 1)
        training = training.replace(schedule=alone, learning_rate=alone.peak)
        common = make(Trial, place, training, **stragglers_of(spec, 0))
        jobs: list[Job] = []
        for index, params in enumerate(trial_grid(dict(spec.strategy.trials or {}))):
            taken = {k: params[k] for k in TAKEN if k in params}
            if "learning_rate" in params and common.schedule is not None:
                rate = params["learning_rate"]
                taken["schedule"] = dataclasses.replace(common.schedule, base=rate, peak=rate)
            jobs.append(
                common.replace(index=0, workers=1, trial=index, hyperparameters=params, **taken)
            )
        return jobs

    def probes(self, spec: ScenarioSpec) -> list[Probe]:
        return []
