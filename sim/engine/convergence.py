"""Time to target: a simulated run's updates through the statistical-efficiency model.

The event engine times every update of the point (`training.steps` after the warm-up steps:
with a target, the bound). Here each update gets its rate from the point's schedule, the
samples it averaged (the global batch less the backup workers' gradients; one worker's batch
when asynchronous) and its gradient's staleness (recorded per push);
`scenarios.sections.convergence` turns them into the metric at every evaluation. An
evaluation reads the held-out samples through one worker's forward pass and holds up the job
while it runs, as run-real's do: under asynchronous parameter servers the event engine holds
it behind a barrier (sim/strategies/parameter_server/asynchronous.py: the updates in flight
end, then it runs); elsewhere each evaluation delays every update after it by its time.
Times count from the start of the measured steps, as `training_time_s` does (the warm-up
steps' updates count towards the target; their time, which on a real machine includes
tracing the step, does not).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from scenarios import vocab
from scenarios.errors import ScenarioError
from scenarios.sections.backends import AUTO_TIMED_STEPS
from scenarios.spec import ScenarioSpec
from workloads import convergence
from workloads.schedule import schedule_of

from .metrics import measure_begin
from .outcome import SimulationOutcome


def timed_steps(spec: ScenarioSpec) -> tuple[int | None, str]:
    """How many measured steps the engine times (None: every one) and why, by
    `sim.timed_steps`: a number, `all` (or null), or `auto`, which times the first
    AUTO_TIMED_STEPS of a run to a target that is longer, where the steps' timing does
    not change along the run: no failures, no checkpoints (jitter and hiccups are drawn
    alike in every step; persistent stragglers stay as they are)."""
    setting, steps = spec.sim.timed_steps, spec.training.steps
    if isinstance(setting, int):
        if steps <= setting:
            return None, f"sim.timed_steps {setting}, not fewer than the {steps} measured steps"
        return setting, f"sim.timed_steps {setting}"
    if setting != "auto":
        return None, "sim.timed_steps all"
    if spec.training.target is None:
        return None, "no training.target"
    if steps <= AUTO_TIMED_STEPS:
        return None, f"{steps} measured steps, not more than {AUTO_TIMED_STEPS:,}"
    if spec.failures or spec.checkpoint.every_steps:
        return None, "failures or checkpoints (what happens in every step is simulated)"
    if spec.strategy.trains_alone:
        return None, "independent trials"
    return AUTO_TIMED_STEPS, (
        f"sim.timed_steps auto: a target and {steps:,} measured steps, more than "
        f"{AUTO_TIMED_STEPS:,}; the rest at the timed steps' mean"
    )


def updates_of(spec: ScenarioSpec, outcome: SimulationOutcome) -> convergence.Updates:
    """Every update of the point in order, with its rate, samples and staleness (past the
    timed steps, the timed pushes' staleness again, in their order)."""
    n = spec.training.warmup_steps + spec.training.steps
    batch = spec.samples_per_step
    staleness = np.zeros(n)
    if spec.strategy.counts_updates:
        records = outcome.records
        ends = records.column("end")
        kept = _kept(records)
        pushes = records.column("staleness")[kept][np.argsort(ends[kept], kind="stable")]
        if len(pushes):
            staleness = np.resize(pushes, n).astype(float)
    rates = schedule_of(spec).rates(np.arange(n))
    return convergence.Updates(
        rates=rates,
        batches=np.full(n, float(batch)),
        staleness=staleness,
        epoch_samples=spec.training.epoch_samples,
    )


def _kept(records: Any) -> np.ndarray:
    """Pushes not lost to a restart: the last attempt of each (worker, step)."""
    worker, step = records.column("worker"), records.column("step")
    keys = worker.astype(np.int64) * (int(step.max(initial=0)) + 1) + step
    last = np.zeros(len(keys), dtype=bool)
    _, first_from_end = np.unique(keys[::-1], return_index=True)
    last[len(keys) - 1 - first_from_end] = True
    return last


def update_ends(spec: ScenarioSpec, outcome: SimulationOutcome) -> np.ndarray:
    """When each update of the point was applied: as simulated, and past the timed steps
    (`sim.timed_steps`) at the mean interval of the timed measured steps."""
    n = spec.training.warmup_steps + spec.training.steps
    ends = np.asarray(outcome.step_ends, dtype=float)
    if len(ends) >= n:
        return ends[:n]
    begin = measure_begin(spec, outcome)
    measured = len(ends) - spec.training.warmup_steps
    interval = (ends[-1] - begin) / max(measured, 1)
    return np.concatenate([ends, ends[-1] + interval * np.arange(1, n - len(ends) + 1)])


def held_by_engine(spec: ScenarioSpec) -> bool:
    """Whether the event engine holds the job for each evaluation itself: asynchronous
    parameter servers, whose coordinator evaluates behind a barrier
    (sim/strategies/parameter_server/asynchronous.py), as run-real's does, where the engine
    times every update: no failures, `timed_steps` cuts nothing, and a number of
    `sim.timed_steps` is above the steps (`timed_spec` cuts a longer run to exactly that
    many, and sets it: the curve of a cut run charges every evaluation on top of the
    updates, as elsewhere)."""
    return (
        spec.training.target is not None
        and spec.strategy.counts_updates
        and not spec.failures
        and timed_steps(spec)[0] is None
        # the timed part of a cut run (`runner.timed_spec`: as many steps as timed)
        and not (
            isinstance(spec.sim.timed_steps, int) and spec.training.steps >= spec.sim.timed_steps
        )
    )


def target_curve(
    spec: ScenarioSpec, outcome: SimulationOutcome, evaluation_s: float, profile: Any = None
) -> dict[str, np.ndarray] | None:
    """The point's curve at every evaluation (each `evaluation_s` long: the cost model's
    `evaluation_s`), or None where it has no target. A calibration profile's fit for the
    model and data wins over `model.convergence`."""
    target = spec.training.target
    if target is None:
        return None
    calibrated = profile.convergence_for(spec.model.name, spec.training.data) if profile else None
    model = calibrated.fit if calibrated is not None else spec.model.convergence
    if model is None:
        raise ScenarioError(
            f"model.convergence: model {spec.model.name!r} has none, needed by "
            "training.target (name a catalog entry, give one, or calibrate)"
        )
    if model.metric != target.metric:
        raise ScenarioError(
            f"training.target.metric: {target.metric}, but model.convergence predicts "
            f"{model.metric}"
        )
    return convergence.curve(
        model,
        updates_of(spec, outcome),
        update_ends(spec, outcome),
        spec.training.evaluation.every_steps,
        evaluation_s,
        measure_begin(spec, outcome),
        held=held_by_engine(spec),
    )


def target_columns(
    spec: ScenarioSpec, curve: dict[str, np.ndarray] | None
) -> tuple[dict[str, float], str | None]:
    """results.csv's time-to-target columns and, where they are empty, why."""
    if curve is None:
        return dict.fromkeys(vocab.TARGET_COLUMNS, np.nan), "no training.target"
    target = spec.training.target
    assert target is not None
    return convergence.to_target(curve, target.metric, target.value)


def run_columns(
    spec: ScenarioSpec,
    timed: int,
    row: dict[str, Any],
    curve: dict[str, np.ndarray] | None,
    eval_s: float,
) -> dict[str, Any]:
    """results.csv's times of the whole run, so that they add up (docs/scenarios.md):
    `training_time_s` the measured steps' alone, `evaluation_time_s` every evaluation the
    curve charges, and the curve's last time their sum. Where the engine held the job for
    the evaluations itself (`held_by_engine`), they leave its training time; where it
    timed fewer steps than the run has (`timed_steps`), the run's steps, samples and
    training time are the timed steps' at their mean, as the curve extends them (`timed`:
    the measured steps the engine timed)."""
    out: dict[str, Any] = {"evaluation_time_s": 0.0}
    steps = spec.training.steps
    if timed < steps:  # the curve's update_ends: the rest at the timed steps' mean
        out.update(
            steps=steps,
            training_time_s=row["training_time_s"] * steps / timed,
            samples_trained=row["samples_trained"] * steps / timed,
        )
    if curve is None:
        return out
    marks = curve["step"]
    out["evaluation_time_s"] = eval_s * len(marks)
    if held_by_engine(spec):
        warmup = spec.training.warmup_steps
        within = int(np.sum((marks >= warmup) & (marks < warmup + steps)))
        out["evaluation_time_s"] = eval_s * (within + 1)
        out["training_time_s"] = row["training_time_s"] - eval_s * within
        out["throughput_samples_per_s"] = row["samples_trained"] / out["training_time_s"]
    return out
