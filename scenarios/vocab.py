"""One vocabulary for sim and real (STYLE.md rule 12): phases, columns, file names.

Both backends import these names, so a report cannot tell the sources apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .sections import strategy

# Phases of a worker's timeline (trace events and time accounting).
COMPUTE = "compute"
PUSH = "push"
PULL = "pull"
ALLREDUCE = "allreduce"
WAIT = "wait"
CHECKPOINT = "checkpoint"
RECOVER = "recover"
# a pipeline stage's work on one micro-batch, and what it sends to the next stage
FORWARD = "forward"
BACKWARD = "backward"
SEND = "send"
PHASES = (COMPUTE, PUSH, PULL, ALLREDUCE, WAIT, CHECKPOINT, RECOVER, FORWARD, BACKWARD, SEND)

RESULTS_FILE = "results.csv"
STEPS_FILE = "steps.csv"
META_FILE = "meta.json"
CURVES_FILE = "curves.csv"


def trace_file(point_id: str) -> str:
    return f"trace-{point_id}.json"


#: results.csv's money and energy (costing/), its last columns: the whole run's, and to the
#: target; empty where a figure they need is unknown (meta.json's `costs` says which)
MONEY_AND_ENERGY = ("cost_usd", "energy_kwh", "cost_to_target_usd", "energy_to_target_kwh")

#: results.csv, one row per sweep point, in this column order (docs/scenarios.md, "Result files").
RESULT_COLUMNS = (
    "point",
    "backend",
    "scenario",
    "model",
    "strategy",
    "algorithm",
    "sync",
    "workers",
    "servers",
    "batch_per_worker",
    "peak_learning_rate",
    "steps",
    "samples_trained",
    "step_time_mean_s",
    "step_time_p50_s",
    "step_time_p99_s",
    "step_time_jitter_s",
    "throughput_samples_per_s",
    "scaling_efficiency",
    "compute_time_frac",
    "comm_time_frac",
    "wait_time_frac",
    "bytes_on_network",
    "max_staleness",
    "mean_staleness",
    "dropped_gradients",
    "dropped_samples_per_s",
    "failures",
    "lost_steps",
    "recovery_time_s",
    "checkpoint_time_s",
    "training_time_s",
    "evaluation_time_s",
    "steps_to_target",
    "samples_to_target",
    "epochs_to_target",
    "time_to_target_s",
    "final_metric",
    "peak_memory_bytes",
    "fits",
    "wall_time_s",
    *MONEY_AND_ENERGY,
)

#: simulate's results.csv after RESULT_COLUMNS: each point's interval (measured/errors.py):
#: its class (or why it has none) and the published figures behind it (a calibrated point:
#: its calibration's rounds), the level, and the low and high ends of its throughput, step
#: time and, where it has a target, its time, cost and energy to it; a calibrated point's
#: throughput's standard deviation over the predictions of its calibration's rounds
#: (docs/scenarios.md, "Result files")
INTERVAL_COLUMNS = (
    "interval_class",
    "interval_figures",
    "interval_level",
    "throughput_low_samples_per_s",
    "throughput_high_samples_per_s",
    "step_time_low_s",
    "step_time_high_s",
    "time_to_target_low_s",
    "time_to_target_high_s",
    "cost_to_target_low_usd",
    "cost_to_target_high_usd",
    "energy_to_target_low_kwh",
    "energy_to_target_high_kwh",
    "throughput_calibration_sd_samples_per_s",
)

#: results.csv's time-to-target columns: empty where the point has no target or did not
#: reach it (meta.json's `targets` says why)
TARGET_COLUMNS = (
    "steps_to_target",
    "samples_to_target",
    "epochs_to_target",
    "time_to_target_s",
    "final_metric",
)

#: curves.csv, one row per (point, replication, evaluation): the target metric (`metric`:
#: accuracy | loss; its `value`) after `step` updates, `samples` and `epoch` trained, at
#: `time_s` from the first update's start (the evaluations' own time included)
CURVE_COLUMNS = ("point", "replication", "step", "samples", "epoch", "time_s", "metric", "value")

#: columns that count (workers, steps, samples, updates, bytes, figures): every CSV writes
#: them as integers wherever all the values of one are whole (results/files.py,
#: `csv_chunks`), a missing value empty; a column with a fraction in it stays as it is
INTEGER_COLUMNS = frozenset(
    {
        "workers", "servers", "batch_per_worker", "steps", "samples_trained",
        "bytes_on_network", "max_staleness", "dropped_gradients", "failures", "lost_steps",
        "steps_to_target", "samples_to_target", "peak_memory_bytes", "checkpoints",
        "replications", "interval_figures", "worker", "step", "generation", "trial",
        "replication", "staleness", "staleness_max", "rank", "candidate", "updates",
    }
)  # fmt: skip

#: Columns that measure the machine running the command, not the training: dropped when
#: comparing runs for determinism or against golden files.
WALL_CLOCK_COLUMNS = ("wall_time_s",)

#: steps.csv, one row per (point, worker, step). Times in seconds from the run's start.
STEP_COLUMNS = (
    "point",
    "worker",
    "step",
    "warmup",
    "start_s",
    "compute_end_s",
    "comm_end_s",
    "end_s",
    "replication",
    "generation",
    "lost",
    "trial",
    "staleness",
)

#: steps.csv's forms (meta.json `steps_form`): one row per step, the default, or one per
#: worker-step (`--steps all`)
STEPS_SUMMARY = "summary"
STEPS_ALL = "all"
STEPS_FORMS = (STEPS_SUMMARY, STEPS_ALL)

#: steps.csv in its summary form, one row per (point, replication, step, generation,
#: trial): the workers' rows of that step summed up (results/steps.py)
STEP_SUMMARY_COLUMNS = (
    "point",
    "replication",
    "step",
    "generation",
    "trial",
    "warmup",
    "lost",
    "workers",
    "start_s",
    "compute_end_s",
    "comm_end_s",
    "end_s",
    "step_time_mean_s",
    "step_time_min_s",
    "step_time_max_s",
    "compute_time_mean_s",
    "compute_time_min_s",
    "compute_time_max_s",
    "comm_time_mean_s",
    "comm_time_min_s",
    "comm_time_max_s",
    "staleness_mean",
    "staleness_max",
)


#: results.csv values of a run with no network traffic, staleness, dropped gradients,
#: failures or checkpoints (independent trials; what a backend does not measure)
NO_DYNAMICS = {
    "bytes_on_network": 0.0,
    "max_staleness": 0,
    "mean_staleness": 0.0,
    "dropped_gradients": 0,
    "dropped_samples_per_s": 0.0,
    "failures": 0,
    "lost_steps": 0,
    "recovery_time_s": 0.0,
    "checkpoint_time_s": 0.0,
}


def counts_updates(row: Mapping[Any, Any]) -> bool:
    """Whether a results row's `steps` are updates: asynchronous parameter servers count
    `training.steps` in updates (one worker's batch each, all workers together); every
    other strategy in steps of every worker."""
    return strategy.counts_updates(row["strategy"], row["sync"])


def measured_steps(row: Mapping[Any, Any]) -> str:
    """A results row's `steps` with what they counted: `400 updates`, `100 steps`."""
    steps = f"{float(row['steps']):.0f}"
    if strategy.trains_alone(row["strategy"]):
        return f"{steps} per trial"
    return f"{steps} {'updates' if counts_updates(row) else 'steps'}"
